"""``search``: a regular expression over the text files of the tree, like ``grep -rn``.

Binaries, ignored files and very large files are skipped; matches are capped at
``MAX_MATCHES`` and long lines shortened, so the result stays readable for the model.
The pattern is compiled and matched in a child process under a time limit (see
``child``), so a catastrophically backtracking regex ends in a tool error, not a frozen
daemon. Python ``re`` syntax is kept as it is, lookarounds and backreferences included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.child import SCAN_TIME_LIMIT_S, run_in_child
from daemon.tools.list_files import glob_matcher, walk_notes
from daemon.tools.paths import check_protected, display_path, escape_name, resolve_in_cwd
from daemon.tools.text import decode_text
from daemon.tools.walk import WalkStats, open_walked, walk_files

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_CHARS", "MAX_MATCHES", "Search", "SearchArgs", "scan"]

MAX_MATCHES = 200
MAX_LINE_CHARS = 300
MAX_FILE_BYTES = 8 * 1024 * 1024  # bigger files are data or logs, not code to grep


class SearchArgs(ToolArgs):
    pattern: Annotated[str, msgspec.Meta(description="Regular expression (Python syntax) to search for.")]
    glob: (
        Annotated[str, msgspec.Meta(description="Only search files matching this glob, e.g. '*.py' or 'src/**/*.ts'.")]
        | None
    ) = None
    path: Annotated[
        str, msgspec.Meta(description="File or directory to search, relative to the working directory.")
    ] = "."
    ignore_case: Annotated[bool, msgspec.Meta(description="Match case-insensitively.")] = False


class Search(Tool[SearchArgs]):
    name = "search"
    description = (
        "Search text files for a regular expression; returns file:line:text matches (skips .gitignore'd files)."
    )
    mutating = False
    Args = SearchArgs

    def __init__(self, time_limit_s: float = SCAN_TIME_LIMIT_S) -> None:
        self.time_limit_s = time_limit_s

    def summary(self, args: SearchArgs) -> str:
        return f"Search for /{args.pattern}/ in {args.path}"

    async def run(self, args: SearchArgs, ctx: ToolContext) -> ToolResult:
        start = resolve_in_cwd(ctx.cwd, args.path)
        if not start.exists():
            raise ToolError(f"'{display_path(start, ctx.cwd)}' does not exist.")
        root = resolve_in_cwd(ctx.cwd, ".")
        check_protected(start, ctx, write=False)
        arguments = {
            "pattern": args.pattern,
            "ignore_case": args.ignore_case,
            "glob": args.glob,
            "hidden": ctx.hidden_strs(),
        }
        return await run_in_child(
            self.name,
            {"root": str(root), "start": str(start), "args": arguments},
            self.time_limit_s,
            f"search for /{args.pattern}/ was stopped after its time limit of {self.time_limit_s:g} s. A regex with "
            "nested or overlapping quantifiers, such as (a+)+ or (.*)*x, can take exponential time on some lines; "
            "simplify the pattern, or narrow the search with path or glob.",
        )


def scan(
    root: Path, start: Path, pattern: str, ignore_case: bool, glob: str | None, hidden: tuple[str, ...] = ()
) -> ToolResult:
    """The search itself; runs in the child process."""
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}.") from None
    matches = glob_matcher(glob)
    base = "" if start == root or not start.is_dir() else start.relative_to(root).as_posix() + "/"
    hits: list[str] = []
    skipped_large = escaped = 0
    more = False
    stats = WalkStats()
    try:
        for walked in walk_files(root, start, stats, tuple(Path(h) for h in hidden)):
            if not matches(walked.rel.removeprefix(base)):
                continue
            opened = open_walked(root, walked)
            if opened is None:
                continue
            fd, info = opened
            with open(fd, "rb") as file:
                if info.st_size > MAX_FILE_BYTES:
                    skipped_large += 1
                    continue
                try:
                    text = decode_text(file.read(MAX_FILE_BYTES + 1))
                except OSError:
                    continue
            if text is None:
                continue  # binary or not UTF-8
            rel = escape_name(walked.rel)
            escaped += rel != walked.rel
            # Split on '\n' only, so line numbers agree with read_file and editors.
            for lineno, line in enumerate(text.removesuffix("\n").split("\n"), 1):
                if regex.search(line) is None:
                    continue
                line = line.removesuffix("\r")
                if len(hits) == MAX_MATCHES:
                    more = True
                    break
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + " [...]"
                hits.append(f"{rel}:{lineno}:{line}")
            if more:
                break
    except OSError as exc:
        raise ToolError(f"cannot search '{display_path(start, root)}': {exc.strerror or exc}.") from None
    notes = []
    if more:
        notes.append(f"[stopped after {MAX_MATCHES} matches; narrow the pattern, glob or path]")
    if skipped_large:
        notes.append(f"[skipped {skipped_large} file(s) larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB]")
    notes += walk_notes(escaped, stats)
    if not hits:
        return ToolResult("\n".join([f"no matches for /{pattern}/", *notes]))
    return ToolResult("\n".join(hits + notes))
