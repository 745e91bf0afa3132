"""``ponder attach [--socket PATH]``: stdio bridged to a running daemon (``ponder serve
--listen``), so a client that can only spawn a process shares one daemon with the others.

Bytes pass through unchanged in both directions: the client speaks the ponder protocol to the
daemon as it would over stdio (its own ``initialize`` included). The end of stdin half-closes
the connection (the daemon answers what is in flight, then closes); the daemon closing ends
the command. A daemon that cannot be reached is one line on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

READ_CHUNK = 256 * 1024


def run_attach(args: argparse.Namespace, backend: str) -> int:
    """``backend``: the async library to run on (asyncio or trio)."""
    import anyio

    from daemon.config.settings import resolve_home

    home = resolve_home(args.home)
    path = Path(args.socket).expanduser() if args.socket else home / "serve.sock"
    try:
        anyio.run(_bridge_unix, path, backend=backend)
    except OSError as exc:
        print(f"ponder attach: cannot reach a daemon at {path}: {exc.strerror or exc}.", file=sys.stderr)
        return 1
    return 0


async def _bridge_unix(path: Path) -> None:
    import anyio

    stream = await anyio.connect_unix(path)
    async with stream, anyio.create_task_group() as tg:

        async def upstream() -> None:
            while True:
                chunk = await anyio.to_thread.run_sync(os.read, 0, READ_CHUNK, abandon_on_cancel=True)
                if not chunk:
                    await stream.send_eof()
                    return
                await stream.send(chunk)

        tg.start_soon(upstream)
        while True:
            try:
                data = await stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
            await anyio.to_thread.run_sync(_write_all, 1, data)
        tg.cancel_scope.cancel()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
