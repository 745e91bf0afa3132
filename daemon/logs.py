"""Logging set-up: stderr and a rotating file in the home's ``logs/``; never stdout, and never a
known credential (``daemon.util.redact.MaskingFormatter``).

``logs/`` is created 0700 and every log file 0600, the ones made by a rotation included. The
file is opened when the first record arrives, not at start-up: a daemon with nothing to say
opens nothing.
"""

import io
import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from daemon.config.home import make_private_dir, open_private
from daemon.util.redact import MaskingFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_BYTES = 5 * 1024 * 1024
BACKUP_COUNT = 3


class PrivateRotatingFileHandler(logging.FileHandler):
    """A log file rotated at ``max_bytes`` into ``.1`` … ``.BACKUP_COUNT``, as the standard library's
    ``RotatingFileHandler`` does, whose files are owner-only, also the fresh one after each rotation.

    Built on ``logging.FileHandler`` rather than on ``logging.handlers``: that module imports
    pickle, socket, queue and struct for handlers ponder never uses, and every daemon that writes
    a record (each ``ponder ask``'s does) would pay for it, about 3 % of the start-up floor."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        # backslashreplace: a record quoting a file name that is not UTF-8 (a lone surrogate) is still
        # written, escaped, instead of lost with a "Logging error" traceback on stderr.
        self._regular = False  # whether the open file is a regular file (set by each ``_open``)
        super().__init__(path, "a", encoding="utf-8", errors="backslashreplace")
        self.max_bytes = max_bytes

    def _open(self) -> io.TextIOWrapper:
        fd = open_private(self.baseFilename, os.O_WRONLY | os.O_APPEND)
        stream = open(fd, self.mode, encoding=self.encoding, errors=self.errors)
        assert isinstance(stream, io.TextIOWrapper)  # a text mode always gives one
        # Not a regular file (/dev/null, a pipe): nothing to rotate. Looked up once per opening.
        self._regular = stat.S_ISREG(os.fstat(fd).st_mode)
        return stream

    def emit(self, record: logging.LogRecord) -> None:
        # Formatted once (the standard library's handler formats each record twice: to size it,
        # then to write it), and the file's kind known from its opening, not looked up per record:
        # every turn writes a record, and 200 turns start at once in a burst.
        try:
            line = self.format(record) + self.terminator
            if self.stream is None:
                self.stream = self._open()
            if self._should_rotate(line):
                self._rotate()
            stream = self.stream
            assert stream is not None  # opened above, or again by the rotation
            stream.write(line)
            stream.flush()
        except Exception:
            self.handleError(record)

    def _should_rotate(self, line: str) -> bool:
        if self.max_bytes <= 0 or not self._regular:
            return False  # no limit, or nothing to rotate
        assert self.stream is not None
        # The file's size as it is now: another daemon on the same home appends to it too.
        return os.fstat(self.stream.fileno()).st_size + len(line) >= self.max_bytes

    def _rotate(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        for n in range(BACKUP_COUNT - 1, 0, -1):
            older, newer = f"{self.baseFilename}.{n}", f"{self.baseFilename}.{n + 1}"
            if os.path.exists(older):
                if os.path.exists(newer):
                    os.remove(newer)
                os.rename(older, newer)
        first = f"{self.baseFilename}.1"
        if os.path.exists(first):
            os.remove(first)
        if os.path.exists(self.baseFilename):
            os.rename(self.baseFilename, first)
        self.stream = self._open()


def private_rotating_handler(
    path: Path, max_bytes: int, formatter: MaskingFormatter | None = None
) -> PrivateRotatingFileHandler:
    """The home's log file (see ``PrivateRotatingFileHandler``), formatted without credentials
    (by ``formatter``, shared with the stderr handler: each record is formatted once)."""
    handler = PrivateRotatingFileHandler(path, max_bytes)
    handler.setFormatter(formatter or MaskingFormatter(FORMAT))
    return handler


class OpenedOnFirstRecord(logging.Handler):
    """Hands records to a handler made when the first one arrives (see the module docstring).

    A file that cannot be opened then is said once on stderr, and the file log is off."""

    def __init__(self, make: Callable[[], logging.Handler], where: Path) -> None:
        super().__init__()
        self._make = make
        self._where = where
        self._handler: logging.Handler | None = None
        self._failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._handler is None:
            if self._failed:
                return
            try:
                self._handler = self._make()
            except OSError as exc:
                self._failed = True
                sys.stderr.write(f"ponder: cannot write logs to {self._where}: {exc}\n")
                return
        self._handler.handle(record)

    def flush(self) -> None:
        if self._handler is not None:
            self._handler.flush()

    def close(self) -> None:
        if self._handler is not None:
            self._handler.close()
        super().close()


def setup_logging(
    log_dir: Path | None, level: str = "info", *, max_bytes: int = MAX_BYTES, stderr: bool = True
) -> None:
    """Log at ``level`` to ``log_dir/ponder.log`` and, unless ``stderr`` is False, to stderr. Without
    a usable log file the log goes to stderr whatever ``stderr`` says: it is never dropped."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = MaskingFormatter(FORMAT)  # one for both handlers: a record is formatted once
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setFormatter(formatter)
    if stderr or log_dir is None:
        root.addHandler(to_stderr)
    if log_dir is not None:
        try:
            make_private_dir(log_dir.parent)  # the home, when this is the first thing to make it
            make_private_dir(log_dir)
            path = log_dir / "ponder.log"
            root.addHandler(OpenedOnFirstRecord(lambda: private_rotating_handler(path, max_bytes, formatter), log_dir))
        except OSError as exc:
            if to_stderr not in root.handlers:
                root.addHandler(to_stderr)
            root.warning("cannot write logs to %s: %s", log_dir, exc)
    # Libraries' chatter (httpx logs every request) stays out of info-level logs.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
