"""``search``: a regular expression over the text files of the tree, like ``grep -rn``.

Binaries, ignored files and very large files are skipped; matches are capped at
``MAX_MATCHES`` and long lines shortened, so the result stays readable for the model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import anyio
import anyio.from_thread
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.list_files import glob_matcher
from daemon.tools.paths import display_path, resolve_in_cwd
from daemon.tools.text import decode_text
from daemon.tools.walk import walk_files

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_CHARS", "MAX_MATCHES", "Search", "SearchArgs"]

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

    def summary(self, args: SearchArgs) -> str:
        return f"Search for /{args.pattern}/ in {args.path}"

    async def run(self, args: SearchArgs, ctx: ToolContext) -> ToolResult:
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}.") from None
        start = resolve_in_cwd(ctx.cwd, args.path)
        if not start.exists():
            raise ToolError(f"'{display_path(start, ctx.cwd)}' does not exist.")
        root = resolve_in_cwd(ctx.cwd, ".")
        return await anyio.to_thread.run_sync(_search, root, start, regex, args.glob)


def _search(root: Path, start: Path, regex: re.Pattern[str], glob: str | None) -> ToolResult:
    matches = glob_matcher(glob)
    base = "" if start == root or start.is_file() else start.relative_to(root).as_posix() + "/"
    hits: list[str] = []
    skipped_large = 0
    more = False
    for path, rel in walk_files(root, start, check_cancelled=anyio.from_thread.check_cancelled):
        anyio.from_thread.check_cancelled()
        if not matches(rel.removeprefix(base)):
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                skipped_large += 1
                continue
            text = decode_text(path.read_bytes())
        except OSError:
            continue
        if text is None:
            continue  # binary or not UTF-8
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
    notes = []
    if more:
        notes.append(f"[stopped after {MAX_MATCHES} matches; narrow the pattern, glob or path]")
    if skipped_large:
        notes.append(f"[skipped {skipped_large} file(s) larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB]")
    if not hits:
        return ToolResult("\n".join([f"no matches for /{regex.pattern}/", *notes]))
    return ToolResult("\n".join(hits + notes))
