"""``ponder serve`` and ``ponder acp`` on stdio: the plain serve line (read without argparse)
and running the daemon on it. ``daemon.cli.main`` loads this only for those lines: a client
command starts its daemon before importing anything (``typing`` included), see its ``main``."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from daemon.cli.command_line import BACKEND_ENV, DEFAULT_MAX_LINE_BYTES, global_options

if TYPE_CHECKING:  # the config module loads only when a command needs it
    from daemon.config.settings import Config
    from daemon.sandbox.probe import ProbeRun


class Serve:
    """What ``serve`` and ``acp`` run with.

    A plain class, not a NamedTuple (making a NamedTuple class costs ~0.7 M instructions) nor a
    msgspec Struct: msgspec's import (with decimal, inspect, numbers, ...) waits until the
    collector is off (``run_serve``), else the collector walks what it makes as it loads."""

    __slots__ = ("command", "home", "log_level", "max_line_bytes", "quiet", "warm_up")

    def __init__(
        self,
        command: str,  # "serve" or "acp"
        home: str | None,
        log_level: str,
        max_line_bytes: int,
        quiet: bool = False,
        warm_up: bool = True,  # load the session stack on a thread shortly after initialize (not: --no-warm-up)
    ) -> None:
        self.command = command
        self.home = home
        self.log_level = log_level
        self.max_line_bytes = max_line_bytes
        self.quiet = quiet
        self.warm_up = warm_up

    def _values(self) -> tuple[str, str | None, str, int, bool, bool]:
        return (self.command, self.home, self.log_level, self.max_line_bytes, self.quiet, self.warm_up)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Serve) and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value: unhashable, as a Struct is

    def __repr__(self) -> str:
        return f"Serve{self._values()!r}"


def plain_serve(argv: list[str]) -> Serve | None:
    """``[--home H] [--log-level L] serve [--max-line-bytes N] [--quiet] [--no-warm-up]``, the line an editor (or
    a client command) spawns, read without argparse: importing it and declaring every command's
    arguments is a noticeable part of a daemon's start-up. None for any other line, which
    argparse reads (and explains)."""
    found = global_options(argv)
    if found is None or not found[2] or found[2][0] != "serve":
        return None
    home, level, rest = found
    limit, quiet, warm_up, options = DEFAULT_MAX_LINE_BYTES, False, True, rest[1:]
    while options:
        match options:
            case ["--quiet", *more]:
                quiet, options = True, more
            case ["--no-warm-up", *more]:
                warm_up, options = False, more
            case ["--max-line-bytes", digits, *more] if digits.isdigit():
                limit, options = int(digits), more
            case _:
                return None
    return Serve("serve", home, level, limit, quiet, warm_up)


def run_serve(args: Serve) -> int:
    import gc

    # Start-up allocates tens of thousands of objects that live as long as the daemon (its
    # modules, its types): the collector would walk them over and over while they load (about
    # a tenth of the time to initialize). serve_connection freezes them and turns it back on.
    gc.disable()
    from daemon.util.collector import tune_for_daemon

    tune_for_daemon()
    from daemon.sandbox.probe import ProbeRun

    # The sandbox probe's bwrap child runs while this process loads its stack and opens the
    # store: initialize reports its result (PROTOCOL.md "Sandbox"). (ACP starts its own.)
    sandbox_probe = ProbeRun() if args.command == "serve" else None

    import anyio

    from daemon.config.settings import load_config, resolve_home
    from daemon.logs import setup_logging

    # Keep the protocol channel private: stray prints (ours, a library's, a child
    # process's) go to stderr, and tools' children cannot read the client's input.
    protocol_out = os.dup(sys.stdout.fileno())
    protocol_in = os.dup(sys.stdin.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    stdin_from_devnull()

    home = resolve_home(args.home)
    config = load_config(home)
    setup_logging(config.log_dir, args.log_level, stderr=not args.quiet)
    backend = os.environ.get(BACKEND_ENV, "asyncio")
    anyio.run(
        _serve_stdio,
        config,
        args.max_line_bytes,
        protocol_in,
        protocol_out,
        args.command,
        sandbox_probe,
        args.warm_up,
        backend=backend,
    )
    return 0


def stdin_from_devnull() -> None:
    """Point this process's stdin at /dev/null: nothing (a tool's child included) reads the
    client's input or the person's terminal through it."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, sys.stdin.fileno())
    os.close(devnull)


async def _serve_stdio(
    config: Config,
    max_line_bytes: int,
    in_fd: int,
    out_fd: int,
    dialect: str = "serve",
    sandbox_probe: ProbeRun | None = None,
    warm_up: bool = True,
) -> None:
    from daemon.jsonrpc.stdio import open_stdio

    async with open_stdio(max_line_bytes, stdin_fd=in_fd, stdout_fd=out_fd) as (incoming, outgoing):
        if dialect == "acp":
            from daemon.acp import serve_acp  # the same daemon core, in the ACP dialect

            await serve_acp(config, incoming, outgoing, handle_signals=True)
        else:
            from daemon.server import serve

            await serve(config, incoming, outgoing, handle_signals=True, sandbox_probe=sandbox_probe, warm_up=warm_up)
