"""Newline-delimited JSON over stdio: the only code that touches stdin and stdout.

``open_stdio()`` yields a receive stream of incoming lines and a send stream of outgoing
messages. Lines are cut by ``daemon.jsonrpc.framing.LineSplitter``. A pipe or a socket (what a
client spawning us provides) is read on the event loop itself, in non-blocking mode: a line
reaches the dispatcher without a thread's round trip (which, while the loop is busy, waits a
GIL switch interval per line: a second for a burst of 200 prompts). A terminal or a regular
file is read on a thread (epoll refuses regular files; a terminal's flags are shared with
whoever else holds it). Either way the reader reads no further than the lines already queued
(at most ``INCOMING_BUFFER``) allow: a slow loop is not read unboundedly ahead of.

One writer task owns stdout. Outgoing messages queue in a bounded stream, so a client
that reads slowly slows the daemon down (back-pressure) instead of making it lose or
reorder anything; the writer drains whatever is queued into one ``write`` call (a message made in
``Pieces`` is made and written a piece at a time), and sets the ``Written`` mark that follows a
big message once it is written (see ``daemon.jsonrpc.framing``).
"""

import logging
import os
import select
import stat
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.jsonrpc.framing import (
    BIG_MESSAGE,
    DEFAULT_MAX_LINE_BYTES,
    LineSplitter,
    Outgoing,
    Pieces,
    _Overlong,
    take_queued,
)
from daemon.util import foreground

log = logging.getLogger("ponder.transport")
READ_CHUNK = 256 * 1024
INCOMING_BUFFER = 64  # lines read and not yet dispatched before the reader stops reading
OUTGOING_BUFFER = 4096  # messages queued for stdout before producers wait


async def _read_on_loop(fd: int, send: MemoryObjectSendStream[bytes | _Overlong], max_line_bytes: int) -> None:
    """Read a non-blocking stdin on the loop, queueing complete lines (in order) for the dispatcher.

    The next read waits until every line of the last one is queued, so what is read ahead
    is bounded by the queue. End of input (or a read error) ends the stream after the last
    line, which ``LineSplitter.finish`` yields even without its newline.
    """
    splitter = LineSplitter(max_line_bytes)
    async with send:
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            except OSError:
                chunk = b""
            items = splitter.feed(chunk) if chunk else splitter.finish()
            try:
                for item in items:
                    try:
                        # Queued at once while there is room: a checkpoint per line would cost
                        # a round of a busy loop each (see ``Connection.serve``).
                        send.send_nowait(item)
                    except anyio.WouldBlock:
                        await send.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the dispatcher has stopped taking lines
            if not chunk:
                return


async def _read_until_cancelled(
    scope: anyio.CancelScope, fd: int, send: MemoryObjectSendStream[bytes | _Overlong], max_line_bytes: int
) -> None:
    with scope:
        await _read_on_loop(fd, send, max_line_bytes)


def _start_reader(fd: int, send: MemoryObjectSendStream[bytes | _Overlong], max_line_bytes: int) -> None:
    """Read stdin (a terminal or a regular file) on a daemon thread, handing complete lines
    to the event loop.

    A read blocked on stdin cannot be interrupted; a daemon thread (unlike a pooled worker
    thread) never keeps the process alive at exit. Handing lines over blocks the thread
    while the loop is busy, which is the back-pressure we want.
    """
    # Only a terminal or a regular file needs a thread's hand-over (a client's pipe is read on the
    # loop): anyio.from_thread (~3.5 M instructions to import) is loaded when one does.
    import anyio.from_thread

    token = anyio.lowlevel.current_token()
    # A line on its way to the loop holds the foreground: a client waits for its answer, and
    # the replies already streaming give way meanwhile (``daemon.util.foreground``).
    handoffs = foreground.Handoffs()

    async def hand_over(item: bytes | _Overlong) -> None:
        try:
            await send.send(item)
        finally:
            handoffs.took()

    def deliver(items: list[bytes | _Overlong]) -> None:
        for item in items:
            handoffs.offer()
            anyio.from_thread.run(hand_over, item, token=token)

    def closed() -> None:
        handoffs.close()
        send.close()

    def read_forever() -> None:
        splitter = LineSplitter(max_line_bytes)
        try:
            while True:
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    deliver(splitter.finish())
                    return
                deliver(splitter.feed(chunk))
        except Exception:
            return
        finally:
            try:
                anyio.from_thread.run_sync(closed, token=token)
            except Exception:
                handoffs.close()  # the loop has ended: nothing is on its way any more

    threading.Thread(target=read_forever, name="ponder-stdin", daemon=True).start()


DRAIN_STALL_S = 10.0  # once input has ended: how long the client may read nothing before the rest is dropped


