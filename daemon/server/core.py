"""The daemon's parts, shared by both dialects (the ponder protocol here, ACP in ``daemon.acp``):
config, store, catalogue, provider adapters, the session manager and the MCP servers, built in
one place (``open_daemon``), plus the few operations both dialects answer the same way.

A home or store that cannot be opened does not stop the daemon: ``problems`` says so (each
dialect reports it at initialize) and every session method answers with the same sentence.
"""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from daemon.catalog.catalog import Catalog
from daemon.config.home import make_private_dir
from daemon.config.settings import Config, apply_stored_login
from daemon.errors import InvalidCursor, InvalidParams
from daemon.jsonrpc.connection import Connection
from daemon.mcp import McpManager
from daemon.permissions.book import PermissionBook
from daemon.providers.registry import ProviderRegistry, load
from daemon.sandbox.service import Sandbox
from daemon.sessions import ClientBridge, SessionManager
from daemon.store import AsyncStore, SessionRow
from daemon.vendors.table import OFFLINE_PROVIDERS, PROVIDERS
from protocol import methods as m

log = logging.getLogger("ponder.server")


class Daemon:
    """The parts one served connection runs on, whatever its dialect."""

    def __init__(
        self,
        config: Config,
        connection: Connection,
        store: AsyncStore,
        bridge: ClientBridge,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.config = config
        self.connection = connection
        self.store = store
        self.catalog = Catalog(config)
        self.providers = ProviderRegistry(config)
        self.mcp = McpManager(config)  # MCP servers: a tool source for every session, and mcp/list
        # run_command's OS sandbox (MCP servers are not sandboxed); probed on a thread.
        self.sandbox = Sandbox(config.sandbox, config.home) if sandbox is None else sandbox
        self.permissions = PermissionBook(config)  # rules and hooks, checked once here
        self.sessions = SessionManager(
            config,
            store,
            self.catalog,
            self.providers,
            bridge,
            tool_sources=[self.mcp],
            discover_models=self._discover_for,
            sandbox=self.sandbox,
            permissions=self.permissions,
        )
        self.shutdown_requested = anyio.Event()
        # What initialize reports: the config's problems, then the store's (if it could not be opened).
        self.problems = [
            *config.problems,
            *self.permissions.problems,
            *([store.store.problem] if store.store.problem else []),
        ]
        for problem in self.problems:
            log.warning("%s", problem)

    async def problems_now(self) -> list[str]:
        """What ``initialize`` reports: the config's and the store's problems, and a missing sandbox."""
        if not self.sandbox.probed:  # (open_daemon waited already; without a yield, answers stay in order)
            await anyio.to_thread.run_sync(self.sandbox.wait_probed)
        sandbox_problem = self.sandbox.problem()
        return [*self.problems, *([sandbox_problem] if sandbox_problem else [])]

    # --- models ---------------------------------------------------------------------------

    async def _discover_for(self, model_id: str) -> None:
        await self.discover_models(model_id.split("/", 1)[0] if "/" in model_id else None)

    async def discover_models(self, provider: str | None = None) -> None:
        """Ask the providers that list their models at run time (``ProviderInfo.discovery``;
        ``provider`` only, or all of them) which models they serve (cached briefly; fast when absent)."""
        for name, info in PROVIDERS.items():
            settings = self.config.providers.get(name)
            if info.discovery is None or provider not in (None, name) or settings is None or not settings.configured:
                continue
            specs = await load(info.discovery)(settings)
            self.catalog.clear_runtime_models(name)
            self.catalog.add_runtime_models(name, specs)

    async def models_list(self, provider: str | None) -> m.ModelsListResult:
        await self.discover_models(provider)
        specs = self.catalog.list_models(provider)
        return m.ModelsListResult(models=[self.catalog.to_wire(spec) for spec in specs])

    # --- sessions and auth ------------------------------------------------------------------

    async def list_sessions(
        self, cwd: str | None, limit: int, cursor: str | None
    ) -> tuple[list[SessionRow], str | None]:
        """A page of stored sessions; a cursor the store did not hand out is the client's mistake."""
        try:
            return await self.store.list_sessions(cwd, limit, cursor)
        except InvalidCursor as exc:
            raise InvalidParams(exc.message, path="$.params.cursor") from None

    async def permissions_list(self, session_id: str | None) -> m.PermissionsListResult:
        """Every rule in force; for a session, those that apply to it and then its policy's."""
        session = None
        if session_id is not None:
            row = await self.sessions.row(session_id)
            session = (row.id, Path(row.cwd), row.approval_policy)
        return m.PermissionsListResult(
            rules=self.permissions.listing(session), problems=list(self.permissions.problems)
        )

    async def auth_status(self) -> m.AuthStatusResult:
        # Re-read the stored sign-ins: another daemon on this home may have signed in.
        await anyio.to_thread.run_sync(apply_stored_login, self.config)
        return m.AuthStatusResult(
            providers=[
                m.AuthProvider(provider=p.name, configured=p.configured, source=p.key_source)  # type: ignore[arg-type]
                for p in self.config.providers.values()
                if p.name not in OFFLINE_PROVIDERS
            ]
        )


@asynccontextmanager
async def open_daemon(config: Config, connection: Connection, bridge: ClientBridge) -> AsyncIterator[Daemon]:
    """Open the home and the store and build the parts; close the MCP servers, the provider
    clients and the store on the way out (whatever ended the daemon)."""
    try:
        make_private_dir(config.home)
    except OSError as exc:
        log.warning("cannot create the home %s: %s", config.home, exc)  # the store says what this means
    # The sandbox probe (a bwrap run, ~20 ms) overlaps opening the store; it is done before the
    # first request is read, so initialize answers at once and in order.
    sandbox = Sandbox(config.sandbox, config.home)
    store = await AsyncStore.open_or_unavailable(config.db_path)
    daemon = None
    try:
        daemon = Daemon(config, connection, store, bridge, sandbox)
        await anyio.to_thread.run_sync(sandbox.wait_probed)
        yield daemon
    finally:
        with anyio.CancelScope(shield=True):
            if daemon is not None:
                await daemon.mcp.aclose()
                await daemon.providers.aclose()
            sandbox.close()
            await store.aclose()
