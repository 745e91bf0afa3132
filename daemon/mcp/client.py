"""The MCP client side of one stdio server: a child process speaking NDJSON JSON-RPC 2.0.

``open_stdio_client(spec)`` starts the server in its own process group and yields an
``McpClient`` whose reader tasks route responses to their requests, progress
notifications to the call that asked for them, and answer the server's ``ping``.
Leaving the block stops the server the way the MCP stdio transport asks: close its
stdin, wait, then SIGTERM and finally SIGKILL for the whole process group (``npx``
and ``uvx`` start grandchildren that must not outlive us). The group is also handed to
``procgroup.watch_group``, so it ends when the daemon does, however the daemon ends.

Framing is ponder's own (``LineSplitter``, msgspec), so there is no runtime dependency
on an MCP SDK. Failures are ``McpError`` subclasses whose messages are sentences a
person (or the model) can act on.
"""

from __future__ import annotations

import codecs
import collections
import itertools
import logging
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
from anyio.abc import Process, TaskGroup

from daemon import __version__
from daemon.jsonrpc.framing import LineSplitter, _Overlong
from daemon.mcp.spec import ServerSpec, server_env
from daemon.tools.procgroup import group_alive, release_group, terminate_group, watch_group
from daemon.util import redact

__all__ = [
    "PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "McpClient",
    "McpConnectionClosed",
    "McpError",
    "McpRemoteError",
    "McpTimeout",
    "open_stdio_client",
]

log = logging.getLogger("ponder.mcp")

PROTOCOL_VERSION = "2025-11-25"  # what we ask for; a server may answer with an older one
SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MAX_LINE_BYTES = 32 * 1024 * 1024
MAX_TOOL_PAGES = 100  # a server whose cursors never end must not hang the start
STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 2000
EXIT_SETTLE_S = 1.0  # after stdout closes, how long to wait for the exit status and last stderr
CANCEL_NOTICE_S = 1.0


class McpError(Exception):
    """Anything that went wrong talking to a server; the message is for people."""


class McpConnectionClosed(McpError):
    pass


class McpTimeout(McpError):
    pass


