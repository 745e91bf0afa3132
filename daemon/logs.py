"""Logging set-up: stderr and a rotating file in the home's ``logs/``; never stdout, and never a
known credential (``daemon.util.redact.MaskingFormatter``).

``logs/`` is created 0700 and every log file 0600, the ones made by a rotation included.
"""

import io
import logging
import logging.handlers
import os
import sys
from pathlib import Path

from daemon.config.home import make_private_dir, open_private
from daemon.util.redact import MaskingFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_BYTES = 5 * 1024 * 1024
BACKUP_COUNT = 3


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A ``RotatingFileHandler`` whose files are owner-only, also the fresh one after each rotation."""

    def _open(self) -> io.TextIOWrapper:
        fd = open_private(self.baseFilename, os.O_WRONLY | os.O_APPEND)
        stream = open(fd, self.mode, encoding=self.encoding, errors=self.errors)
        assert isinstance(stream, io.TextIOWrapper)  # a text mode always gives one
        return stream


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
            rotating = PrivateRotatingFileHandler(
                log_dir / "ponder.log", maxBytes=max_bytes, backupCount=BACKUP_COUNT, encoding="utf-8"
            )
            rotating.setFormatter(MaskingFormatter(FORMAT))
            root.addHandler(rotating)
        except OSError as exc:
            if to_stderr not in root.handlers:
                root.addHandler(to_stderr)
            root.warning("cannot write logs to %s: %s", log_dir, exc)
    # Libraries' chatter (httpx logs every request) stays out of info-level logs.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
