"""MCP servers as a tool source: which servers a session has, their processes and their fate.

Servers come from ``[mcp_servers.NAME]`` (every session) and from ACP clients
(``add_session_servers``, one session; an entry with a config server's name replaces
it for that session). Identical specs share one process across sessions.

Lifecycle of a server (a ``ServerHandle``): ``stopped`` until first needed (a turn's
tools or ``mcp/list``), then ``starting`` (spawn, ``initialize``, ``tools/list``,
bounded by ``startup_timeout_s``), then ``ready``. A server that cannot start, times
out, crashes or stops answering is ``failed``: its error and stderr tail go to the log
and to ``mcp/list``, its tools are left out of the next request, the turn goes on, and
it is started again on a later turn once its backoff (doubling, capped) has passed.
One supervisor task per running server, in the manager's task group, owns the process;
stopping it closes stdin, then SIGTERMs, then SIGKILLs the process group.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup

from daemon.config.settings import Config
from daemon.mcp.client import EXIT_SETTLE_S, McpClient, McpConnectionClosed, McpError, McpTimeout, open_stdio_client
from daemon.mcp.spec import ServerSpec, parse_acp_server, parse_config_server
from daemon.mcp.tools import McpTool
from daemon.tools.base import Tool
from daemon.tools.source import SessionRef, ToolSource
from daemon.util import redact
from protocol import methods as m

__all__ = ["McpManager", "ServerHandle"]

log = logging.getLogger("ponder.mcp")

Status = Literal["starting", "ready", "failed", "stopped"]
STABLE_S = 60.0  # a server up this long before failing starts its backoff afresh


class ServerHandle:
    """One MCP server: its spec, status, tools, and the supervisor of its process."""

    def __init__(self, spec: ServerSpec, manager: McpManager, problem: str | None = None) -> None:
        self.spec = spec
        self.manager = manager
        self.problem = problem  # a configuration problem: never started
        self.status: Status = "failed" if problem else "stopped"
        self.error: str | None = problem if problem else None if spec.enabled else "disabled (enabled = false)"
        self.client: McpClient | None = None
        self.tools: list[McpTool] = []
        self.failures = 0
        self.retry_at = 0.0
        self.ready_since = 0.0
        self._attempt: anyio.Event | None = None  # set when the current start succeeds or fails
        self._exited: anyio.Event | None = None  # set when the supervisor has stopped the process
        self._scope: anyio.CancelScope | None = None
        self._stop_requested = False
        self._stale = False
        self._refreshing: anyio.Event | None = None
        self._checking = False

    def describe(self) -> str:
        return f"{self.status}: {self.error}" if self.error else self.status

    # --- starting ---------------------------------------------------------------------

    async def ensure_ready(self) -> None:
        """Start the server if it is due, and wait (bounded) until it is ready or failed.

        Never raises (but for cancellation): a broken server must not break a turn.
        """
        try:
            if self.status == "ready":
                await self._wait_refresh()
            elif self.status == "starting":
                await self._wait_attempt()
            elif self._due():
                self._start()
                await self._wait_attempt()
        except Exception:
            log.exception("MCP server %s: could not be started", self.spec.name)

    def _due(self) -> bool:
        if self.problem or not self.spec.enabled or self.manager.closing:
            return False
        if self._exited is not None and not self._exited.is_set():
            return False  # the previous process is still being stopped: never two at once
        return self.status == "stopped" or (self.status == "failed" and time.monotonic() >= self.retry_at)

    def _start(self) -> None:
        tg = self.manager.task_group
        if tg is None:
            self.status, self.error, self.retry_at = "failed", "ponder's MCP manager is not running.", math.inf
            log.error("MCP server %s needed but McpManager.run was not started", self.spec.name)
            return
        self.status, self.error = "starting", None
        self._stop_requested = False
        self._attempt, self._exited = anyio.Event(), anyio.Event()
        tg.start_soon(self._supervise, self._attempt, self._exited)

    async def _wait_attempt(self) -> None:
        attempt = self._attempt
        if attempt is not None:
            with anyio.move_on_after(self.spec.startup_timeout_s + EXIT_SETTLE_S + 1):
                await attempt.wait()

    async def _supervise(self, attempt: anyio.Event, exited: anyio.Event) -> None:
        client_seen: McpClient | None = None
        failure: str | None = None
        reported = False

        def report() -> None:
            # Before the process is stopped (which may take the grace periods): whoever
            # waits on this start learns at once that it failed, and why.
            nonlocal reported
            reported = True
            self.client = None
            self.tools = []
            if failure is None or self._stop_requested or self.manager.closing:
                self.status = "stopped"
            else:
                self._fail(failure, client_seen.stderr.text() if client_seen is not None else "")
            attempt.set()

        scope = anyio.CancelScope()
        try:
            with scope:
                self._scope = scope
                if self._stop_requested:
                    scope.cancel()
                try:
                    async with open_stdio_client(
                        self.spec, close_grace_s=self.manager.close_grace_s, kill_grace_s=self.manager.kill_grace_s
                    ) as client:
                        client_seen = client
                        failure = await self._serve(client, attempt)
                        report()
                except OSError as exc:
                    failure = f"it could not be started ({self.spec.command!r}: {exc.strerror or exc})"
                except Exception as exc:
                    log.exception("MCP server %s: unexpected failure", self.spec.name)
                    failure = f"ponder's MCP client failed ({type(exc).__name__}); details are in the log"
        finally:
            if self._scope is scope:
                self._scope = None
            if not reported:
                report()
            exited.set()

    async def _serve(self, client: McpClient, attempt: anyio.Event) -> str:
        """Handshake, list tools, then wait for the end; returns why the server is gone."""
        limit = self.spec.startup_timeout_s
        try:
            with anyio.fail_after(limit):
                await client.initialize()
                raw_tools = await client.list_tools() if client.has_tools else []
        except TimeoutError:
            return f"it did not finish starting within {limit:g} s (initialize or tools/list went unanswered)"
        except McpConnectionClosed as exc:
            return f"{exc} during start-up"
        except McpError as exc:
            return f"start-up failed: {exc}"
        self._set_tools(raw_tools)
        self.client = client
        client.on_tools_changed = self._tools_changed
        self.status, self.error, self.ready_since = "ready", None, time.monotonic()
        attempt.set()
        info = client.server_info
        log.info(
            "MCP server %s ready (%s %s, protocol %s) with %d tools",
            self.spec.name, info.get("name", "?"), info.get("version", "?"), client.protocol_version, len(self.tools),
        )  # fmt: skip
        await client.closed.wait()
        return client.close_reason

    def _fail(self, failure: str, stderr_tail: str) -> None:
        now = time.monotonic()
        if self.ready_since and now - self.ready_since >= STABLE_S:
            self.failures = 0
        self.failures += 1
        delay = min(self.manager.backoff_cap_s, self.manager.backoff_base_s * 2 ** (self.failures - 1))
        self.retry_at = now + delay
        self.ready_since = 0.0
        self.status = "failed"
        failure = failure.rstrip(".")
        error = failure[:1].upper() + failure[1:] + "."
        if stderr_tail:
            error += f" Its last stderr output:\n{stderr_tail}"
        self.error = redact.scrub(error)  # a server's own words, which may echo its token, reach mcp/list
        log.warning(
            "MCP server %s failed; retrying on a later turn, in %.3g s at the earliest. %s",
            self.spec.name,
            delay,
            self.error,
        )

    # --- tools ------------------------------------------------------------------------

    def _set_tools(self, raw_tools: list[dict[str, Any]]) -> None:
        tools: dict[str, McpTool] = {}
        for raw in raw_tools:
            tool = McpTool(self, raw)
            if tool.name in tools:
                log.warning(
                    "MCP server %s: tool %r clashes with another as %s; keeping the first",
                    self.spec.name,
                    raw["name"],
                    tool.name,
                )
                continue
            tools[tool.name] = tool
        self.tools = list(tools.values())

    def _tools_changed(self) -> None:
        """notifications/tools/list_changed: refetch in the background; the next turn waits for it."""
        self._stale = True
        client = self.client
        if client is not None and self._refreshing is None:
            self._refreshing = anyio.Event()
            client.start_soon(self._refresh, client, self._refreshing)

    async def _refresh(self, client: McpClient, done: anyio.Event) -> None:
        try:
            while self._stale:
                self._stale = False
                try:
                    raw_tools = await client.list_tools(timeout=self.spec.timeout_s)
                except McpError as exc:
                    log.warning("MCP server %s: refreshing its tools failed: %s", self.spec.name, exc)
                    return
                if self.client is client:
                    self._set_tools(raw_tools)
                    log.info("MCP server %s now has %d tools", self.spec.name, len(self.tools))
        finally:
            self._refreshing = None
            done.set()

    async def _wait_refresh(self) -> None:
        refreshing = self._refreshing
        if refreshing is not None:
            with anyio.move_on_after(self.spec.timeout_s):
                await refreshing.wait()

    def check_alive(self) -> None:
        """After a call timed out: ping the server, and treat it as failed if that goes unanswered too."""
        client = self.client
        if client is None or self._checking:
            return
        self._checking = True
        client.start_soon(self._ping, client)

    async def _ping(self, client: McpClient) -> None:
        try:
            await client.ping(self.manager.ping_timeout_s)
        except McpTimeout:
            client.abort(
                "it stopped answering (a tool call timed out, then a ping got no answer within "
                f"{self.manager.ping_timeout_s:g} s)"
            )
        except McpError:
            pass
        finally:
            self._checking = False

    # --- stopping ---------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the process (stdin, SIGTERM, SIGKILL) and wait for it; never raises."""
        self._stop_requested = True
        if self._scope is not None:
            self._scope.cancel()
        exited = self._exited
        if exited is not None:
            with anyio.move_on_after(self.manager.close_grace_s + self.manager.kill_grace_s + 3, shield=True):
                await exited.wait()

    def to_wire(self) -> m.McpServer:
        tools = (
            [m.McpTool(name=t.tool_name, description=t.description) for t in self.tools]
            if self.status == "ready"
            else []
        )
        return m.McpServer(name=self.spec.name, status=self.status, error=self.error, tools=tools)


