"""The client commands' common run: start (or take) the daemon, connect, ``initialize``, run the
command's module, shut down; and turn what went wrong into a line for the person.

Errors are said in the command line's words (``wording``); the daemon's configuration problems
are shown once, in plain words, while its log goes to ``logs/ponder.log`` only. Output piped
into a program that stops reading (``ponder models | head``) ends the command quietly, with the
status a Unix tool killed by SIGPIPE has (141).

Each command is a module of its own (``ask``, ``sessions``, ``compact``, ``continuing``,
``models``, ``mcp``, ``login``) with one ``async def NAME(client, args) -> int``: the exit status.
"""

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

import anyio

from daemon.cli import opening
from daemon.cli.ending import exit_now, reader_went_away
from daemon.cli.permission import PermissionPrompt
from daemon.cli.wording import for_person
from daemon.jsonrpc.client import DaemonStopped, RpcClient, RpcError, spawn_daemon
from daemon.jsonrpc.early import SentEarly
from daemon.jsonrpc.spawn import QUIET_SERVE, StartedDaemon

Command = Callable[[RpcClient, argparse.Namespace], Awaitable[int]]
DAEMON_STOPPED = "ponder: the daemon stopped before it answered; see logs/ponder.log in the home."


# Each command's module is imported when it runs, not with this one: the daemon it spawned is
# starting up beside this process meanwhile, and the others are never needed.
async def _ask(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.ask import ask

    return await ask(client, args)


async def _sessions(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.sessions import sessions

    return await sessions(client, args)


async def _compact(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.compact import compact

    return await compact(client, args)


async def _continue(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.continuing import continue_session

    return await continue_session(client, args)


async def _models(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.models import models

    return await models(client, args)


async def _mcp(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.mcp import mcp

    return await mcp(client, args)


async def _login(client: RpcClient, args: argparse.Namespace) -> int:
    from daemon.cli.login import login

    return await login(client, args)


COMMANDS: dict[str, Command] = {
    "ask": _ask,
    "sessions": _sessions,
    "compact": _compact,
    "continue": _continue,
    "models": _models,
    "mcp": _mcp,
    "login": _login,
}


def run(args: argparse.Namespace, daemon: StartedDaemon | None = None, sent_early: Sequence[SentEarly] = ()) -> int:
    """Run the client command ``args`` against ``daemon`` (from ``start_daemon``; started here if None),
    to which ``sent_early`` was written already (``daemon.jsonrpc.early``)."""
    backend = os.environ.get("PONDER_ASYNC_BACKEND", "asyncio")
    try:
        return anyio.run(_run, args, daemon, sent_early, backend=backend)
    except BaseException as exc:
        if _find(exc, BrokenPipeError) is not None:
            return reader_went_away()
        error = _find(exc, RpcError)
        if error is not None:
            print(f"ponder: {for_person(error.message)}", file=sys.stderr)
            return 1
        if _find(exc, DaemonStopped) is not None:
            print(DAEMON_STOPPED, file=sys.stderr)
            return 1
        if _find(exc, KeyboardInterrupt) is not None:
            return 130
        raise


def run_then_exit(
    args: argparse.Namespace, daemon: StartedDaemon | None = None, sent_early: Sequence[SentEarly] = ()
) -> NoReturn:
    """``run``, then end the process at once (``ending.exit_now``): the daemon was told to shut
    down and finishes alone."""
    exit_now(run(args, daemon, sent_early))


SHUTDOWN_WAIT_S = 5.0


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


async def _run(args: argparse.Namespace, daemon: StartedDaemon | None, sent_early: Sequence[SentEarly]) -> int:
    interactive = opening.interactive()
    prompt = PermissionPrompt()
    on_request = prompt.answer if interactive else None
    # Not waiting for the daemon to exit: by the end every answer is in (see spawn_daemon).
    async with spawn_daemon(
        home=args.home,
        serve_args=QUIET_SERVE,
        log_level=args.log_level,
        on_request=on_request,
        started=daemon,
        sent_early=sent_early,
        wait_for_exit=False,
    ) as client:
        prompt.client = client
        initialized = await client.request("initialize", opening.initialize_params(interactive))
        for problem in initialized.get("problems") or []:
            print(f"ponder: {for_person(problem)}", file=sys.stderr)
        code = await COMMANDS[args.command](client, args)
        # Bounded: a daemon that no longer answers (the command gave up on it after a Ctrl-C) must
        # not keep the command from ending; closing its input then stops it.
        with anyio.move_on_after(SHUTDOWN_WAIT_S):
            await client.request("shutdown")
        return code
