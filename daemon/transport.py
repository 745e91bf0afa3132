"""Newline-delimited framing over stdio: the only code that touches stdin and stdout.

``open_stdio()`` yields a receive stream of incoming lines and a send stream of outgoing
messages. Lines are split on ``\\n`` only (a trailing ``\\r`` is dropped; U+2028 inside a
string is just a character), blank lines are skipped, and a line longer than the limit
is discarded as it streams past — never buffered whole — and reported as ``OVERLONG``.

One writer task owns stdout. Outgoing messages queue in a bounded stream, so a client
that reads slowly slows the daemon down (back-pressure) instead of making it lose or
reorder anything; the writer drains whatever is queued into one ``write`` call.
"""

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream


class _Overlong:
    """Marks a line that exceeded the limit and was discarded."""

    def __repr__(self) -> str:
        return "OVERLONG"


OVERLONG: Final = _Overlong()
DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
READ_CHUNK = 256 * 1024
OUTGOING_BUFFER = 4096  # messages queued for stdout before producers wait


class LineSplitter:
    """Incremental NDJSON splitter with bounded memory."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._discarding = False

    def feed(self, chunk: bytes) -> list[bytes | _Overlong]:
        out: list[bytes | _Overlong] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                break
            piece = chunk[start:newline]
            start = newline + 1
            if self._discarding:
                self._discarding = False
                self._buffer.clear()
                out.append(OVERLONG)
                continue
            if len(self._buffer) + len(piece) > self.max_line_bytes:
                self._buffer.clear()
                out.append(OVERLONG)
                continue
            if self._buffer:
                self._buffer += piece
                line = bytes(self._buffer)
                self._buffer.clear()
            else:
                line = piece
            self._emit(line, out)
        rest = chunk[start:]
        if rest and not self._discarding:
            if len(self._buffer) + len(rest) > self.max_line_bytes:
                self._buffer.clear()
                self._discarding = True
            else:
                self._buffer += rest
        return out

    def finish(self) -> list[bytes | _Overlong]:
        """End of input: a final line without a newline still counts."""
        out: list[bytes | _Overlong] = []
        if self._discarding:
            out.append(OVERLONG)
        elif self._buffer:
            self._emit(bytes(self._buffer), out)
        self._buffer.clear()
        self._discarding = False
        return out

    @staticmethod
    def _emit(line: bytes, out: list[bytes | _Overlong]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.strip():
            out.append(line)


async def _pump_input(fd: int, send: ObjectSendStream[bytes | _Overlong], max_line_bytes: int) -> None:
    splitter = LineSplitter(max_line_bytes)
    async with send:
        while True:
            # A blocked read cannot be interrupted; abandoning it lets shutdown proceed.
            chunk = await anyio.to_thread.run_sync(_read, fd, abandon_on_cancel=True)
            if not chunk:
                for item in splitter.finish():
                    await send.send(item)
                return
            for item in splitter.feed(chunk):
                await send.send(item)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, READ_CHUNK)
    except OSError:
        return b""


async def _pump_output(fd: int, receive: ObjectReceiveStream[bytes]) -> None:
    async with receive:
        async for first in receive:
            batch = [first]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            data = b"\n".join(batch) + b"\n"
            await anyio.to_thread.run_sync(_write_all, fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return  # the client went away; shutdown follows from stdin's EOF
        view = view[written:]


@asynccontextmanager
async def open_stdio(
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    stdin_fd: int | None = None,
    stdout_fd: int | None = None,
) -> AsyncIterator[tuple[ObjectReceiveStream[bytes | _Overlong], ObjectSendStream[bytes]]]:
    """Run the stdin reader and the stdout writer; yield (incoming lines, outgoing messages).

    Outgoing items are complete JSON documents without the trailing newline. On exit the
    outgoing stream is closed and everything queued is written before returning.
    """
    in_fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    out_fd = sys.stdout.fileno() if stdout_fd is None else stdout_fd
    in_send, in_receive = anyio.create_memory_object_stream[bytes | _Overlong](64)
    out_send, out_receive = anyio.create_memory_object_stream[bytes](OUTGOING_BUFFER)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump_output, out_fd, out_receive)
        reader_scope = anyio.CancelScope()

        async def read_stdin() -> None:
            with reader_scope:
                await _pump_input(in_fd, in_send, max_line_bytes)

        tg.start_soon(read_stdin)
        try:
            yield in_receive, out_send
        finally:
            reader_scope.cancel()
            await out_send.aclose()  # the writer drains what is queued, then ends
