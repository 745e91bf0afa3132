"""Newline-delimited JSON over a byte stream (a Unix socket's connection): one reader task cutting
lines with ``LineSplitter``, one writer task draining the outgoing queue, as ``stdio`` does for
stdin and stdout.

The outgoing queue is bounded by a ``Backlog`` in bytes when one is given (a listening daemon's
connection), else by ``OUTGOING_BUFFER`` messages. Whoever queues decides what a full queue
means: the listening daemon drops a client that stops reading rather than wait for it
(``daemon.server.rpc_bridge``).
"""

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.jsonrpc.backlog import Backlog
from daemon.jsonrpc.framing import DEFAULT_MAX_LINE_BYTES, LineSplitter, Outgoing, Written, _Overlong

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


async def write_lines(
    stream: ByteSendStream, receive: MemoryObjectReceiveStream[Outgoing], backlog: Backlog | None = None
) -> None:
    """Write each queued message and its newline (several at once when they are queued together);
    set the ``Written`` marks; give the bytes back to ``backlog`` once written. Once the client is
    gone the rest is drained unwritten."""
    writable = True
    try:
        async with receive:
            async for first in receive:
                batch = [first]
                del first
                while True:
                    try:
                        batch.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                data = [item for item in batch if not isinstance(item, Written)]
                marks = [item for item in batch if isinstance(item, Written)]
                del batch
                if writable and data:
                    try:
                        await stream.send(b"".join(part for message in data for part in (message, b"\n")))
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        writable = False
                if backlog is not None:
                    backlog.written(sum(map(len, data)))
                del data
                for mark in marks:
                    mark.set()
    finally:
        if backlog is not None:
            backlog.close()  # nobody gives bytes back any more: nothing may wait for room


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
