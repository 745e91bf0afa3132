"""``list_files``: the files under a directory, recursively, as a developer sees them.

``.git`` and whatever ``.gitignore`` files exclude are left out (see ``walk``), and the
listing is capped at ``MAX_FILES`` with a note, so a huge tree cannot flood the context.
Names that are not UTF-8 or hold control characters are listed escaped, with a note. The
walk runs in a child process under a time limit (see ``child``): globs are regexes too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.child import SCAN_TIME_LIMIT_S, run_in_child
from daemon.tools.ignore import compile_glob
from daemon.tools.paths import check_protected, display_path, escape_name, resolve_in_cwd
from daemon.tools.walk import WalkStats, walk_files

__all__ = ["MAX_FILES", "ListFiles", "ListFilesArgs", "glob_matcher", "scan", "walk_notes"]

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

    def __init__(self, time_limit_s: float = SCAN_TIME_LIMIT_S) -> None:
        self.time_limit_s = time_limit_s

    def summary(self, args: ListFilesArgs) -> str:
        return f"List {args.path}" + (f" ({args.pattern})" if args.pattern else "")

    async def run(self, args: ListFilesArgs, ctx: ToolContext) -> ToolResult:
        start = resolve_in_cwd(ctx.cwd, args.path)
        if not start.exists():
            raise ToolError(f"'{display_path(start, ctx.cwd)}' does not exist.")
        root = resolve_in_cwd(ctx.cwd, ".")
        check_protected(start, ctx, write=False)
        return await run_in_child(
            self.name,
            {"root": str(root), "start": str(start), "args": {"pattern": args.pattern, "hidden": ctx.hidden_strs()}},
            self.time_limit_s,
            f"list_files was stopped after its time limit of {self.time_limit_s:g} s; the tree may be huge or the "
            "pattern (or a .gitignore rule) too complex. Narrow it with path or a simpler pattern.",
        )


def glob_matcher(pattern: str | None) -> Callable[[str], bool]:
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


def scan(root: Path, start: Path, pattern: str | None, hidden: tuple[str, ...] = ()) -> ToolResult:
    """The listing itself; runs in the child process."""
    matches = glob_matcher(pattern)
    base = "" if start == root else start.relative_to(root).as_posix() + "/"
    found: list[str] = []
    escaped = 0
    more = False
    stats = WalkStats()
    try:
        for walked in walk_files(root, start, stats, tuple(Path(h) for h in hidden)):
            rel = walked.rel
            if not matches(rel.removeprefix(base)):
                continue
            if len(found) == MAX_FILES:
                more = True
                break
            shown = escape_name(rel)
            escaped += shown != rel
            found.append(shown)
    except OSError as exc:
        raise ToolError(f"cannot list '{display_path(start, root)}': {exc.strerror or exc}.") from None
    where = display_path(start, root)
    notes = []
    if more:
        notes.append(f"[listing stopped at {MAX_FILES} files; narrow it with path or pattern]")
    notes += walk_notes(escaped, stats)
    if not found:
        what = f"matching '{pattern}' " if pattern else ""
        return ToolResult(
            "\n".join([f"(no files {what}under '{where}', ignoring .git and .gitignore'd files)", *notes])
        )
    return ToolResult("\n".join(found + notes))


def walk_notes(escaped: int, stats: WalkStats) -> list[str]:
    """The notes a walk's result ends with: names shown escaped, directories skipped."""
    notes = []
    if escaped:
        notes.append(
            f"[{escaped} name(s) are not valid UTF-8 or contain control characters and are shown escaped (\\xNN, "
            "\\n); file tools cannot open them by these names: rename them with run_command, e.g. mv with a glob]"
        )
    if stats.unreadable_dirs:
        notes.append(f"[skipped {stats.unreadable_dirs} director(ies) that could not be read]")
    return notes
