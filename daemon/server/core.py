"""The daemon's parts, shared by both dialects (the ponder protocol here, ACP in ``daemon.acp``):
config, store, catalogue, provider adapters, the session manager and the MCP servers, built in
one place (``Daemon``, ``open_daemon``), plus the few operations both dialects answer the same way.

Only the config and the store are opened before the first request is served. The catalogue,
the provider adapters, the session manager (and with it the agent, the context rules and the
tools) and the MCP manager are imported and built on first use (``load_parts``, or the first
read of their attribute), so that ``initialize`` and a client that only lists sessions never
load them; ``tests/server/test_start_path.py`` keeps it so. The MCP manager is built only once
there is a server to run (config.toml's, or a client's: ``_McpTools``).

A home or store that cannot be opened does not stop the daemon: ``problems`` says so (each
dialect reports it at initialize) and every session method answers with the same sentence.
"""

import functools
import gc
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from daemon.config.home import make_private_dir
from daemon.config.settings import Config
from daemon.errors import InvalidCursor, InvalidParams
from daemon.jsonrpc.connection import Connection
from daemon.sandbox.confinement import Override
from daemon.sandbox.probe import ProbeRun
from daemon.sandbox.service import Sandbox
from daemon.sessions.bridge import ClientBridge
from daemon.store import AsyncStore, SessionRow
from daemon.vendors.table import OFFLINE_PROVIDERS, PROVIDERS
from protocol import methods as m
from protocol.objects import Session

if TYPE_CHECKING:  # built on first use (see the module docstring)
    from daemon.catalog.catalog import Catalog
    from daemon.mcp.manager import McpManager
    from daemon.permissions.book import PermissionBook
    from daemon.providers.registry import ProviderRegistry
    from daemon.sessions.manager import SessionManager
    from daemon.tools.base import Tool
    from daemon.tools.source import SessionRef

log = logging.getLogger("ponder.server")

PartRun = Callable[..., Coroutine[Any, Any, None]]  # a part's ``run(task_status=...)``, hosted by the daemon
# ``daemon.permissions.always.FILE_NAME``, named here so that start-up sees whether there is one
# without loading the rules.
PERMISSIONS_FILE = "permissions.toml"