class McpRemoteError(McpError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Request(msgspec.Struct, omit_defaults=True):
    # Not rpc._Request: MCP servers (pydantic, zod) may reject "params": null, so absent
    # params must be omitted, not encoded.
    jsonrpc: str
    id: int
    method: str
    params: dict[str, Any] | None = None


class _Notification(msgspec.Struct, omit_defaults=True):
    jsonrpc: str
    method: str
    params: dict[str, Any] | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class StderrTail:
    """The last lines a server wrote to stderr, for error reports; each line is logged too."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk: bytes) -> None:
        text = self._partial + self._decoder.decode(chunk)
        *complete, self._partial = text.split("\n")
        for line in complete:
            self._add(line)
        if len(self._partial) > STDERR_TAIL_CHARS:  # a line without end: keep its tail
            self._partial = self._partial[-STDERR_TAIL_CHARS:]

    def finish(self) -> None:
        self._add(self._partial + self._decoder.decode(b"", final=True))
        self._partial = ""

    def _add(self, line: str) -> None:
        line = redact.scrub(line.rstrip())  # the tail reaches mcp/list and tool results
        if line:
            log.debug("[%s stderr] %s", self.server, line)
            self.lines.append(line)

    def text(self) -> str:
        text = "\n".join(self.lines)
        return text if len(text) <= STDERR_TAIL_CHARS else "…" + text[-STDERR_TAIL_CHARS:]


class _Pending:
    __slots__ = ("done", "error", "message")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.message: dict[str, Any] | None = None
        self.error: McpError | None = None


class McpClient:
    """JSON-RPC requests and notifications to one running server (see ``open_stdio_client``)."""

    def __init__(self, spec: ServerSpec, process: Process, tg: TaskGroup) -> None:
        self.spec = spec
        self.name = spec.name
        self.process = process
        self._tg = tg
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._progress: dict[str, Callable[[dict[str, Any]], None]] = {}
        self._write_lock = anyio.Lock()
        self._stderr_done = anyio.Event()
        self.stderr = StderrTail(spec.name)
        self.closed = anyio.Event()
        self.close_reason = ""
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        # Called (synchronously, from the reader) on notifications/tools/list_changed.
        self.on_tools_changed: Callable[[], None] | None = None

    # --- the MCP methods ponder uses --------------------------------------------------

    async def initialize(self) -> None:
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},  # no roots, sampling or elicitation: we would only refuse them
                "clientInfo": {"name": "ponder", "version": __version__},
            },
        )
        version = result.get("protocolVersion")
        if version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise McpError(
                f"it speaks MCP protocol version {version!r}, which ponder does not support "
                f"(supported: {', '.join(SUPPORTED_PROTOCOL_VERSIONS)})."
            )
        self.protocol_version = version
        self.capabilities = found if isinstance(found := result.get("capabilities"), dict) else {}
        self.server_info = found if isinstance(found := result.get("serverInfo"), dict) else {}
        await self.notify("notifications/initialized")

    @property
    def has_tools(self) -> bool:
        return "tools" in self.capabilities

    async def list_tools(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, following ``nextCursor`` across pages; malformed entries are dropped."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        with anyio.move_on_after(timeout) as deadline:
            for _page in range(MAX_TOOL_PAGES):
                result = await self.request("tools/list", {"cursor": cursor} if cursor is not None else None)
                for tool in result.get("tools") or []:
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"]:
                        tools.append(tool)
                    else:
                        log.warning("MCP server %s listed a malformed tool; ignoring it", self.name)
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor or cursor in seen:
                    break
                seen.add(cursor)
        if deadline.cancelled_caught:
            raise McpTimeout(f"tools/list got no answer within {timeout:g} s")
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        return await self.request(
            "tools/call", {"name": name, "arguments": arguments}, timeout=timeout, on_progress=on_progress
        )

    async def ping(self, timeout: float) -> None:
        await self.request("ping", timeout=timeout)

    # --- JSON-RPC ---------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Send a request and return its result.

        On timeout or cancellation the server is told with ``notifications/cancelled``
        (except for ``initialize``, which the spec says must not be cancelled).
        """
        if self.closed.is_set():
            raise McpConnectionClosed(self.close_reason)
        request_id = next(self._ids)
        pending = _Pending()
        self._pending[request_id] = pending
        token = None
        if on_progress is not None:
            token = f"ponder-{request_id}"
            params = {**(params or {}), "_meta": {"progressToken": token}}
            self._progress[token] = on_progress
        try:
            with anyio.move_on_after(timeout) as deadline:
                await self._send(_Request("2.0", request_id, method, params))
                await pending.done.wait()
            if deadline.cancelled_caught:
                await self._cancel_remote(request_id, method, f"No answer within {timeout:g} s.")
                raise McpTimeout(f"{method} got no answer within {timeout:g} s")
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(CANCEL_NOTICE_S, shield=True):
                await self._cancel_remote(request_id, method, "The request was cancelled.")
            raise
        finally:
            self._pending.pop(request_id, None)
            if token is not None:
                self._progress.pop(token, None)
        if pending.error is not None:
            raise pending.error
        message = pending.message or {}
        error = message.get("error")
        if error is not None:
            error = error if isinstance(error, dict) else {}
            raise McpRemoteError(int(error.get("code", 0) or 0), str(error.get("message") or "unknown error"))
        result = message.get("result")
        if not isinstance(result, dict):
            raise McpError(f"its answer to {method} is not a JSON object.")
        return result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send(_Notification("2.0", method, params))

    async def _send(self, message: Any) -> None:
        data = _encoder.encode(message) + b"\n"
        stdin = self.process.stdin
        assert stdin is not None
        try:
            async with self._write_lock:
                await stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # The process is going or gone; the reader will say how it ended.
            with anyio.move_on_after(EXIT_SETTLE_S * 2):
                await self.closed.wait()
            raise McpConnectionClosed(self.close_reason or "its input was closed") from None

    async def _cancel_remote(self, request_id: int, method: str, reason: str) -> None:
        if method == "initialize" or self.closed.is_set():
            return
        try:
            await self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})
        except McpError:
            pass

    def abort(self, reason: str) -> None:
        """Treat the connection as dead (e.g. the server stopped answering pings)."""
        self._close(reason)

    def start_soon(self, func: Callable[..., Any], *args: Any) -> None:
        """Run a task that ends with this connection (e.g. a tool list refresh)."""
        self._tg.start_soon(func, *args)

    # --- reading ----------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        splitter = LineSplitter(MAX_LINE_BYTES)
        try:
            async for chunk in stdout:
                for line in splitter.feed(chunk):
                    self._on_line(line)
            for line in splitter.finish():
                self._on_line(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        except Exception:
            log.exception("reading from MCP server %s failed", self.name)
        # Give the exit status and the last stderr lines a moment to arrive: they are
        # what tells a person why the server went away.
        with anyio.move_on_after(EXIT_SETTLE_S):
            await self._stderr_done.wait()
            await self.process.wait()
        self._close(_describe_exit(self.process.returncode))

    async def _read_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        try:
            async for chunk in stderr:
                self.stderr.feed(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            self.stderr.finish()
            self._stderr_done.set()

    def _close(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.error = McpConnectionClosed(reason)
                pending.done.set()

    def _on_line(self, line: bytes | _Overlong) -> None:
        if isinstance(line, _Overlong):
            log.warning("MCP server %s sent a line over %d bytes; it was discarded", self.name, MAX_LINE_BYTES)
            return
        try:
            message = _decoder.decode(line)
        except msgspec.DecodeError:
            # Servers that print banners to stdout exist; say so once per line, go on.
            log.warning("MCP server %s wrote non-JSON to stdout: %.200r", self.name, line)
            return
        for item in message if isinstance(message, list) else [message]:
            if isinstance(item, dict):
                self._dispatch(item)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            request_id = message.get("id")
            pending = self._pending.get(request_id) if isinstance(request_id, int) else None
            if pending is not None and not pending.done.is_set():
                pending.message = message
                pending.done.set()
            return
        if "id" in message:
            self._tg.start_soon(self._answer, message)
            return
        params = found if isinstance(found := message.get("params"), dict) else {}
        if method == "notifications/progress":
            callback = self._progress.get(str(params.get("progressToken")))
            if callback is not None:
                callback(params)
        elif method == "notifications/tools/list_changed":
            if self.on_tools_changed is not None:
                self.on_tools_changed()
        elif method == "notifications/message":
            log.debug("[%s log] %s: %s", self.name, params.get("level"), params.get("data"))

    async def _answer(self, message: dict[str, Any]) -> None:
        """Answer a server → client request: ``ping``; anything else we declared no capability for."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message.get("id")}
        if message.get("method") == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": -32601, "message": f"Method not found: {message.get('method')}"}
        stdin = self.process.stdin
        assert stdin is not None  # opened with pipes
        try:
            async with self._write_lock:
                await stdin.send(_encoder.encode(reply) + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


@asynccontextmanager
async def open_stdio_client(spec: ServerSpec, *, close_grace_s: float, kill_grace_s: float) -> AsyncIterator[McpClient]:
    """Start the server and yield a client; on exit stop the server and its process group.

    Raises OSError when the command cannot be started. The body must not raise (it runs
    inside a task group); report failures by return value instead.
    """
    with anyio.CancelScope(shield=True):  # cancelled mid-spawn, a process could escape us
        process = await anyio.open_process(
            [spec.command, *spec.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=server_env(spec),
            start_new_session=True,  # its own process group: we can end it and everything it spawned
        )
        watch_group(process.pid)  # and it ends with the daemon, even a SIGKILLed one
    try:
        async with anyio.create_task_group() as tg:
            client = McpClient(spec, process, tg)
            tg.start_soon(client._read_stdout)
            tg.start_soon(client._read_stderr)
            try:
                yield client
            finally:
                client._close("ponder stopped it")  # calls still waiting fail now, not at their timeout
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(process, close_grace_s, kill_grace_s)


async def stop_process(process: Process, close_grace_s: float, kill_grace_s: float) -> None:
    """Close stdin and wait; then SIGTERM, and SIGKILL after ``kill_grace_s``, for the group."""
    if process.returncode is None:
        try:
            if process.stdin is not None:
                await process.stdin.aclose()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        with anyio.move_on_after(close_grace_s):
            await process.wait()
    # A leader that exited may leave children in its group; they go too.
    if process.returncode is None or group_alive(process.pid):
        await terminate_group(process, kill_grace_s)
    await process.aclose()
    release_group(process.pid)


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "it closed its output"
    if returncode < 0:
        try:
            return f"it was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"it was killed by signal {-returncode}"
    return f"it exited with status {returncode}"
