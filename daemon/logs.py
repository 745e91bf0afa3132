"""Logging set-up: stderr and a rotating file in the home's ``logs/``; never stdout, and never a
known credential (``daemon.util.redact.MaskingFormatter``).

``logs/`` is created 0700 and every log file 0600, the ones made by a rotation included. The
file is opened (and ``logging.handlers`` imported) when the first record arrives, not at
start-up: a daemon with nothing to say has nothing to load.
"""

import io
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.config.home import make_private_dir, open_private
from daemon.util.redact import MaskingFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_BYTES = 5 * 1024 * 1024
BACKUP_COUNT = 3


if TYPE_CHECKING:
    import logging.handlers


def private_rotating_handler(path: Path, max_bytes: int) -> "logging.handlers.RotatingFileHandler":
    """A ``RotatingFileHandler`` whose files are owner-only, also the fresh one after each rotation."""
    import logging.handlers

    class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
        def _open(self) -> io.TextIOWrapper:
            fd = open_private(self.baseFilename, os.O_WRONLY | os.O_APPEND)
            stream = open(fd, self.mode, encoding=self.encoding, errors=self.errors)
            assert isinstance(stream, io.TextIOWrapper)  # a text mode always gives one
            return stream

    # backslashreplace: a record quoting a file name that is not UTF-8 (a lone surrogate) is still
    # written, escaped, instead of lost with a "Logging error" traceback on stderr.
    handler = PrivateRotatingFileHandler(
        path, maxBytes=max_bytes, backupCount=BACKUP_COUNT, encoding="utf-8", errors="backslashreplace"
    )
    handler.setFormatter(MaskingFormatter(FORMAT))
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
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setFormatter(MaskingFormatter(FORMAT))
    if stderr or log_dir is None:
        root.addHandler(to_stderr)
    if log_dir is not None:
        try:
            make_private_dir(log_dir.parent)  # the home, when this is the first thing to make it
            make_private_dir(log_dir)
            path = log_dir / "ponder.log"
            root.addHandler(OpenedOnFirstRecord(lambda: private_rotating_handler(path, max_bytes), log_dir))
        except OSError as exc:
            if to_stderr not in root.handlers:
                root.addHandler(to_stderr)
            root.warning("cannot write logs to %s: %s", log_dir, exc)
    # Libraries' chatter (httpx logs every request) stays out of info-level logs.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
