"""``mcp/list``, ``permissions/list``, ``auth/status`` and ``auth/login``."""

from typing import TYPE_CHECKING

from daemon.server.core import Daemon
from daemon.server.rpc_bridge import RpcBridge
from protocol import methods as m

if TYPE_CHECKING:
    from daemon.providers.device_login import DeviceLogins


class McpAuthHandlers:
    def __init__(self, daemon: Daemon, bridge: RpcBridge) -> None:
        self.daemon = daemon
        self.bridge = bridge  # auth/completed goes to every connection
        self._device_logins: DeviceLogins | None = None  # made on the first auth/login

    async def mcp_list(self, params: m.McpListParams) -> m.McpListResult:
        if params.session_id is not None:
            await self.daemon.sessions.row(params.session_id)  # session_not_found for unknown ids
        return m.McpListResult(servers=await self.daemon.mcp.list_servers(params.session_id))

    async def permissions_list(self, params: m.PermissionsListParams) -> m.PermissionsListResult:
        return await self.daemon.permissions_list(params.session_id)

    async def auth_status(self, params: m.Empty) -> m.AuthStatusResult:
        return await self.daemon.auth_status()

    async def auth_login(self, params: m.AuthLoginParams) -> m.AuthLoginResult:
        # Created on first use; its background polls run in the daemon's task group, which
        # lives as long as the daemon serves. The code is answered at once (see daemon.providers.device_login).
        if self._device_logins is None:
            from daemon.providers.device_login import DeviceLogins  # off the start-up path: few daemons sign in

            daemon = self.daemon
            self._device_logins = DeviceLogins(daemon.config, self.bridge.broadcast, daemon.background_task_group)
        return await self._device_logins.start(params.provider)
