"""A small JSON-RPC client of the ponder protocol: the reference client for scripts.

``spawn_daemon()`` starts ``ponder serve`` as a subprocess and yields a connected
``RpcClient``; the same client also runs over in-memory streams in tests. It routes
replies to their requests, queues notifications, and answers daemon → client requests
(``permission/request``) through a handler.
"""

import itertools
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.buffered import BufferedByteReceiveStream

from daemon.jsonrpc.early import SentEarly
from daemon.jsonrpc.framing import Outgoing, Pieces, Written
from daemon.jsonrpc.spawn import StartedDaemon, daemon_command

RequestHandler = Callable[[str, Any], Awaitable[Any]]


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class DaemonStopped(anyio.BrokenResourceError):
    """The daemon's output ended (it exited) before it answered: raised by every request waiting
    then, and by any later one."""

    def __init__(self) -> None:
        super().__init__("The daemon stopped before it answered.")


class RpcClient:
    def __init__(self, send_line: Callable[[bytes], Awaitable[None]], sent_early: Sequence[SentEarly] = ()) -> None:
        self._send_line = send_line
        self._waiting: dict[Any, tuple[anyio.Event, list[Any]]] = {}
        # Requests written before this client existed (``daemon.jsonrpc.early``): their answers are
        # kept for the first ``request`` of the same method with the same params.
        self._early: dict[Any, tuple[str, Any]] = {}
        for early in sent_early:
            self._waiting[early.request_id] = (anyio.Event(), [])
            self._early[early.request_id] = (early.method, early.params)
        self._ids = itertools.count(max((early.request_id for early in sent_early), default=0) + 1)
        # request id -> method, to interpret replies
        self.sent_methods: dict[Any, str] = {early.request_id: early.method for early in sent_early}
        self.notify_send, self.notifications = anyio.create_memory_object_stream[tuple[str, Any]](100_000)
        self.on_request: RequestHandler | None = None
        # Daemon → client requests are answered in their own tasks, so a person taking
        # their time over a permission prompt never stalls the reading of events.
        self.task_group: anyio.abc.TaskGroup | None = None
        # Called with every decoded message from the daemon (tests validate the wire here).
        self.on_message: Callable[[Any, dict[Any, str]], None] | None = None
        self.process: anyio.abc.Process | None = None  # the daemon's process, when spawn_daemon started one
        self._lost = False  # the daemon's output ended: no answer will come

    async def request(self, method: str, params: Any = None, *, request_id: Any = None) -> Any:
        """Send a request and return its result (raise ``RpcError`` for an error answer). One that
        was sent early with the same method and params is not sent again: its answer is taken."""
        early_id = self._sent_early(method, params) if request_id is None else None
        if early_id is not None:
            request_id = early_id
        elif request_id is None:
            request_id = next(self._ids)
        if early_id is None:
            self._waiting[request_id] = (anyio.Event(), [])
        done, slot = self._waiting[request_id]
        self.sent_methods[request_id] = method
        try:
            if early_id is None:
                if self._lost:
                    raise DaemonStopped()
                message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
                if params is not None:
                    message["params"] = params
                try:
                    await self._send_line(msgspec.json.encode(message))
                except anyio.BrokenResourceError as exc:  # its input is closed: it is gone (or going)
                    raise DaemonStopped() from exc
            await done.wait()
        finally:
            self._waiting.pop(request_id, None)
        if not slot:  # the daemon's output ended first
            raise DaemonStopped()
        reply = slot[0]
        if "error" in reply:
            error = reply["error"]
            raise RpcError(error.get("code", 0), error.get("message", ""), error.get("data"))
        return reply.get("result")

    def connection_lost(self) -> None:
        """The daemon's output ended: the requests waiting for an answer fail (``DaemonStopped``)
        instead of waiting for ever, and so does any later one."""
        self._lost = True
        for done, slot in self._waiting.values():
            if not slot:
                done.set()

    def _sent_early(self, method: str, params: Any) -> Any:
        """The id of the request sent early as ``method`` with ``params``, now taken; None if none was."""
        for request_id, early in self._early.items():
            if early == (method, params):
                del self._early[request_id]
                return request_id
        return None

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send_line(msgspec.json.encode(message))

    async def send_raw(self, line: bytes) -> None:
        await self._send_line(line)

    async def events(self, turn_id: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """``agent/event`` params in order; with ``turn_id``, that turn's events up to its turn_end."""
        async for method, params in self.notifications:
            if method != "agent/event":
                continue
            if turn_id is not None and params.get("turn_id") != turn_id:
                continue
            yield params
            if turn_id is not None and params.get("type") == "turn_end":
                return

    async def collect_turn(self, turn_id: str) -> list[dict[str, Any]]:
        return [event async for event in self.events(turn_id)]

    async def dispatch(self, line: bytes) -> None:
        """Handle one line from the daemon."""
        message = msgspec.json.decode(line)
        if self.on_message is not None:
            self.on_message(message, self.sent_methods)
        for item in message if isinstance(message, list) else [message]:
            await self._dispatch_one(item)

    async def _dispatch_one(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            if self.task_group is not None:
                self.task_group.start_soon(self._answer, message)
            else:
                await self._answer(message)
        elif "method" in message:
            try:
                await self.notify_send.send((message["method"], message.get("params")))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # nobody is listening for notifications any more
        else:
            waiting = self._waiting.get(message.get("id"))
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()

    async def _answer(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if self.on_request is None:
            reply["error"] = {"code": -32601, "message": "This client answers no requests."}
        else:
            try:
                reply["result"] = await self.on_request(message["method"], message.get("params"))
            except Exception as exc:
                reply["error"] = {"code": -32603, "message": str(exc)}
        await self._send_line(msgspec.json.encode(reply))


@asynccontextmanager
async def spawn_daemon(
    *,
    home: str | os.PathLike[str] | None = None,
    serve_args: tuple[str, ...] = (),
    log_level: str = "info",
    env: dict[str, str] | None = None,
    on_request: RequestHandler | None = None,
    stderr: int | None = None,
    started: StartedDaemon | None = None,
    sent_early: Sequence[SentEarly] = (),
    wait_for_exit: bool = True,
) -> AsyncIterator[RpcClient]:
    """Run ``python -m daemon [--home H] serve SERVE_ARGS`` (or take the one ``start_daemon``
    started, and the requests already written to it: ``sent_early``) and yield a client connected to it.

    Leaving the block closes the daemon's stdin (a graceful shutdown) and waits for it to
    exit, unless ``wait_for_exit`` is False: a one-shot command whose requests were all
    answered (``ponder ask``, ``ponder sessions``) leaves the daemon to finish its shutdown
    alone, since nothing it still does concerns the command's result (a turn's messages
    are stored and its lease released before its ``turn_end``).
    """
    if started is not None:
        process: anyio.abc.Process = _StartedProcess(started)
    else:
        process = await anyio.open_process(
            daemon_command(home, serve_args, log_level),
            env={**os.environ, **(env or {})},
            cwd=str(Path.cwd()),
            stderr=stderr,
        )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def send_line(line: bytes) -> None:
        await stdin.send(line + b"\n")

    client = RpcClient(send_line, sent_early)
    client.on_request = on_request
    client.process = process
    try:
        async with anyio.create_task_group() as tg:
            client.task_group = tg

            async def read() -> None:
                buffered = BufferedByteReceiveStream(stdout)
                try:
                    while True:
                        line = await buffered.receive_until(b"\n", 1 << 30)
                        await client.dispatch(line)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
                finally:
                    client.connection_lost()
                    client.notify_send.close()

            tg.start_soon(read)
            try:
                yield client
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await stdin.aclose()
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        pass
                    if wait_for_exit:
                        with anyio.move_on_after(10) as waited:
                            await process.wait()
                        if waited.cancelled_caught:
                            process.kill()
                            await process.wait()
                client.notifications.close()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is not None:
                await _read_to_end(stdout)
            await stdout.aclose()  # after the reader: nothing waits on it any more


async def _read_to_end(stdout: anyio.abc.ByteReceiveStream) -> None:
    """Read an exited daemon's output to its end. asyncio closes a subprocess's transport only
    once each of its pipes has reached EOF; a reader cancelled just before that left the
    transport open, for the garbage collector to find (a ``ResourceWarning``) in a later test
    or a later call once the event loop had stopped."""
    with anyio.move_on_after(5):
        try:
            while await stdout.receive():
                pass
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


class _StartedProcess(anyio.abc.Process):
    """A daemon ``start_daemon`` started before the event loop existed, as an anyio process:
    its pipes are read and written without threads (non-blocking, the loop waits for them)."""

    def __init__(self, popen: StartedDaemon) -> None:
        self._popen = popen
        self._stdin = _PipeSendStream(popen.stdin)
        self._stdout = _PipeReceiveStream(popen.stdout)

    async def aclose(self) -> None:
        await self._stdin.aclose()
        await self.wait()
        await self._stdout.aclose()

    async def wait(self) -> int:
        return await anyio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def send_signal(self, signal: signal.Signals) -> None:
        self._popen.send_signal(signal)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    @property
    def stdin(self) -> anyio.abc.ByteSendStream:
        return self._stdin

    @property
    def stdout(self) -> anyio.abc.ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> None:
        return None


class _PipeSendStream(anyio.abc.ByteSendStream):
    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        os.set_blocking(self._fd, False)  # our end only: the child has its own

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
            except (OSError, ValueError) as exc:  # the daemon is gone, or we closed its input
                raise anyio.BrokenResourceError(str(exc)) from exc

    async def send_eof(self) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._pipe.close()


class _PipeReceiveStream(anyio.abc.ByteReceiveStream):
    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        os.set_blocking(self._fd, False)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            try:
                chunk = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            except (OSError, ValueError) as exc:
                raise anyio.ClosedResourceError from exc
            if not chunk:
                raise anyio.EndOfStream
            return chunk

    async def aclose(self) -> None:
        self._pipe.close()


@asynccontextmanager
async def connect_memory(
    daemon_incoming: ObjectSendStream[Any], daemon_outgoing: ObjectReceiveStream[Outgoing]
) -> AsyncIterator[RpcClient]:
    """A client over in-memory streams (tests run the daemon's ``serve`` in the same process)."""

    async def send_line(line: bytes) -> None:
        await daemon_incoming.send(line)

    client = RpcClient(send_line)
    async with anyio.create_task_group() as tg:
        client.task_group = tg

        async def read() -> None:
            async with daemon_outgoing:
                async for line in daemon_outgoing:
                    if isinstance(line, Written):  # what the stdout writer does once it has written a big message
                        line.set()
                        continue
                    await client.dispatch(line.joined() if isinstance(line, Pieces) else line)
            client.notify_send.close()

        tg.start_soon(read)
        try:
            yield client
        finally:
            client.notifications.close()
            tg.cancel_scope.cancel()
