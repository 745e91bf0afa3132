"""Replacing a file's content for ``write_file`` and ``edit_file``: atomically, in place of
the very file that was checked, and never through a second name.

The new content goes to a temporary file in the same directory (reached through
``confined_parent``), which is then renamed over the old one: a full disk or a crash leaves
the old content whole, and the rename replaces the directory entry itself, so a symlink or
FIFO swapped in at the last moment is replaced, never followed or blocked on. The old
file's permission bits are kept. A regular file with more than one hard link is refused:
its other names (maybe outside the cwd) would either change with it or silently stop
sharing its content, and neither is what the model asked for.
"""

from __future__ import annotations

import os
import stat

from daemon.tools.base import ToolError

__all__ = ["check_replaceable", "replace_file"]

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def check_replaceable(info: os.stat_result, shown: str, tool: str) -> None:
    """Raise ``ToolError`` unless ``info`` (an lstat or fstat) is a regular file with one name."""
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"'{shown}' is a directory; give a file path.")
    if stat.S_ISLNK(info.st_mode):
        # Real paths have no symlinks, so one here was swapped in after the check.
        raise ToolError(f"'{shown}' was replaced by a symlink while it was being opened; check it and try again.")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"'{shown}' is not a regular file (a FIFO, device or socket); {tool} only changes files.")
    if info.st_nlink > 1:
        raise ToolError(
            f"'{shown}' has {info.st_nlink} hard links: the same file has another name, maybe outside the working "
            f"directory, which {tool} would change too, so it refuses. Break the link first if that is intended "
            f"(e.g. run `cp '{shown}' '{shown}.copy' && mv '{shown}.copy' '{shown}'`), then try again."
        )


def replace_file(dir_fd: int, name: str, data: bytes, mode: int | None) -> None:
    """Make ``name`` in ``dir_fd`` hold ``data``, all or nothing; ``mode``: the bits to keep.

    Raises ``OSError`` (the old file is untouched then) for the caller to phrase.
    """
    temp = f".{name[:200]}.{os.urandom(4).hex()}.ponder-tmp"  # what secrets.token_hex does, without its imports
    fd = os.open(temp, _CREATE_FLAGS, 0o666, dir_fd=dir_fd)  # 0o666 less the umask, as for a new file
    try:
        try:
            with open(fd, "wb", closefd=False) as file:
                file.write(data)
            if mode is not None:
                os.fchmod(fd, stat.S_IMODE(mode))
            os.fsync(fd)  # the content is on disk before the name points at it
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
