"""The ``ClientBridge`` of the ponder protocol: events as ``agent/event`` notifications, setting
changes as ``session/updated``, approvals as ``permission/request`` over the JSON-RPC connection."""

from typing import TYPE_CHECKING

from daemon.jsonrpc.connection import Connection
from protocol.methods import PermissionRequestParams, PermissionRequestResult
from protocol.objects import Session

if TYPE_CHECKING:  # the event types load with the first session, not at start-up
    from daemon.tools.client_files import ClientFiles
    from protocol import events as ev


class RpcBridge:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.can_ask = False  # set by initialize

    async def emit(self, event: "ev.BaseEvent") -> None:
        await self.connection.notify("agent/event", event)

    def emit_nowait(self, event: "ev.BaseEvent") -> bool:
        return self.connection.notify_nowait("agent/event", event)

    async def session_updated(self, session: Session) -> None:
        await self.connection.notify("session/updated", {"session": session})

    async def ask_permission(self, params: PermissionRequestParams) -> PermissionRequestResult:
        return await self.connection.request("permission/request", params, PermissionRequestResult)

    def files_for(self, session_id: str) -> "ClientFiles | None":
        return None  # the ponder dialect's file tools use the disk
