"""The seam a session reaches its client through (``ClientBridge``); extra tool providers
come through ``daemon.tools.source.ToolSource``. Each dialect brings its own bridge: ``daemon.server.rpc_bridge``
for the ponder protocol, ``daemon.acp.bridge`` for ACP."""

from typing import TYPE_CHECKING, Protocol

from protocol.methods import PermissionRequestParams, PermissionRequestResult
from protocol.objects import Session

if TYPE_CHECKING:  # the event types load with the first session, not at start-up
    from daemon.tools.client_files import ClientFiles
    from protocol import events as ev


class ClientBridge(Protocol):
    """How sessions reach the client."""

    can_ask: bool  # whether the client answers permission requests

    async def emit(self, event: "ev.BaseEvent") -> None:
        """Deliver one ``agent/event`` (a ``protocol.events`` Struct with its seq)."""

    def emit_nowait(self, event: "ev.BaseEvent") -> bool:
        """Deliver ``event`` without yielding if that can be done now; False if not (then
        nothing was sent and the caller awaits ``emit``)."""

    async def session_updated(self, session: Session) -> None:
        """A session's settings or title changed (``session/updated``)."""

    async def ask_permission(self, params: PermissionRequestParams) -> PermissionRequestResult:
        """The person's answer (a decision, maybe an edited rule); raises ``ClientRequestError``
        when they cannot be asked."""

    def files_for(self, session_id: str) -> "ClientFiles | None":
        """The client's view of the session's files, when it offers one (ACP ``fs``); None: the disk."""
