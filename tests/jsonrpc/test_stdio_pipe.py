"""stdout as a pipe (how every editor and client command spawns the daemon): a big message goes
through whole and in order, and on Linux the pipe is grown so that it takes few writes."""

import os
import sys
import threading

import anyio
import pytest

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
