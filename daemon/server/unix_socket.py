"""``--listen unix[:PATH]``: NDJSON over a Unix socket that only its owner can use (0600), in a
directory no other user can write (else another user could put their own socket in its place).

A PATH where a daemon answers, or that holds another kind of file, is refused (``ListenRefused``,
exit 2); a stale socket left by a daemon that died is replaced. The socket file is removed when
the daemon stops.
"""

import errno
import logging
import os
import socket
import stat
from pathlib import Path

import anyio
from anyio.abc import SocketStream, TaskGroup, TaskStatus

from daemon.errors import ListenRefused
from daemon.jsonrpc.streams import open_stream
from daemon.server.listen import Clients, Listener

log = logging.getLogger("ponder.server")

ACCEPT_RETRY_S = 0.1  # after a failed accept (out of file descriptors): try again shortly
SOCKET_FILE = "serve.sock"


def check_socket_path(path: Path) -> None:
    """Refuse a PATH the daemon must not listen on; remove a stale socket (nobody answers on it)."""
    parent = path.parent
    try:
        info = parent.stat()
    except OSError as exc:
        raise ListenRefused(
            f"Cannot listen on {path}: its directory {parent} is not usable ({exc.strerror})."
        ) from None
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ListenRefused(
            f"Cannot listen on {path}: other users can write to {parent}, so they could replace the socket; "
            "choose a directory only you can write to."
        )
    if len(os.fsencode(path)) >= 100:  # sun_path holds 104 to 108 bytes, depending on the system
        raise ListenRefused(f"Cannot listen on {path}: the path is too long for a Unix socket; choose a shorter one.")
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(found.st_mode):
        raise ListenRefused(f"Cannot listen on {path}: another file is there; remove it or choose another path.")
    if _answers(path):
        raise ListenRefused(f"Cannot listen on {path}: a daemon is already listening there.")
    log.info("replacing the stale socket %s", path)
    path.unlink(missing_ok=True)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(os.fspath(path))
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            raise ListenRefused(f"Cannot listen on {path}: {exc.strerror}.") from None
    return True


def unix_listener(path: Path, max_line_bytes: int) -> Listener:
    """The listener of ``--listen unix:PATH`` (PATH checked by ``check_socket_path`` first)."""

    async def listen(clients: Clients, tg: TaskGroup, *, task_status: TaskStatus[None]) -> None:
        listener = await anyio.create_unix_listener(path, mode=0o600)
        inode = path.stat().st_ino
        try:
            task_status.started()
            async with listener:
                while True:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:  # EMFILE and the like: the clients already served go on
                        log.warning("could not accept a connection on %s: %s", path, exc)
                        await anyio.sleep(ACCEPT_RETRY_S)
                        continue
                    tg.start_soon(_serve_one, clients, stream, max_line_bytes)
        finally:
            try:
                if path.stat().st_ino == inode:  # still ours: another daemon may have replaced a stale one
                    path.unlink()
            except OSError:
                pass

    return listen


async def _serve_one(clients: Clients, stream: SocketStream, max_line_bytes: int) -> None:
    drop = clients.new_drop()
    try:
        with drop.scope:
            async with open_stream(stream, max_line_bytes, drop.backlog) as (incoming, outgoing):
                await clients.serve("unix", incoming, outgoing, drop)
    except Exception:  # a bug met by one client's connection: it closes, the daemon and the others go on
        log.exception("a Unix socket connection failed")
