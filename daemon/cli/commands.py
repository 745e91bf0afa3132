"""The client commands' common run: start (or take) the daemon, connect, ``initialize``, run the
command's module, shut down; and turn what went wrong into a line for the person.

Each command is a module of its own (``ask``, ``sessions``, ``compact``, ``models``, ``mcp``,
``login``) with one ``async def NAME(client, args) -> int``: the exit status.
"""

import argparse
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from daemon.cli import ask, compact, login, mcp, models, sessions
from daemon.cli.permission import ask_permission
from daemon.jsonrpc.client import RpcClient, RpcError, spawn_daemon

Command = Callable[[RpcClient, argparse.Namespace], Awaitable[int]]
COMMANDS: dict[str, Command] = {
    "ask": ask.ask,
    "sessions": sessions.sessions,
    "compact": compact.compact,
    "models": models.models,
    "mcp": mcp.mcp,
    "login": login.login,
}


def run(args: argparse.Namespace, daemon: subprocess.Popen[bytes] | None = None) -> int:
    """Run the client command ``args`` against ``daemon`` (from ``start_daemon``; started here if None)."""
    backend = os.environ.get("PONDER_ASYNC_BACKEND", "asyncio")
    try:
        return anyio.run(_run, args, daemon, backend=backend)
    except BaseException as exc:
        error = _find(exc, RpcError)
        if error is not None:
            print(f"ponder: {error.message}", file=sys.stderr)
            return 1
        if _find(exc, KeyboardInterrupt) is not None:
            return 130
        raise


_E = TypeVar("_E", bound=BaseException)


def _find(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first ``kind`` in ``exc`` or, depth first, in the groups it is made of."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


async def _run(args: argparse.Namespace, daemon: subprocess.Popen[bytes] | None) -> int:
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    on_request = ask_permission if interactive else None
    # Not waiting for the daemon to exit: by the end every answer is in (see spawn_daemon).
    async with spawn_daemon(
        home=args.home, log_level="warning", on_request=on_request, started=daemon, wait_for_exit=False
    ) as client:
        await client.request(
            "initialize",
            {
                "protocol_version": 1,
                "client_info": {"name": "ponder-cli", "version": "1"},
                "capabilities": {"permission_requests": interactive},
            },
        )
        code = await COMMANDS[args.command](client, args)
        await client.request("shutdown")
        return code
