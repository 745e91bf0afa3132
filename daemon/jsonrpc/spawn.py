"""Starting ``ponder serve`` as a child process: stdlib only, so that the ``ponder`` client
commands can start the daemon before they import their own async stack."""

import os
import subprocess
import sys

# How the ponder client commands run the daemon: its log goes to the home's logs/ponder.log only,
# not to the person's terminal; and no warm-up after initialize: a one-shot command loads what it
# uses on its requests, and a warm-up thread beside them only competes with them for the CPU.
QUIET_SERVE = ("--quiet", "--no-warm-up")


def daemon_command(home: str | os.PathLike[str] | None, serve_args: tuple[str, ...], log_level: str) -> list[str]:
    """``python -m daemon [--home H] serve SERVE_ARGS`` with this interpreter."""
    command = [sys.executable, "-m", "daemon", "--log-level", log_level]
    if home is not None:
        command += ["--home", str(home)]
    return [*command, "serve", *serve_args]


def start_daemon(
    *,
    home: str | os.PathLike[str] | None = None,
    serve_args: tuple[str, ...] = (),
    log_level: str = "info",
    env: dict[str, str] | None = None,
    stderr: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``python -m daemon [--home H] serve SERVE_ARGS`` without an event loop.

    The ``ponder`` client commands call this before they import their own async stack, so
    the daemon starts up while the client does; ``spawn_daemon(started=...)`` then connects.
    """
    return subprocess.Popen(
        daemon_command(home, serve_args, log_level),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env={**os.environ, **(env or {})},
        cwd=os.getcwd(),  # os, not pathlib: the client starts its daemon before importing more
        # Its own session: a Ctrl-C at the person's terminal is for the client command, which
        # cancels the turn; the daemon must not get it too (it would shut down mid-cancel).
        start_new_session=True,
    )