class McpManager(ToolSource):
    """The ``ToolSource`` of MCP tools, and the owner of every MCP server process.

    Start ``run`` in a task group (``await tg.start(manager.run)``) before use; its task
    group hosts the servers. ``aclose`` stops them all; it is idempotent.
    """

    def __init__(
        self,
        config: Config,
        *,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 60.0,
        close_grace_s: float = 2.0,
        kill_grace_s: float = 2.0,
        ping_timeout_s: float = 5.0,
    ) -> None:
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.close_grace_s = close_grace_s
        self.kill_grace_s = kill_grace_s
        self.ping_timeout_s = ping_timeout_s
        self.closing = False
        self.task_group: TaskGroup | None = None
        self._handles: dict[ServerSpec, ServerHandle] = {}
        self._config: dict[str, ServerHandle] = {}
        self._sessions: dict[str, dict[str, ServerHandle]] = {}
        for name, raw in config.mcp_servers.items():
            self._config[name] = self._handle_for(name, parse_config_server(name, raw))

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the servers' supervisors until cancelled; cancelling stops every server."""
        try:
            async with anyio.create_task_group() as tg:
                self.task_group = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self.task_group = None
            self.closing = True

    async def aclose(self) -> None:
        self.closing = True
        async with anyio.create_task_group() as tg:
            for handle in list(self._handles.values()):
                tg.start_soon(handle.stop)

    # --- which servers ----------------------------------------------------------------

    def _handle_for(self, name: str, parsed: ServerSpec | str) -> ServerHandle:
        if isinstance(parsed, str):
            log.warning("%s", parsed)
            return ServerHandle(ServerSpec(name=name, command=""), self, problem=parsed)
        handle = self._handles.get(parsed)
        if handle is None:
            handle = self._handles[parsed] = ServerHandle(parsed, self)
        return handle

    def handles_for(self, session_id: str | None) -> list[ServerHandle]:
        merged = dict(self._config)
        if session_id is not None:
            merged.update(self._sessions.get(session_id, {}))
        return list(merged.values())

    async def add_session_servers(
        self, session_id: str, servers: list[dict[str, Any]], *, cwd: str | None = None
    ) -> None:
        """Set the MCP servers an ACP client gave for one session (``session/new``/``session/load``).

        ``servers`` are ACP ``McpServer`` entries; stdio ones (``{name, command, args,
        env: [{name, value}]}``) are used, http/sse ones skipped. They start when first
        needed, in ``cwd`` when given. Calling it again replaces the session's set.
        """
        mapping: dict[str, ServerHandle] = {}
        for raw in servers:
            parsed = parse_acp_server(raw, cwd)
            if parsed is None:
                log.info("session %s: skipping a non-stdio MCP server (ponder speaks stdio only)", session_id)
                continue
            name = parsed.name if isinstance(parsed, ServerSpec) else raw.get("name")
            handle = self._handle_for(str(name or "unnamed"), parsed)
            mapping[handle.spec.name] = handle
        previous = self._sessions.get(session_id, {})
        self._sessions[session_id] = mapping
        await self._stop_unused(previous.values())

    async def remove_session_servers(self, session_id: str) -> None:
        """Forget a session's own servers (e.g. the ACP session closed); unused ones stop."""
        await self._stop_unused(self._sessions.pop(session_id, {}).values())

    async def _stop_unused(self, candidates: Any) -> None:
        used = {id(h) for h in self._config.values()} | {id(h) for s in self._sessions.values() for h in s.values()}
        for handle in candidates:
            if id(handle) not in used:
                self._handles.pop(handle.spec, None)
                await handle.stop()

    # --- what the daemon asks -----------------------------------------------------------

    async def tools_for(self, row: SessionRef) -> dict[str, Tool[Any]]:
        """The tools of the session's ready servers, starting those that are due."""
        handles = self.handles_for(row.id)
        if not handles:
            return {}
        await self._ensure(handles)
        tools: dict[str, Tool[Any]] = {}
        for handle in handles:
            if handle.status == "ready":
                for tool in handle.tools:
                    tools.setdefault(tool.name, tool)
        return tools

    async def list_servers(self, session_id: str | None = None) -> list[m.McpServer]:
        """Every server (of the session, when given) with its status, error and tools.

        Listing counts as a need: servers that are due are started first, so a person
        running ``ponder mcp`` sees the tools, or why there are none.
        """
        handles = self.handles_for(session_id)
        await self._ensure(handles)
        return [handle.to_wire() for handle in handles]

    async def _ensure(self, handles: list[ServerHandle]) -> None:
        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(handle.ensure_ready)
