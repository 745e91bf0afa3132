"""Run a real ``ponder`` command on a pseudo-terminal, as a person's shell does.

``pty.fork`` makes the child a session leader whose controlling terminal is the pty, so
stdin, stdout and stderr are all that terminal, ``/dev/tty`` is it too (the permission prompt
reads it), and a Ctrl-C typed into it (``\\x03``) is SIGINT to the foreground process group.
The terminal is 120 columns wide unless told otherwise.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """``text`` without ANSI escape sequences."""
    return ANSI.sub("", text)


class Terminal:
    """``python -m daemon ARGS`` on a pty; read what it shows, type into it, wait for its exit."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        *,
        cwd: Path | None = None,
        columns: int = 120,
        program: list[str] | None = None,
    ) -> None:
        """``program``: the command to run (default ``python -m daemon``), e.g. the installed ``ponder`` script."""
        command = program or [sys.executable, "-m", "daemon"]
        self.output = b""
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes ponder
            try:
                if cwd is not None:
                    os.chdir(cwd)
                os.execvpe(command[0], [*command, *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.returncode: int | None = None

    @property
    def text(self) -> str:
        """Everything shown so far, with the terminal's CRLF as LF."""
        return self.output.decode("utf-8", errors="replace").replace("\r\n", "\n")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal and it is drained
            return False
        if not chunk:
            return False
        self.output += chunk
        return True

    def expect(self, pattern: str, timeout: float = 60) -> str:
        """Read until ``pattern`` (a regex, matched on the text without colours) has appeared."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, plain(self.text)):
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} did not appear within {timeout}s; the terminal shows:\n{self.text}")
            if not self._read(0.1):
                if not re.search(pattern, plain(self.text)):
                    raise AssertionError(f"{pattern!r} never appeared; the terminal shows:\n{self.text}")
        return self.text

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 60) -> int:
        """Read to the end and return the exit status (128 + N for a signal, as a shell says)."""
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"ponder did not exit within {timeout}s; the terminal shows:\n{self.text}")
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        self.returncode = os.waitstatus_to_exitcode(status)
        if self.returncode < 0:
            self.returncode = 128 - self.returncode
        return self.returncode

    def wait_exit(self, timeout: float = 60) -> int:
        """The exit status once the process has exited, even while a child it left (a daemon) still
        holds the terminal open; what it showed until then is read."""
        deadline = time.monotonic() + timeout
        while True:
            self._read(0.05)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
                    pass
                os.close(self.fd)
                self.returncode = os.waitstatus_to_exitcode(status)
                if self.returncode < 0:
                    self.returncode = 128 - self.returncode
                return self.returncode
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"ponder did not exit within {timeout}s; the terminal shows:\n{self.text}")

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.returncode is None:
            self.kill()
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            os.close(self.fd)