class _Drain:
    """The stdout writer's cancel scope. Once input has ended (``begin``), it is cancelled when the
    client has read nothing for ``DRAIN_STALL_S``: a client that keeps stdout open but stopped
    reading would otherwise keep the daemon from ever exiting. A client that reads, however
    slowly, gets everything: each write that goes through moves the deadline."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self._draining = False

    def begin(self) -> None:
        self._draining = True
        self.progressed()

    def progressed(self) -> None:
        if self._draining:
            self.scope.deadline = anyio.current_time() + DRAIN_STALL_S


async def _pump_output(fd: int, receive: MemoryObjectReceiveStream[Outgoing], drain: _Drain) -> None:
    direct = _use_nonblocking(fd, grow=True)
    try:
        with drain.scope:
            await _pump(fd, direct, receive, drain)
        if drain.scope.cancelled_caught:
            log.warning(
                "the client read nothing for %g s after its input ended: the rest of the output is dropped",
                DRAIN_STALL_S,
            )
    finally:
        if direct:
            os.set_blocking(fd, True)


async def _pump(fd: int, direct: bool, receive: MemoryObjectReceiveStream[Outgoing], drain: _Drain) -> None:
    writable = True  # until a write finds the client gone; the rest is drained unwritten
    async with receive:
        async for first in receive:
            data, marks = take_queued(first, receive)
            del first  # ``data`` alone holds what is written, and is let go of below
            if writable:
                writable = await _write_batch(fd, direct, data, drain)
            del data  # a big message is freed before its sender hears it was written
            for mark in marks:
                mark.set()


async def _write_batch(fd: int, direct: bool, batch: list[bytes | Pieces], drain: _Drain) -> bool:
    """Write the batch; False when the client is gone (nothing more can reach it)."""
    for data in _writes(batch):
        if direct:
            writable = await _write_nonblocking(fd, data, drain)
        else:
            writable = await anyio.to_thread.run_sync(_write_all, fd, data)
        if not writable:
            return False
    return True


def _writes(batch: list[bytes | Pieces]) -> Iterator[bytes]:
    """The batch as few buffers to write: small messages joined with their newlines, large
    ones (a ``text_end`` or ``message_end`` can hold a whole reply) written as they are,
    since joining would copy them; a message in ``Pieces`` a piece at a time, each made only
    once the one before it is written (so the client reads while the rest is encoded)."""
    small: list[bytes] = []
    for message in batch:
        if isinstance(message, bytes) and len(message) < BIG_MESSAGE:
            small.append(message)
            continue
        if small:
            yield b"\n".join([*small, b""])
            small = []
        if isinstance(message, Pieces):
            yield from message
        else:
            yield message
        yield b"\n"
    if small:
        yield b"\n".join([*small, b""])


def _use_nonblocking(fd: int, grow: bool = False) -> bool:
    """Pipes and sockets (what a client spawning us provides) are read and written without a thread.

    A worker-thread hop per batch costs more than the write itself; with the fd in
    non-blocking mode the loop writes at once and waits for writability only when the
    client is behind (and reads what is there, waiting for readability when nothing is).
    Terminals and files keep blocking reads and writes on a thread, since their flags are
    shared with whoever else holds them (and epoll refuses regular files). ``grow``: the
    pipe to the client is made bigger (see ``_grow_pipe``).
    """
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return False
        if grow and stat.S_ISFIFO(mode):
            _grow_pipe(fd)
        os.set_blocking(fd, False)
    except OSError:
        return False
    return True


PIPE_BYTES = 1 << 20  # Linux's default limit for an unprivileged process (/proc/sys/fs/pipe-max-size)


def _grow_pipe(fd: int) -> None:
    """Give the pipe to the client 1 MiB instead of 64 KiB where Linux allows it: a long
    history (``session/resume`` of 10,000 messages is ~24 MB) then goes out in a few dozen
    writes, each a wait for the client to read, instead of hundreds."""
    if not sys.platform.startswith("linux"):
        return
    import fcntl

    try:
        if fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_BYTES:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass  # a lower pipe-max-size, or the pipe's memory quota is used up: 64 KiB it is


async def _write_nonblocking(fd: int, data: bytes, drain: _Drain) -> bool:
    """Write all of ``data``; False when the client is gone (nothing more can reach it)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await anyio.wait_writable(fd)
            continue
        except OSError as exc:
            return _output_gone(exc)
        drain.progressed()
        view = view[written:]
    return True


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:  # a terminal whose flags someone else made non-blocking: wait for room
            select.select([], [fd], [])
            continue
        except OSError as exc:
            return _output_gone(exc)
        view = view[written:]
    return True


def _output_gone(exc: OSError) -> bool:
    """A pipe the client closed (EPIPE), a socket it reset, a terminal hung up (EIO): the daemon
    does not die of it; shutdown follows from stdin's end."""
    if not isinstance(exc, BrokenPipeError):
        log.warning("stdout is gone (%s); nothing more can reach the client", exc)
    return False


@asynccontextmanager
async def open_stdio(
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    stdin_fd: int | None = None,
    stdout_fd: int | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[bytes | _Overlong], MemoryObjectSendStream[Outgoing]]]:
    """Run the stdin reader and the stdout writer; yield (incoming lines, outgoing messages).

    Outgoing items are complete JSON documents without the trailing newline (and the
    ``Written`` marks that follow big ones, set once they are written). On exit the
    outgoing stream is closed and everything queued is written before returning.
    """
    in_fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    out_fd = sys.stdout.fileno() if stdout_fd is None else stdout_fd
    in_send, in_receive = anyio.create_memory_object_stream[bytes | _Overlong](INCOMING_BUFFER)
    out_send, out_receive = anyio.create_memory_object_stream[Outgoing](OUTGOING_BUFFER)
    on_loop = _use_nonblocking(in_fd)
    drain = _Drain()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump_output, out_fd, out_receive, drain)
            reading = anyio.CancelScope()
            if on_loop:
                tg.start_soon(_read_until_cancelled, reading, in_fd, in_send, max_line_bytes)
            else:
                _start_reader(in_fd, in_send, max_line_bytes)
            try:
                yield in_receive, out_send
            finally:
                in_receive.close()  # a reader thread stops at its next line
                reading.cancel()  # the loop's reader stops now, also while it waits for input
                await out_send.aclose()  # the writer drains what is queued, then ends
                drain.begin()  # unless the client has stopped reading (``_Drain``)
    finally:
        if on_loop:  # as we found it, for whoever holds it after us; only once the writer is
            try:  # done, as stdin and stdout can be one socket, whose flags they share
                os.set_blocking(in_fd, True)
            except OSError:
                pass
