"""stdout as a pipe (how every editor and client command spawns the daemon): a big message goes
through whole and in order, and on Linux the pipe is grown so that it takes few writes. After
the end of input, a client that reads slowly still gets everything, and one that keeps stdout
open but reads nothing cannot keep the daemon from ending."""

import os
import sys
import threading
import time

import anyio
import pytest

from daemon.jsonrpc import stdio
from daemon.jsonrpc.stdio import PIPE_BYTES, open_stdio

pytestmark = pytest.mark.anyio


async def test_a_big_message_goes_through_a_grown_pipe_whole_and_in_order():
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    received: list[bytes] = []

    def read_all() -> None:  # the client: reads until the daemon's end of the pipe closes
        with os.fdopen(out_read, "rb") as out:
            received.append(out.read())

    reader = threading.Thread(target=read_all)
    reader.start()
    big = b'{"result":"' + b"x" * (3 * PIPE_BYTES) + b'"}'
    try:
        async with open_stdio(stdin_fd=in_read, stdout_fd=out_write) as (incoming, outgoing):
            await outgoing.send(b'{"n":1}')
            await outgoing.send(big)
            await outgoing.send(b'{"n":2}')
            if sys.platform.startswith("linux"):
                import fcntl

                assert fcntl.fcntl(out_write, fcntl.F_GETPIPE_SZ) >= PIPE_BYTES
            os.close(in_write)  # end of input: the stdin thread reads it, closes ``incoming`` and ends
            async for _ in incoming:
                pass
    finally:
        os.close(out_write)  # the client's read ends once the writer has drained
        await anyio.to_thread.run_sync(reader.join, 10)
        os.close(in_read)  # the stdin thread is done with it (``incoming`` ended)
    assert received == [b'{"n":1}\n' + big + b'\n{"n":2}\n']


async def _send_then_end_input(outgoing, incoming, in_write: int, messages: list[bytes]) -> None:
    for message in messages:
        await outgoing.send(message)
    os.close(in_write)  # end of input: ``incoming`` ends, and the daemon winds down
    async for _ in incoming:
        pass


async def test_a_client_that_reads_nothing_after_its_input_ended_cannot_keep_the_daemon_up(monkeypatch):
    monkeypatch.setattr(stdio, "DRAIN_STALL_S", 0.5)
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()  # nobody reads ``out_read``: the pipe fills and stays full
    messages = [b'{"n":%d,"pad":"%s"}' % (n, b"x" * 100_000) for n in range(40)]  # ~4 MB, over the pipe's 1 MiB
    began = time.monotonic()
    try:
        with anyio.fail_after(10):
            async with open_stdio(stdin_fd=in_read, stdout_fd=out_write) as (incoming, outgoing):
                await _send_then_end_input(outgoing, incoming, in_write, messages)
                ended_input = time.monotonic()
        took = time.monotonic() - ended_input
        left_in_pipe = b""
        os.set_blocking(out_read, False)
        while chunk := _read_some(out_read):
            left_in_pipe += chunk
    finally:
        os.close(out_write)
        os.close(out_read)
        os.close(in_read)
    assert 0.4 < took < 5, (
        f"the writer gave up {took:.2f} s after the end of input ({time.monotonic() - began:.2f} s in all)"
    )
    assert 0 < len(left_in_pipe) < sum(map(len, messages)), "what fitted in the pipe was written, the rest dropped"
    assert left_in_pipe.startswith(b'{"n":0,')


async def test_a_client_that_reads_slowly_after_its_input_ended_gets_everything(monkeypatch):
    monkeypatch.setattr(stdio, "DRAIN_STALL_S", 0.5)
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    messages = [b'{"n":%d,"pad":"%s"}' % (n, b"x" * 100_000) for n in range(40)]
    received: list[bytes] = []

    def read_slowly() -> None:  # 64 KiB at a time, a pause of 0.05 s between reads: ~1.3 MB/s
        with os.fdopen(out_read, "rb", buffering=0) as out:
            while chunk := out.read(64 * 1024):
                received.append(chunk)
                time.sleep(0.05)

    reader = threading.Thread(target=read_slowly)
    try:
        async with open_stdio(stdin_fd=in_read, stdout_fd=out_write) as (incoming, outgoing):
            await _send_then_end_input(outgoing, incoming, in_write, messages)
            reader.start()  # only now: by then the pipe is full and the writer waits for room
    finally:
        os.close(out_write)
        await anyio.to_thread.run_sync(reader.join, 20)
        os.close(in_read)
    assert b"".join(received) == b"".join(message + b"\n" for message in messages)


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 20)
    except BlockingIOError:
        return b""
