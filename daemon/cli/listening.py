"""``ponder serve --listen ENDPOINT`` (and ``--new-token``): the endpoint read and checked (a
mistake is a usage error, exit 2, and nothing listens), then one daemon for many clients
(``daemon.server.listen``). Once it listens, one line on stderr says where: ``ponder: listening
on ENDPOINT`` (with the real port when ``:0`` was asked)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from anyio.streams.memory import MemoryObjectSendStream

    from daemon.config.settings import Config
    from daemon.jsonrpc.framing import Outgoing
    from daemon.server.listen import Clients, DialectServer, Drop, FirstAgain, Incoming, Listener
    from daemon.server.rpc_bridge import TransportKind


def run_listening(args: argparse.Namespace, backend: str) -> int:
    """``backend``: the async library to run on (asyncio or trio)."""
    import anyio

    from daemon.cli.serving import stdin_from_devnull
    from daemon.config.settings import load_config, resolve_home
    from daemon.errors import ListenRefused
    from daemon.logs import setup_logging
    from daemon.server.listen import serve_listening
    from daemon.util.collector import tune_for_daemon

    tune_for_daemon()
    # Nothing is read from stdin and nothing but this command's own lines reaches stdout.
    stdin_from_devnull()
    home = resolve_home(args.home)
    config = load_config(home)
    setup_logging(config.log_dir, args.log_level, stderr=not args.quiet)
    if args.new_token:
        from daemon.server.token import new_token

        path = new_token(config.home)
        print(f"ponder: a new token is in {path}", file=sys.stderr)
        if not args.listen:
            return 0
    try:
        listener, shown = build_listener(args, config)
    except ListenRefused as exc:
        print(f"ponder serve: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ponder serve: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2

    def ready() -> None:
        print(f"ponder: listening on {shown()}", file=sys.stderr, flush=True)

    try:
        dialects: dict[str, DialectServer] = {"acp": _serve_acp}
        anyio.run(lambda: serve_listening(config, listener, on_ready=ready, dialects=dialects), backend=backend)
    except OSError as exc:  # the bind itself failed (address in use...)
        print(f"ponder serve: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


async def _serve_acp(
    clients: Clients,
    kind: TransportKind,
    incoming: FirstAgain | Incoming,
    outgoing: MemoryObjectSendStream[Outgoing],
    drop: Drop,
) -> None:
    """A connection that chose ACP (``ponder acp --attach``); the ACP adapter loads with the first one."""
    from daemon.acp.attached import serve_attached_acp

    await serve_attached_acp(clients, kind, incoming, outgoing, drop)


def build_listener(args: argparse.Namespace, config: Config) -> tuple[Listener, Callable[[], str]]:
    """The listener ``--listen`` names, checked before anything listens; and how to show where it listens."""
    from daemon.errors import ListenRefused

    endpoint: str = args.listen
    if endpoint == "unix" or endpoint.startswith("unix:"):
        from daemon.server.unix_socket import SOCKET_FILE, check_socket_path, unix_listener

        given = endpoint.partition(":")[2]
        path = Path(given).expanduser().absolute() if given else config.home / SOCKET_FILE
        check_socket_path(path)
        return unix_listener(path, args.max_line_bytes), lambda: f"unix:{path}"
    if endpoint.startswith(("ws://", "wss://")):
        from daemon.server.websocket import WebSocketOptions, websocket_listener

        options = WebSocketOptions.from_url(
            endpoint,
            home=config.home,
            allow_remote=args.allow_remote,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            allow_origins=args.allow_origin,
            allow_hosts=args.allow_host,
            max_message_bytes=args.max_line_bytes,
        )
        return websocket_listener(options), options.shown
    raise ListenRefused(f"--listen takes unix[:PATH] or ws://127.0.0.1:PORT, not {endpoint!r}.")
