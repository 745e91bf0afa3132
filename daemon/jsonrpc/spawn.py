"""Starting ``ponder serve`` as a child process before anything else is imported.

``ponder ask`` and the other client commands start their daemon first, so that it starts up
while the client reads its arguments and imports its own async stack: every instruction the
client runs before the spawn delays the daemon's whole start. So this module imports nothing
but ``os`` and ``sys`` (loaded by the interpreter already): the child is started with
``os.posix_spawn``, not ``subprocess`` (whose import, with ``signal``, ``threading``,
``selectors`` and ``locale``, costs about as much as the interpreter's own start), and
``StartedDaemon`` is the little of ``subprocess.Popen`` the client uses.
"""

import os
import sys

# How the ponder client commands run the daemon: its log goes to the home's logs/ponder.log only,
# not to the person's terminal; and no warm-up after initialize: a one-shot command loads what it
# uses on its requests, and a warm-up thread beside them only competes with them for the CPU.
QUIET_SERVE = ("--quiet", "--no-warm-up")

DEVNULL = -3  # ``subprocess.DEVNULL``, as ``stderr``: the child's stderr goes to /dev/null


# The daemon's entry, as ``python -c``: what ``python -m daemon`` runs (daemon/__main__.py), with the
# same arguments and the same sys.path (the working directory first). Not ``-m``: it goes through
# runpy (its import and the module search: ~1.7 M instructions more to answer initialize), and
# every client command waits for its daemon's start.
DAEMON_MAIN = "from daemon.cli.main import main; raise SystemExit(main())"


def daemon_command(home: str | os.PathLike[str] | None, serve_args: tuple[str, ...], log_level: str) -> list[str]:
    """``python -m daemon [--home H] serve SERVE_ARGS`` with this interpreter (run as ``-c DAEMON_MAIN``)."""
    command = [sys.executable, "-c", DAEMON_MAIN, "--log-level", log_level]
    if home is not None:
        command += ["--home", str(home)]
    return [*command, "serve", *serve_args]


class StartedDaemon:
    """A child started by ``start_process``: its pipes (``stdin`` to write to, ``stdout`` to
    read from, both binary and unbuffered), its pid, and waiting for it or signalling it, as
    ``subprocess.Popen`` does (a child already reaped is never signalled: its pid may be reused)."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int) -> None:
        self.pid = pid
        self.stdin = open(stdin_fd, "wb", buffering=0)
        self.stdout = open(stdout_fd, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code if the child has exited (it is reaped then), else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit (at most ``timeout`` seconds: ``TimeoutError`` then) and reap it."""
        if self.returncode is not None:
            return self.returncode
        if timeout is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        import time  # (loaded at interpreter start: no cost)

        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the daemon (pid {self.pid}) did not exit within {timeout} s")
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:  # exited between the poll and the signal
                pass

    def terminate(self) -> None:
        self.send_signal(15)  # SIGTERM (``signal`` imports enum: not for two numbers)

    def kill(self) -> None:
        self.send_signal(9)  # SIGKILL


def _above_stdio(fd: int) -> int:
    """``fd`` itself, or a copy numbered 3 or more: a pipe end that took a free 0, 1 or 2 (this
    process started with one closed) would be closed in the child by the dup2 onto it."""
    if fd > 2:
        return fd
    import fcntl  # a built-in module: no cost

    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return copy


def start_process(argv: list[str], *, env: dict[str, str] | None = None, stderr: int | None = None) -> StartedDaemon:
    """Start ``argv`` with pipes on its stdin and stdout (stderr inherited, or /dev/null with
    ``DEVNULL``), in a session of its own, as ``subprocess.Popen(start_new_session=True)`` does:
    a Ctrl-C at the person's terminal is for the client command, which cancels the turn; the
    daemon must not get it too (it would shut down mid-cancel). The child gets no other
    descriptor of this process (what ``close_fds`` does): Python opens its own non-inheritable,
    and any inheritable one this process was given is closed in the child."""
    child_in, to_child = (_above_stdio(fd) for fd in os.pipe())
    from_child, child_out = (_above_stdio(fd) for fd in os.pipe())
    ours = {child_in, to_child, from_child, child_out}
    actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, child_in, 0), (os.POSIX_SPAWN_DUP2, child_out, 1)]
    null = None
    if stderr == DEVNULL:
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        actions.append((os.POSIX_SPAWN_DUP2, null, 2))
    elif stderr is not None:
        raise ValueError("stderr is None (inherited) or DEVNULL")
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: only the descriptors Python made, which are not inheritable
        inherited = []
    for fd in inherited:
        if fd > 2 and fd not in ours and fd != null:
            try:
                if os.get_inheritable(fd):
                    actions.append((os.POSIX_SPAWN_CLOSE, fd))
            except OSError:  # the directory's own descriptor, closed by now
                pass
    try:
        # The child is Python: it sets its own SIGPIPE and SIGXFSZ dispositions at start
        # (what Popen's restore_signals is for), so none are reset here.
        pid = os.posix_spawn(argv[0], argv, os.environ if env is None else env, file_actions=actions, setsid=True)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        if null is not None:
            os.close(null)
    os.close(child_in)
    os.close(child_out)
    return StartedDaemon(pid, to_child, from_child)


def start_daemon(
    *,
    home: str | os.PathLike[str] | None = None,
    serve_args: tuple[str, ...] = (),
    log_level: str = "info",
    env: dict[str, str] | None = None,
    stderr: int | None = None,
) -> StartedDaemon:
    """Start ``python -m daemon [--home H] serve SERVE_ARGS`` (``daemon_command``) without an event loop.

    The ``ponder`` client commands call this before they import anything else, so the daemon
    starts up while the client does; ``spawn_daemon(started=...)`` then connects.
    """
    return start_process(daemon_command(home, serve_args, log_level), env={**os.environ, **(env or {})}, stderr=stderr)
