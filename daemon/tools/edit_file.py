"""``edit_file``: replace one exact, unique occurrence of a string in a text file.

Uniqueness is required so an edit never lands somewhere the model did not look: zero
or several matches are an error that says how many, and the model adds context. The
result carries a unified diff so the model (and the person watching) sees the change.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated

import anyio
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.paths import display_path, resolve_in_cwd
from daemon.tools.text import decode_text

__all__ = ["MAX_DIFF_CHARS", "EditFile", "EditFileArgs"]

MAX_DIFF_CHARS = 64 * 1024


class EditFileArgs(ToolArgs):
    path: Annotated[str, msgspec.Meta(description="File path, relative to the working directory.")]
    old_string: Annotated[
        str, msgspec.Meta(description="Exact text to replace; must occur exactly once in the file (include context).")
    ]
    new_string: Annotated[str, msgspec.Meta(description="The text to put in its place.")]


class EditFile(Tool[EditFileArgs]):
    name = "edit_file"
    description = "Edit a text file by replacing an exact string that occurs exactly once; returns a unified diff."
    mutating = True
    Args = EditFileArgs

    def summary(self, args: EditFileArgs) -> str:
        return f"Edit {args.path}"

    async def run(self, args: EditFileArgs, ctx: ToolContext) -> ToolResult:
        path = resolve_in_cwd(ctx.cwd, args.path)
        shown = display_path(path, ctx.cwd)
        if not args.old_string:
            raise ToolError("old_string is empty; to create or replace a whole file use write_file.")
        if args.old_string == args.new_string:
            raise ToolError("old_string and new_string are identical; there is nothing to change.")
        return await anyio.to_thread.run_sync(_edit, path, shown, args.old_string, args.new_string)


def _edit(path: Path, shown: str, old: str, new: str) -> ToolResult:
    if not path.exists():
        raise ToolError(f"file '{shown}' does not exist; use write_file to create it.")
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory, not a file.")
    if not path.is_file():
        raise ToolError(f"'{shown}' is not a regular file.")  # a FIFO would block forever
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read '{shown}': {exc.strerror or exc}.") from None
    before = decode_text(data)
    if before is None:
        raise ToolError(f"'{shown}' is binary or not UTF-8 text; edit_file only edits text.")

    count = before.count(old)
    if count == 0 and "\r\n" in before and "\r\n" not in old:
        # Models write '\n'; a CRLF file would otherwise never match. Keep its endings.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = before.count(old)
    if count == 0:
        raise ToolError(
            f"old_string was not found in '{shown}' (0 matches); it must match exactly, "
            "including whitespace and indentation. Read the file again and copy the text."
        )
    if count > 1:
        raise ToolError(
            f"old_string occurs {count} times in '{shown}'; it must occur exactly once. "
            "Include more surrounding lines to make it unique."
        )
    after = before.replace(old, new, 1)
    try:
        path.write_bytes(after.encode("utf-8"))
    except OSError as exc:
        raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}.") from None
    return ToolResult(f"edited '{shown}'\n{unified_diff(before, after, shown)}")


def unified_diff(before: str, after: str, shown: str) -> str:
    lines = difflib.unified_diff(_lines(before), _lines(after), f"a/{shown}", f"b/{shown}")
    # A last line without a newline would run into the next diff line; mark it as git does.
    diff = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[diff truncated at {MAX_DIFF_CHARS // 1024} KiB]\n"
    return diff


def _lines(text: str) -> list[str]:
    # Split on '\n' only: str.splitlines would also split on form feeds and the like.
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