class _Started:
    """The ``task_status`` handed to a part's ``run``: says when it has started."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    def started(self, value: object = None) -> None:
        self.event.set()


class _McpTools:
    """MCP as every session's tool source (``ToolSource``), without building the MCP manager
    for a daemon that has no server: config.toml names none, and no client has handed it one
    (ACP's session servers, ``mcp/list`` and tests build it through ``Daemon.mcp``; from then
    on its tools are asked here). Importing and building it costs a session's first request
    a few milliseconds that most daemons never need."""

    def __init__(self, daemon: "Daemon") -> None:
        self._daemon = daemon

    async def tools_for(self, row: "SessionRef") -> "dict[str, Tool[Any]]":
        daemon = self._daemon
        if daemon._mcp is None and not daemon.config.mcp_servers:
            return {}
        return await daemon.mcp.tools_for(row)


class Daemon:
    """The parts one served connection runs on, whatever its dialect."""

    def __init__(
        self,
        config: Config,
        connection: Connection | None,
        store: AsyncStore,
        bridge: ClientBridge,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.config = config
        # The one connection of a stdio daemon (either dialect); None when it listens for many.
        self.connection = connection
        self.closing = False  # shutting down: no new background work
        self.warm_up = True  # load the session stack on a thread shortly after initialize
        self.warm_up_started = False
        self.store = store
        self.bridge = bridge
        self._catalog: Catalog | None = None
        self._providers: ProviderRegistry | None = None
        self._mcp: McpManager | None = None
        self._sessions: SessionManager | None = None
        self._task_group: TaskGroup | None = None  # hosts the parts' runs (``attach``)
        self._waiting_runs: list[tuple[PartRun, _Started]] = []  # built before ``attach``
        self._started: list[_Started] = []
        self._permissions: PermissionBook | None = None
        # run_command's OS sandbox (MCP servers are not sandboxed); probed on a thread.
        self.sandbox = Sandbox(config.sandbox, config.home) if sandbox is None else sandbox
        self.shutdown_requested = anyio.Event()
        if any(provider.models for provider in config.providers.values()):
            self.catalog  # noqa: B018 - declared models are checked now: initialize reports their problems
        if config.permission_rules or config.hooks or (config.home / PERMISSIONS_FILE).exists():
            self.permissions  # noqa: B018 - so are rules and hooks (when there are any)
        # What initialize reports: the config's problems, then the store's (asked again at each
        # initialize: a server that could not be reached at start may be back), then its notice.
        self.problems = [
            *config.problems,
            *(self._permissions.problems if self._permissions is not None else []),
        ]
        for problem in [*self.problems, store.store.problem, store.store.notice]:
            if problem:
                log.warning("%s", problem)

    async def problems_now(self) -> list[str]:
        """What ``initialize`` reports: the config's and the store's problems, and a missing sandbox."""
        if not self.sandbox.probed:  # (open_daemon waited already; without a yield, answers stay in order)
            await anyio.to_thread.run_sync(self.sandbox.wait_probed)
        sandbox_problem = self.sandbox.problem()
        store_problem = await self.store.problem_now()
        notice = self.store.store.notice
        return [
            *self.problems,
            *([store_problem] if store_problem else []),
            *([notice] if notice else []),
            *([sandbox_problem] if sandbox_problem else []),
        ]

    # --- the parts, built on first use -----------------------------------------------------

    @property
    def catalog(self) -> "Catalog":
        if self._catalog is None:
            from daemon.catalog.catalog import Catalog

            self._catalog = Catalog(self.config)
        return self._catalog

    @property
    def providers(self) -> "ProviderRegistry":
        if self._providers is None:
            from daemon.providers.registry import ProviderRegistry

            self._providers = ProviderRegistry(self.config)
        return self._providers

    @property
    def mcp(self) -> "McpManager":
        """MCP servers: a tool source for every session, and ``mcp/list``."""
        if self._mcp is None:
            from daemon.mcp.manager import McpManager

            self._mcp = McpManager(self.config)
            self._host(self._mcp.run)
        return self._mcp

    @mcp.setter
    def mcp(self, manager: "McpManager") -> None:  # tests put a fake in its place
        self._mcp = manager

    @property
    def permissions(self) -> "PermissionBook":
        """Rules and hooks, checked once (when built)."""
        if self._permissions is None:
            from daemon.permissions.book import PermissionBook

            self._permissions = PermissionBook(self.config)
        return self._permissions

    @property
    def sessions(self) -> "SessionManager":
        if self._sessions is None:
            from daemon.sessions.manager import SessionManager

            if self.config.mcp_servers:
                self.mcp  # noqa: B018 - config.toml's servers: built and running with the session manager
            self._sessions = SessionManager(
                self.config,
                self.store,
                self.catalog,
                self.providers,
                self.bridge,
                tool_sources=[_McpTools(self)],
                discover_models=self._discover_for,
                sandbox=self.sandbox,
                permissions=self.permissions,
            )
            self._host(self._sessions.run)
        return self._sessions

    async def load_parts(self) -> None:
        """Build the session manager (and the MCP manager, when config.toml has servers) if not
        yet, and wait until they run."""
        if self._sessions is not None and all(started.event.is_set() for started in self._started):
            return
        # Its imports (the agent, the tools, MCP, the context rules) allocate what lives as long
        # as the daemon: the collector stays off while they load, and what they made is frozen.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self.sessions  # noqa: B018 - builds it (and the MCP manager, see sessions) on first use
        finally:
            if collecting:
                gc.enable()
        for started in self._started:
            await started.event.wait()
        # What the parts loaded lives as long as the daemon: keep the collector from walking
        # it again on every full collection (serve_connection froze what start-up loaded).
        gc.freeze()

    def _host(self, run: PartRun) -> None:
        started = _Started()
        self._started.append(started)
        if self._task_group is None:
            self._waiting_runs.append((run, started))
        else:
            self._task_group.start_soon(functools.partial(run, task_status=started))

    def attach(self, task_group: TaskGroup) -> None:
        """Host the parts' runs in ``task_group`` from now on (those built already start now)."""
        self._task_group = task_group
        for run, started in self._waiting_runs:
            task_group.start_soon(functools.partial(run, task_status=started))
        self._waiting_runs.clear()

    def background_task_group(self) -> TaskGroup | None:
        """Where daemon-lifetime background work (the warm-up, a device-login poll) runs; None once shutting down."""
        return None if self.closing else self._task_group

    @property
    def parts_built(self) -> bool:
        """Whether the session manager or the MCP manager was built (something ran besides listing)."""
        return self._sessions is not None or self._mcp is not None

    async def close_parts(self) -> None:
        """Cancel the running turns (they persist their last messages), then close the MCP servers."""
        if self._sessions is not None:
            await self._sessions.shutdown()
        if self._mcp is not None:
            await self._mcp.aclose()  # after the turns: no call is left waiting on a server

    def is_loaded(self, session_id: str) -> bool:
        """Whether the session is live in this daemon (``session/list`` rows say so)."""
        return self._sessions is not None and self._sessions.is_live(session_id)

    def wire_session(self, row: SessionRow) -> Session:
        """A stored session as the wire shows it (its live status when loaded)."""
        if self._sessions is not None:
            return self._sessions.wire_session(row)
        session = row.to_wire("idle", self.config.budget)
        session.sandbox = self.sandbox.wire(row.id, row.cwd, Override.stored(row.sandbox_mode, row.sandbox_network))
        return session

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
            from daemon.providers.registry import load  # the adapter module of the discovery

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
        from daemon.config.settings import apply_stored_login

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
async def open_daemon(
    config: Config, connection: Connection | None, bridge: ClientBridge, *, sandbox_probe: ProbeRun | None = None
) -> AsyncIterator[Daemon]:
    """Open the home and the store and build the parts; close the MCP servers, the provider
    clients and the store on the way out (whatever ended the daemon). ``sandbox_probe``: the
    probe ``ponder serve`` started before loading its stack (else one starts now)."""
    try:
        make_private_dir(config.home)
    except OSError as exc:
        log.warning("cannot create the home %s: %s", config.home, exc)  # the store says what this means
    # The sandbox probe (a bwrap run, ~10 ms) overlaps opening the store; it is done before the
    # first request is read, so initialize answers at once and in order.
    sandbox = Sandbox(config.sandbox, config.home, probing=sandbox_probe)
    store = await AsyncStore.open_configured(
        config.db_path, config.store_url, pooler=config.store_pooler, listen_url=config.store_listen_url
    )
    daemon = None
    try:
        daemon = Daemon(config, connection, store, bridge, sandbox)
        if sandbox.probed:
            sandbox.wait_probed()  # done already: no thread needed
        else:
            await anyio.to_thread.run_sync(sandbox.wait_probed)
        yield daemon
    finally:
        with anyio.CancelScope(shield=True):
            if daemon is not None:
                if daemon._mcp is not None:
                    await daemon._mcp.aclose()
                if daemon._providers is not None:
                    await daemon._providers.aclose()
            sandbox.close()
            await store.aclose()
