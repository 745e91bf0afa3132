"""The seam a session reaches its client through (``ClientBridge``); extra tool providers
come through ``daemon.tools.source.ToolSource``. Each dialect brings its own bridge: ``daemon.server.rpc_bridge``
for the ponder protocol, ``daemon.acp.bridge`` for ACP."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from protocol.methods import PermissionRequestParams, PermissionRequestResult
from protocol.objects import Session

if TYPE_CHECKING:  # the event types load with the first session, not at start-up
    from daemon.tools.client_files import ClientFiles
    from protocol import events as ev


class PermissionAnswer(msgspec.Struct, frozen=True):
    """A permission request's winning answer, and which connection gave it (``permission_resolved``).
    (A Struct, not a NamedTuple: this module is on the start path, and making a NamedTuple class
    costs ~0.7 M instructions, a Struct's ~0.1 M.)"""

    result: PermissionRequestResult
    resolved_by: "ev.ResolvedBy | None"


class ClientBridge(Protocol):
    """How sessions reach the client."""

    @property
    def can_ask(self) -> bool:
        """Whether asking the client(s) can get an answer (a listening daemon waits for one to attach)."""

    async def emit(self, event: "ev.BaseEvent") -> None:
        """Deliver one ``agent/event`` (a ``protocol.events`` Struct with its seq)."""

    def emit_nowait(self, event: "ev.BaseEvent") -> bool:
        """Deliver ``event`` without yielding if that can be done now; False if not (then
        nothing was sent and the caller awaits ``emit``)."""

    async def session_updated(self, session: Session) -> None:
        """A session's settings or title changed (``session/updated``)."""

    async def ask_permission(self, params: PermissionRequestParams) -> PermissionAnswer:
        """The person's answer (a decision, maybe an edited rule) and who gave it; raises ``ClientRequestError``
        when they cannot be asked."""

    def files_for(self, session_id: str) -> "ClientFiles | None":
        """The client's view of the session's files, when it offers one (ACP ``fs``); None: the disk."""

    def keeps_loaded(self, session_id: str, released: Callable[[], None]) -> bool:
        """Whether a client follows the idle session so that it stays loaded (a listening daemon's
        subscribers: their catch-up and live events need it); then ``released`` is called once
        nobody follows it any more. False where the one client follows everything (stdio): the
        plain idle rule keeps memory bounded there."""
