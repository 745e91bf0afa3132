"""Owner-only places in the ponder home: the home itself and ``logs/`` are 0700, files in them 0600."""

import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) owner-only; an existing directory is left as it is.

    Raises ``OSError`` when it cannot be created (a read-only file system, a file in the way).
    """
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return  # made by another daemon meanwhile
    # mkdir's mode is filtered by the umask, which can only remove bits; say it exactly anyway.
    os.chmod(path, PRIVATE_DIR_MODE)


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open`` that creates the file owner-only and tightens a looser existing regular file.

    Anything else the path names is left as it is: a log pointed at ``/dev/null`` or a pipe must
    not make the device owner-only for the whole machine (a daemon run as root could)."""
    fd = os.open(path, flags | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE_MODE)
    try:
        if too_open(os.fstat(fd).st_mode):
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except OSError:
        pass  # not ours to change
    return fd


def too_open(mode: int) -> bool:
    """Whether a file of ``mode`` (``st_mode``) is to be tightened to ``PRIVATE_FILE_MODE``: a
    regular file others may read or write. Never a device or a pipe a path names (/dev/null)."""
    return stat.S_ISREG(mode) and bool(mode & 0o077)
