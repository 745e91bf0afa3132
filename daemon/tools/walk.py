"""Walking the session's tree the way a developer sees it: no ``.git``, nothing ignored.

Shared by ``list_files`` and ``search``. The walk never leaves the root: symlinked
directories are not descended (that avoids loops too), and symlinked files are kept
only when their target is inside the root. It runs in a worker thread, so callers pass
``check_cancelled`` (``anyio.from_thread.check_cancelled``) to stay cancellable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from daemon.tools.ignore import GitIgnore
from daemon.tools.paths import is_inside

__all__ = ["ALWAYS_SKIPPED", "walk_files"]

# A repository's own data is never project content; a worktree's .git is a file.
ALWAYS_SKIPPED = frozenset({".git"})


def walk_files(
    root: Path, start: Path, *, check_cancelled: Callable[[], None] | None = None
) -> Iterator[tuple[Path, str]]:
    """Yield ``(path, relative_to_root)`` for each file under ``start``, in sorted order.

    ``root`` and ``start`` are real paths, ``start`` inside ``root``. Ignore rules come
    from ``.gitignore`` files from ``root`` down; ``start`` itself is walked even when
    ignored, since asking for it by name is explicit.
    """
    if start.is_file():
        yield start, _relative(start, root)
        return
    ignore = _rules_above(root, start)
    stack: list[tuple[Path, GitIgnore]] = [(start, ignore)]
    while stack:
        if check_cancelled is not None:
            check_cancelled()
        directory, ignore = stack.pop()
        rel_dir = _relative(directory, root)
        base = "" if rel_dir == "." else rel_dir
        ignore = _with_gitignore(ignore, directory, base)
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            continue  # unreadable or vanished: skip it, as git would
        subdirs: list[Path] = []
        for entry in entries:
            if entry.name in ALWAYS_SKIPPED:
                continue
            rel = f"{base}/{entry.name}" if base else entry.name
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    target = Path(os.path.realpath(path))
                    if not is_inside(target, root) or not target.is_file():
                        continue
                    is_dir = False
                else:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if not is_dir and not entry.is_file(follow_symlinks=False):
                        continue  # sockets, fifos, devices: not files to read
            except OSError:
                continue
            if ignore.ignored(rel, is_dir):
                continue
            if is_dir:
                subdirs.append(path)
            else:
                yield path, rel
        # Reversed so the stack pops them in sorted order: files of a directory come
        # before the contents of its subdirectories, all alphabetical.
        stack.extend((subdir, ignore) for subdir in reversed(subdirs))


def _relative(path: Path, root: Path) -> str:
    return "." if path == root else path.relative_to(root).as_posix()


def _with_gitignore(ignore: GitIgnore, directory: Path, base: str) -> GitIgnore:
    try:
        text = (directory / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ignore
    return ignore.with_file(base, text)


def _rules_above(root: Path, start: Path) -> GitIgnore:
    """The rules from ``.gitignore`` files in ``root`` .. ``start``'s parent."""
    ignore = GitIgnore()
    if start == root:
        return ignore
    directory = root
    for part in start.relative_to(root).parts:
        rel = _relative(directory, root)
        ignore = _with_gitignore(ignore, directory, "" if rel == "." else rel)
        directory = directory / part
    return ignore
