"""Logging set-up: stderr and a rotating file in the home's ``logs/``; never stdout, and never a
known credential (``daemon.redact.MaskingFormatter``)."""

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from daemon.redact import MaskingFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(log_dir: Path | None, level: str = "info") -> None:
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in list(root.handlers):
        root.removeHandler(handler)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(MaskingFormatter(FORMAT))
    root.addHandler(stderr)
    if log_dir is not None:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            path = log_dir / "ponder.log"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.close(fd)
            rotating = logging.handlers.RotatingFileHandler(path, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8")
            rotating.setFormatter(MaskingFormatter(FORMAT))
            root.addHandler(rotating)
        except OSError as exc:
            root.warning("cannot write logs to %s: %s", log_dir, exc)
    # Libraries' chatter (httpx logs every request) stays out of info-level logs.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
