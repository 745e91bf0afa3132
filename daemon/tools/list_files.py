"""``list_files``: the files under a directory, recursively, as a developer sees them.

``.git`` and whatever ``.gitignore`` files exclude are left out (see ``walk``), and the
listing is capped at ``MAX_FILES`` with a note, so a huge tree cannot flood the context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import anyio.from_thread
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.ignore import compile_glob
from daemon.tools.paths import display_path, resolve_in_cwd
from daemon.tools.walk import walk_files

__all__ = ["MAX_FILES", "ListFiles", "ListFilesArgs", "glob_matcher"]

MAX_FILES = 1000


class ListFilesArgs(ToolArgs):
    pattern: (
        Annotated[
            str,
            msgspec.Meta(
                description="Glob to filter by, e.g. '*.py' (a name at any depth) or 'src/**/*.ts' "
                "(relative to path). Default: all files."
            ),
        ]
        | None
    ) = None
    path: Annotated[str, msgspec.Meta(description="Directory to list, relative to the working directory.")] = "."


class ListFiles(Tool[ListFilesArgs]):
    name = "list_files"
    description = "List files under a directory recursively (skipping .git and .gitignore'd files), optionally by glob."
    mutating = False
    Args = ListFilesArgs

    def summary(self, args: ListFilesArgs) -> str:
        return f"List {args.path}" + (f" ({args.pattern})" if args.pattern else "")

    async def run(self, args: ListFilesArgs, ctx: ToolContext) -> ToolResult:
        start = resolve_in_cwd(ctx.cwd, args.path)
        if not start.exists():
            raise ToolError(f"'{display_path(start, ctx.cwd)}' does not exist.")
        root = resolve_in_cwd(ctx.cwd, ".")
        matches = glob_matcher(args.pattern)
        return await anyio.to_thread.run_sync(_list, root, start, matches, args.pattern)


def glob_matcher(pattern: str | None):
    """A predicate over paths relative to the walked directory, for a user's glob.

    A glob without ``/`` matches a file name at any depth (``*.py``), as in ripgrep's
    ``-g``; one with ``/`` matches the whole relative path (``src/**/*.py``).
    """
    if not pattern:
        return lambda rel: True
    regex = compile_glob(pattern.removeprefix("./").lstrip("/"))
    if "/" in pattern.rstrip("/"):  # '/*.py' and './*.py' mean the top level only
        return lambda rel: regex.fullmatch(rel) is not None
    return lambda rel: regex.fullmatch(rel.rsplit("/", 1)[-1]) is not None


def _list(root: Path, start: Path, matches, pattern: str | None) -> ToolResult:
    base = "" if start == root else start.relative_to(root).as_posix() + "/"
    found: list[str] = []
    more = False
    for _, rel in walk_files(root, start, check_cancelled=anyio.from_thread.check_cancelled):
        if not matches(rel.removeprefix(base)):
            continue
        if len(found) == MAX_FILES:
            more = True
            break
        found.append(rel)
    where = display_path(start, root)
    if not found:
        what = f"matching '{pattern}' " if pattern else ""
        return ToolResult(f"(no files {what}under '{where}', ignoring .git and .gitignore'd files)")
    text = "\n".join(found)
    if more:
        text += f"\n[listing stopped at {MAX_FILES} files; narrow it with path or pattern]"
    return ToolResult(text)
