"""stdin's reader: a pipe or a socket is read on the event loop (no thread), a terminal or a
regular file on a thread; either way lines come in order, an overlong line is reported and
skipped, the last line counts without its newline, end of input ends the stream, and a loop
that does not take lines is not read unboundedly ahead of."""

import os
import socket
import threading
import time
from pathlib import Path

import anyio
import pytest

from daemon.jsonrpc.framing import OVERLONG
from daemon.jsonrpc.stdio import INCOMING_BUFFER, READ_CHUNK, open_stdio

pytestmark = pytest.mark.anyio

LINES = [b'{"n":%d,"pad":"%s"}' % (i, b"x" * (i % 97)) for i in range(3000)]
# Lines, a line past the limit, more lines, and a last line without its newline.
WIRE = b"\n".join(LINES[:1500]) + b"\n" + b"y" * 5000 + b"\n\r\n" + b"\n".join(LINES[1500:])
EXPECTED = [*LINES[:1500], OVERLONG, *LINES[1500:]]
MAX_LINE = 4096


def _stdin_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "ponder-stdin"]


def _feed(fd: int, data: bytes, pieces: int = 37) -> threading.Thread:
    """Write ``data`` to ``fd`` in uneven pieces (lines cut across reads), then close it."""

    def write() -> None:
        step = max(1, len(data) // pieces)
        view = memoryview(data)
        while view:
            written = os.write(fd, view[: step + 13])
            view = view[written:]
        os.close(fd)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


async def _read_all(in_fd: int, out_fd: int) -> list[object]:
    got: list[object] = []
    async with open_stdio(MAX_LINE, stdin_fd=in_fd, stdout_fd=out_fd) as (incoming, _):
        async for item in incoming:
            got.append(item)
    return got


async def test_a_pipe_is_read_on_the_loop_in_order_with_overlong_lines_and_eof():
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    before = len(_stdin_threads())
    writer = _feed(in_write, WIRE)
    try:
        with anyio.fail_after(20):
            got: list[object] = []
            async with open_stdio(MAX_LINE, stdin_fd=in_read, stdout_fd=out_write) as (incoming, _):
                assert len(_stdin_threads()) == before  # no reader thread for a pipe
                assert not os.get_blocking(in_read)
                async for item in incoming:
                    got.append(item)
        assert got == EXPECTED
        assert os.get_blocking(in_read)  # given back as it was found
    finally:
        await anyio.to_thread.run_sync(writer.join, 10)
        for fd in (in_read, out_read, out_write):
            os.close(fd)


async def test_a_regular_file_is_read_on_a_thread(tmp_path: Path):
    path = tmp_path / "stdin.ndjson"
    path.write_bytes(WIRE)
    out_read, out_write = os.pipe()
    in_fd = os.open(path, os.O_RDONLY)
    seen_threads: list[int] = []
    try:
        with anyio.fail_after(20):
            got: list[object] = []
            async with open_stdio(MAX_LINE, stdin_fd=in_fd, stdout_fd=out_write) as (incoming, _):
                async for item in incoming:
                    seen_threads.append(len(_stdin_threads()))
                    got.append(item)
        assert got == EXPECTED
        assert seen_threads[0] >= 1  # epoll cannot wait on a regular file: the thread reads it
        assert os.get_blocking(in_fd)
    finally:
        for fd in (in_fd, out_read, out_write):
            os.close(fd)


async def test_a_socket_that_is_both_stdin_and_stdout_reads_and_writes_on_the_loop():
    ours, theirs = socket.socketpair()
    fd = theirs.fileno()
    try:
        with anyio.fail_after(20):
            async with open_stdio(MAX_LINE, stdin_fd=fd, stdout_fd=fd) as (incoming, outgoing):
                ours.sendall(b'{"a":1}\n{"b":2}\n')
                assert await incoming.receive() == b'{"a":1}'
                assert await incoming.receive() == b'{"b":2}'
                await outgoing.send(b'{"c":3}')
                got = b""
                while not got.endswith(b"\n"):
                    got += await anyio.to_thread.run_sync(ours.recv, 100)
                assert got == b'{"c":3}\n'
                ours.shutdown(socket.SHUT_WR)  # end of input
                with pytest.raises(anyio.EndOfStream):
                    await incoming.receive()
        assert os.get_blocking(fd)  # both ends done: blocking again, as it was found
    finally:
        ours.close()
        theirs.close()


async def test_leaving_without_end_of_input_stops_the_reader_at_once():
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        with anyio.fail_after(5):
            async with open_stdio(MAX_LINE, stdin_fd=in_read, stdout_fd=out_write) as (incoming, _):
                os.write(in_write, b'{"a":1}\n')
                assert await incoming.receive() == b'{"a":1}'
                started = time.monotonic()
            # The reader was waiting for more input; leaving did not wait for it.
            assert time.monotonic() - started < 1
    finally:
        for fd in (in_read, in_write, out_read, out_write):
            os.close(fd)


async def test_a_loop_that_takes_no_lines_is_not_read_unboundedly_ahead_of():
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    lines = [b'{"n":%d,"pad":"%s"}' % (i, b"z" * 80) for i in range(20_000)]  # ~1.9 MB
    data = b"".join(line + b"\n" for line in lines)
    written = [0]

    def write() -> None:
        view = memoryview(data)
        while view:
            n = os.write(in_write, view[:4096])
            view = view[n:]
            written[0] += n
        os.close(in_write)

    writer = threading.Thread(target=write)
    try:
        with anyio.fail_after(30):
            async with open_stdio(stdin_fd=in_read, stdout_fd=out_write) as (incoming, _):
                writer.start()
                await anyio.sleep(0.5)  # nothing taken: the reader fills the queue, then stops reading
                # At most the queue's lines, one read's worth and what the pipe itself holds (64 KiB
                # by default; at most 1 MiB) are out of the writer's hands.
                bound = INCOMING_BUFFER * 100 + READ_CHUNK + (1 << 20)
                assert written[0] <= bound < len(data)
                got = [item async for item in incoming]
        assert got == lines
    finally:
        await anyio.to_thread.run_sync(writer.join, 10)
        for fd in (in_read, out_read, out_write):
            os.close(fd)
