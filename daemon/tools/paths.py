"""Confining file paths to the session's working directory, and opening them race-free.

Every file tool resolves its ``path`` argument here first. The check is made on the
real path (``..`` collapsed, symlinks followed, including a dangling symlink's target),
so neither ``../x``, an absolute path elsewhere, nor a symlink pointing out of the tree
reaches outside. Paths that do not exist yet (``write_file``) are resolved through their
nearest existing parent, which is what ``os.path.realpath`` does for missing components.

A check on a path name proves nothing about the file opened a moment later: a directory
can be swapped for a symlink in between. So the file is then opened by walking from a
descriptor of the cwd one component at a time with ``O_NOFOLLOW`` (``confined_parent``):
the file used is the file checked, or the call fails. Files are opened ``O_NONBLOCK``
(``open_regular``) so a FIFO swapped in can never block a thread; only regular files
are read or written.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from daemon.tools.base import ToolContext, ToolError
from daemon.tools.text import escape_char

__all__ = [
    "DIR_FLAGS",
    "check_protected",
    "confined_parent",
    "display_path",
    "escape_name",
    "is_inside",
    "open_regular",
    "resolve_in_cwd",
]

# A directory opened to walk through: never through a symlink.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file opened to read: never a symlink, never blocking (FIFOs, devices).
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def resolve_in_cwd(cwd: Path, path: str) -> Path:
    """The real absolute path for ``path`` (relative to ``cwd``), refused outside ``cwd``."""
    if not path:
        raise ToolError("path is empty; give a path relative to the session's working directory.")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte.")
    candidate = Path(path)
    if not candidate.is_absolute():
        # Join to the unresolved cwd: realpath below resolves both the same way.
        candidate = Path(cwd) / candidate
    try:
        root = Path(os.path.realpath(cwd))
        resolved = Path(os.path.realpath(candidate))
    except OSError as exc:
        # realpath itself races: a symlink it saw can be gone when it reads it (EINVAL).
        raise ToolError(f"cannot resolve path {path!r}: {exc.strerror or exc}; it is changing, try again.") from None
    if not is_inside(resolved, root):
        raise ToolError(
            f"path {path!r} is outside the session's working directory {root}; file tools only reach files inside it."
        )
    return resolved


def check_protected(path: Path, ctx: ToolContext, *, write: bool) -> None:
    """Refuse the (real) ``path`` when it lies in the ponder home, or, for a write, in a
    directory kept read-only (the cwd's ``.git`` while the sandbox is on)."""
    for hidden in ctx.hidden:
        if is_inside(path, hidden):
            shown = display_path(path, ctx.cwd)
            raise ToolError(f"'{shown}' is inside the ponder home ({hidden}); file tools never read or write there.")
    if write:
        for kept in ctx.read_only:
            if is_inside(path, kept):
                raise ToolError(
                    f"'{display_path(path, ctx.cwd)}' is inside {kept}, which stays read-only while the session's "
                    "sandbox is on; a git command that writes it must run outside the sandbox (under ask, "
                    "run_command offers that to the person when the sandbox stops it)."
                )


def is_inside(path: Path, root: Path) -> bool:
    """Whether the (already real) ``path`` is ``root`` or below it."""
    return path == root or path.is_relative_to(root)


def display_path(path: Path, cwd: Path) -> str:
    """``path`` as the model should name it: relative to the session cwd when inside."""
    root = Path(os.path.realpath(cwd))
    if path == root:
        return "."
    if path.is_relative_to(root):
        return escape_name(path.relative_to(root).as_posix())
    return escape_name(str(path))


def escape_name(name: str) -> str:
    """``name`` printable on one line in valid UTF-8: bytes that are not UTF-8 (which Python
    keeps as lone surrogates) become ``\\xNN`` and control characters ``\\n``, ``\\t``,
    ``\\xNN``, so a name can neither break the wire's UTF-8 nor pass for two lines."""
    if name.isprintable():
        return name
    return "".join(char if char.isprintable() else escape_char(char) for char in name)


@contextmanager
def confined_parent(root: Path, path: Path, *, create: bool = False) -> Iterator[tuple[int, str]]:
    """``(fd of path's parent directory, path's last component)``, reached from ``root``.

    ``root`` is the real cwd and ``path`` a real path below it (from ``resolve_in_cwd``).
    Every directory on the way is opened with ``O_NOFOLLOW`` relative to the one before,
    so a component swapped for a symlink since the check fails the call instead of leading
    elsewhere. With ``create``, missing directories are made (``write_file``). Raises
    ``ToolError`` for a swapped component, ``FileNotFoundError``/``NotADirectoryError``
    for a missing or non-directory parent, for the caller to phrase.
    """
    parts = path.relative_to(root).parts
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "is the working directory itself")
    fd = os.open(root, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                next_fd = _open_dir(part, fd, create)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ToolError(
                        f"a directory on the way to '{display_path(path, root)}' was replaced by a symlink while it "
                        "was being opened; file tools do not follow it. Check the path and try again."
                    ) from None
                raise
            os.close(fd)
            fd = next_fd
        yield fd, parts[-1]
    finally:
        os.close(fd)


def _open_dir(name: str, dir_fd: int, create: bool) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        pass  # made concurrently: open whatever is there, still without following a symlink
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def open_regular(name: str, dir_fd: int, shown: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``name`` in ``dir_fd`` and its stat.

    Raises ``ToolError`` for a directory, a symlink (one only appears here by a race: real
    paths have none), a FIFO, device or socket, and ``FileNotFoundError`` when missing.
    """
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolError(
                f"'{shown}' was replaced by a symlink while it was being opened; file tools do not follow it. "
                "Check the path and try again."
            ) from None
        if exc.errno == errno.EISDIR:
            raise ToolError(f"'{shown}' is a directory; use list_files to see its contents.") from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"'{shown}' is a directory; use list_files to see its contents.")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"'{shown}' is not a regular file (a FIFO, device or socket); file tools only use files.")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info
