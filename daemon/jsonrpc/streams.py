"""Newline-delimited JSON over a byte stream (a Unix socket's connection): one reader task cutting
lines with ``LineSplitter``, one writer task draining the outgoing queue, as ``stdio`` does for
stdin and stdout.

The outgoing queue is bounded by a ``Backlog`` in bytes when one is given (a listening daemon's
connection), else by ``OUTGOING_BUFFER`` messages. Whoever queues decides what a full queue
means: the listening daemon drops a client that stops reading rather than wait for it
(``daemon.server.rpc_bridge``). A message made in ``Pieces`` counts in the backlog a piece at a
time, while that piece is being written.
"""

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.jsonrpc.backlog import Backlog
from daemon.jsonrpc.framing import (
    DEFAULT_MAX_LINE_BYTES,
    LineSplitter,
    Outgoing,
    Pieces,
    _Overlong,
    take_queued,
)

READ_CHUNK = 256 * 1024
OUTGOING_BUFFER = 4096  # messages queued for a stream without a ``Backlog`` before its queue is full
DRAIN_S = 1.0  # what is queued when a connection ends gets this long to be written


async def read_lines(
    stream: ByteReceiveStream, send: MemoryObjectSendStream[bytes | _Overlong], max_line_bytes: int
) -> None:
    """Cut ``stream`` into lines until it ends (or breaks), then close ``send``."""
    splitter = LineSplitter(max_line_bytes)
    async with send:
        try:
            while True:
                try:
                    chunk = await stream.receive(READ_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    break
                for line in splitter.feed(chunk):
                    await send.send(line)
            for line in splitter.finish():
                await send.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # nobody reads the lines any more: the connection is closing


WriteMessages = Callable[[list[bytes]], Awaitable[None]]  # whole messages, in one write
# The next piece of a message made in ``Pieces``, and whether the message ends with it.
WritePiece = Callable[[bytes, bool], Awaitable[None]]


async def write_batches(
    receive: MemoryObjectReceiveStream[Outgoing],
    write: WriteMessages,
    gone: tuple[type[BaseException], ...],
    backlog: Backlog | None = None,
    write_piece: WritePiece | None = None,
) -> None:
    """Hand ``write`` every message queued together at once, and ``write_piece`` each piece of one
    made in ``Pieces`` (made only once the one before it is written; without ``write_piece`` it is
    made whole and written as one message); set the ``Written`` marks; give the bytes back to
    ``backlog`` once written. Once a write raises one of ``gone`` (the client went away) the rest
    is drained unwritten (and what is in pieces never made)."""
    writable = True
    try:
        async with receive:
            async for first in receive:
                data, marks = take_queued(first, receive)
                del first
                writable = await _write_batch(write, write_piece, data, gone, backlog, writable)
                del data  # a big message is let go of before its sender hears it was written
                for mark in marks:
                    mark.set()
    finally:
        if backlog is not None:
            backlog.close()  # nobody gives bytes back any more: nothing may wait for room


async def _write_batch(
    write: WriteMessages,
    write_piece: WritePiece | None,
    batch: list[bytes | Pieces],
    gone: tuple[type[BaseException], ...],
    backlog: Backlog | None,
    writable: bool,
) -> bool:
    """Write ``batch`` in order: the whole messages between two in pieces together. False once the client is gone."""
    whole: list[bytes] = []
    for index, message in enumerate(batch):
        if isinstance(message, bytes):
            whole.append(message)
            if index + 1 < len(batch):
                continue
        if whole:
            writable = writable and await _sent(write(whole), gone)
            if backlog is not None:
                backlog.written(sum(map(len, whole)))
            whole = []
        if isinstance(message, Pieces) and writable:
            if write_piece is not None:
                writable = await _write_pieces(write_piece, message, gone, backlog)
            else:
                writable = await _write_joined(write, message, gone, backlog)
    return writable


async def _write_pieces(
    write_piece: WritePiece, message: Pieces, gone: tuple[type[BaseException], ...], backlog: Backlog | None
) -> bool:
    """Each piece of ``message``, counted in ``backlog`` while it is written; the next one is made
    before it goes, so that ``write_piece`` knows which is the last. False once the client is gone."""
    pieces = iter(message)
    piece = next(pieces, b"")
    while True:
        following = next(pieces, None)
        if backlog is not None:
            backlog.add(len(piece))
        try:
            if not await _sent(write_piece(piece, following is None), gone):
                return False
        finally:
            if backlog is not None:
                backlog.written(len(piece))
        if following is None:
            return True
        piece = following


async def _write_joined(
    write: WriteMessages, message: Pieces, gone: tuple[type[BaseException], ...], backlog: Backlog | None
) -> bool:
    """``message`` made whole and written as one, counted in ``backlog`` while it is written."""
    data = message.joined()
    if backlog is not None:
        backlog.add(len(data))
    try:
        return await _sent(write([data]), gone)
    finally:
        if backlog is not None:
            backlog.written(len(data))


async def _sent(sending: Awaitable[None], gone: tuple[type[BaseException], ...]) -> bool:
    """Await ``sending``; False when it found the client gone."""
    try:
        await sending
    except gone:
        return False
    return True


async def write_lines(
    stream: ByteSendStream, receive: MemoryObjectReceiveStream[Outgoing], backlog: Backlog | None = None
) -> None:
    """Each queued message and its newline, those queued together in one write; one made in
    ``Pieces`` a piece at a time (``write_batches``)."""

    async def write(data: list[bytes]) -> None:
        await stream.send(b"".join(part for message in data for part in (message, b"\n")))

    async def write_piece(piece: bytes, last: bool) -> None:
        await stream.send(piece + b"\n" if last else piece)

    gone = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
    await write_batches(receive, write, gone, backlog, write_piece)


@asynccontextmanager
async def open_stream(
    stream: anyio.abc.ByteStream,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    backlog: Backlog | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[bytes | _Overlong], MemoryObjectSendStream[Outgoing]]]:
    """Run the reader and the writer of one stream; yield (incoming lines, outgoing messages).
    The outgoing queue is bounded by ``backlog`` (bytes) when given, else by ``OUTGOING_BUFFER``
    messages. On exit what is queued is written (bounded by the caller's cancel scope), then the
    stream closes."""
    in_send, in_receive = anyio.create_memory_object_stream[bytes | _Overlong](64)
    out_send, out_receive = anyio.create_memory_object_stream[Outgoing](
        OUTGOING_BUFFER if backlog is None else math.inf
    )
    written = anyio.Event()

    async def writer() -> None:
        try:
            await write_lines(stream, out_receive, backlog)
        finally:
            written.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines, stream, in_send, max_line_bytes)
            tg.start_soon(writer)
            try:
                yield in_receive, out_send
            finally:
                await out_send.aclose()  # the writer drains what is queued, then ends
                with anyio.move_on_after(DRAIN_S, shield=True):
                    await written.wait()
                tg.cancel_scope.cancel()  # the reader may still wait for input; a stuck writer too
    finally:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
