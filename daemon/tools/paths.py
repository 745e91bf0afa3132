"""Confining file paths to the session's working directory.

Every file tool resolves its ``path`` argument here first. The check is made on the
real path (``..`` collapsed, symlinks followed, including a dangling symlink's target),
so neither ``../x``, an absolute path elsewhere, nor a symlink pointing out of the tree
reaches outside. Paths that do not exist yet (``write_file``) are resolved through their
nearest existing parent, which is what ``os.path.realpath`` does for missing components.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.tools.base import ToolError

__all__ = ["display_path", "is_inside", "resolve_in_cwd"]


def resolve_in_cwd(cwd: Path, path: str) -> Path:
    """The real absolute path for ``path`` (relative to ``cwd``), refused outside ``cwd``."""
    if not path:
        raise ToolError("path is empty; give a path relative to the session's working directory.")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte.")
    root = Path(os.path.realpath(cwd))
    candidate = Path(path)
    if not candidate.is_absolute():
        # Join to the unresolved cwd: realpath below resolves both the same way.
        candidate = Path(cwd) / candidate
    resolved = Path(os.path.realpath(candidate))
    if not is_inside(resolved, root):
        raise ToolError(
            f"path {path!r} is outside the session's working directory {root}; file tools only reach files inside it."
        )
    return resolved


def is_inside(path: Path, root: Path) -> bool:
    """Whether the (already real) ``path`` is ``root`` or below it."""
    return path == root or path.is_relative_to(root)


def display_path(path: Path, cwd: Path) -> str:
    """``path`` as the model should name it: relative to the session cwd when inside."""
    root = Path(os.path.realpath(cwd))
    if path == root:
        return "."
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return str(path)
