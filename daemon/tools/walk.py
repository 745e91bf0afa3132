"""Walking the session's tree the way a developer sees it: no ``.git``, nothing ignored.

Shared by ``list_files`` and ``search`` (which run it in a child process, see ``child``).
The walk never leaves the root, even while the tree changes under it: every directory is
opened relative to its parent's descriptor with ``O_NOFOLLOW``, so symlinked directories
are never descended (that avoids loops too) and one swapped in mid-walk is not followed.
Symlinked files are kept only when their target is inside the root, and ``open_walked``
opens them through ``confined_parent``. FIFOs, sockets and devices are left out, and a
``.gitignore`` is only read when it is a regular file (a FIFO there would block forever).
Directories that cannot be read are counted in ``WalkStats`` rather than failing the walk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import msgspec

from daemon.tools.ignore import GitIgnore
from daemon.tools.paths import DIR_FLAGS, READ_FLAGS, confined_parent, is_inside

__all__ = ["ALWAYS_SKIPPED", "MAX_GITIGNORE_BYTES", "WalkStats", "WalkedFile", "open_walked", "walk_files"]

# A repository's own data is never project content; a worktree's .git is a file.
ALWAYS_SKIPPED = frozenset({".git"})
MAX_GITIGNORE_BYTES = 1024 * 1024


class WalkedFile(msgspec.Struct, frozen=True):
    rel: str  # relative to the root, '/'-separated; may hold surrogates for non-UTF-8 bytes
    dir_fd: int  # its directory, open until the walk moves past it
    name: str
    symlink: bool  # a symlink to a file inside the root


class WalkStats(msgspec.Struct):
    unreadable_dirs: int = 0


def walk_files(
    root: Path, start: Path, stats: WalkStats | None = None, hidden: tuple[Path, ...] = ()
) -> Iterator[WalkedFile]:
    """Yield each file under ``start``, in sorted order: a directory's files, then its subdirectories'.

    ``root`` and ``start`` are real paths, ``start`` inside ``root``. Ignore rules come
    from ``.gitignore`` files from ``root`` down; ``start`` itself is walked even when
    ignored, since asking for it by name is explicit. Raises ``OSError`` when ``start``
    cannot be opened. Nothing inside ``hidden`` (real paths: the ponder home) is yielded or
    entered, also through a symlink.
    """
    stats = stats if stats is not None else WalkStats()
    rel_start = "" if start == root else start.relative_to(root).as_posix()
    if start == root:
        start_fd = os.open(root, DIR_FLAGS)
    else:
        with confined_parent(root, start) as (parent_fd, name):
            try:
                start_fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
            except NotADirectoryError:
                if stat.S_ISREG(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode):
                    yield WalkedFile(rel_start, parent_fd, name, symlink=False)
                return
    # Only the directories on the current path are open, however wide the tree.
    stack = [_Dir(start_fd, rel_start, _rules_above(root, start))]
    try:
        while stack:
            current = stack[-1]
            if current.pending is None:  # first visit: its files, then its subdirectories
                current.ignore = _with_gitignore(current.ignore, current.fd, current.base)
                subdirs: list[str] = []
                yield from _files_of(current, root, subdirs, stats, hidden)
                current.pending = iter(subdirs)
            subdir = next(current.pending, None)
            if subdir is None:
                os.close(stack.pop().fd)
                continue
            try:
                fd = os.open(subdir, DIR_FLAGS, dir_fd=current.fd)
            except OSError:
                # Unreadable, vanished, or swapped for a symlink since the scan: not followed.
                stats.unreadable_dirs += 1
                continue
            stack.append(_Dir(fd, f"{current.base}/{subdir}" if current.base else subdir, current.ignore))
    finally:
        for left in stack:
            os.close(left.fd)


class _Dir(msgspec.Struct):
    fd: int
    base: str  # relative to the root; '' for the root
    ignore: GitIgnore
    pending: Iterator[str] | None = None  # subdirectories still to walk, once scanned


def _files_of(
    directory: _Dir, root: Path, subdirs: list[str], stats: WalkStats, hidden: tuple[Path, ...] = ()
) -> Iterator[WalkedFile]:
    """The files in ``directory``, in name order; its subdirectories go to ``subdirs``."""
    try:
        with os.scandir(directory.fd) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
    except OSError:
        stats.unreadable_dirs += 1
        return
    base = directory.base
    for entry in entries:
        if entry.name in ALWAYS_SKIPPED:
            continue
        rel = f"{base}/{entry.name}" if base else entry.name
        if any(is_inside(root / rel, h) for h in hidden):
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            symlink = stat.S_ISLNK(mode)
            if symlink:
                target = Path(os.path.realpath(root / rel))
                if not is_inside(target, root) or not target.is_file() or any(is_inside(target, h) for h in hidden):
                    continue
            elif not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
                continue  # sockets, fifos, devices: not files to read
        except OSError:
            continue
        is_dir = stat.S_ISDIR(mode)
        if directory.ignore.ignored(rel, is_dir):
            continue
        if is_dir:
            subdirs.append(entry.name)
        else:
            yield WalkedFile(rel, directory.fd, entry.name, symlink)


def open_walked(root: Path, walked: WalkedFile) -> tuple[int, os.stat_result] | None:
    """A read descriptor of a regular file the walk yielded and its stat, or None when it is
    gone or is no longer a regular file inside the root."""
    try:
        if walked.symlink:
            target = Path(os.path.realpath(root / walked.rel))
            if not is_inside(target, root) or target == root:
                return None
            with confined_parent(root, target) as (dir_fd, name):
                fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        else:
            fd = os.open(walked.name, READ_FLAGS, dir_fd=walked.dir_fd)
    except (OSError, ValueError):
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd, info


def _with_gitignore(ignore: GitIgnore, dir_fd: int, base: str) -> GitIgnore:
    text = _read_gitignore(dir_fd)
    return ignore if text is None else ignore.with_file(base, text)


def _read_gitignore(dir_fd: int) -> str | None:
    # Not followed when a symlink, as git does; never a FIFO; a sane size.
    try:
        fd = os.open(".gitignore", READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as file:
            return file.read(MAX_GITIGNORE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _rules_above(root: Path, start: Path) -> GitIgnore:
    """The rules from ``.gitignore`` files in ``root`` .. ``start``'s parent."""
    ignore = GitIgnore()
    if start == root:
        return ignore
    fd = os.open(root, DIR_FLAGS)
    try:
        base = ""
        for part in start.relative_to(root).parts[:-1]:
            ignore = _with_gitignore(ignore, fd, base)
            next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
            base = f"{base}/{part}" if base else part
        return _with_gitignore(ignore, fd, base)
    except OSError:
        return ignore
    finally:
        os.close(fd)
