"""``edit_file``: replace one exact, unique occurrence of a string in a text file.

Uniqueness is required so an edit never lands somewhere the model did not look: zero
or several matches are an error that says how many, and the model adds context. The
result carries a unified diff so the model (and the person watching) sees the change.
The file is read and replaced through one ``confined_parent`` descriptor (see ``replace``
for atomicity and the hard-link refusal); files over ``MAX_EDIT_BYTES`` are refused rather
than loaded whole. With a client that both reads and writes files (``ctx.files``), the text
is the client's (an editor's unsaved buffer) and the result goes back to it; with only one of
the two, both happen on disk, so an edit never mixes two versions of a file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import anyio
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.paths import check_protected, confined_parent, display_path, open_regular, resolve_in_cwd
from daemon.tools.replace import check_replaceable, replace_file
from daemon.tools.text import decode_text

__all__ = ["MAX_DIFF_CHARS", "MAX_EDIT_BYTES", "EditFile", "EditFileArgs"]

MAX_DIFF_CHARS = 64 * 1024
MAX_EDIT_BYTES = 32 * 1024 * 1024


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
        root = resolve_in_cwd(ctx.cwd, ".")
        check_protected(path, ctx, write=True)
        shown = display_path(path, ctx.cwd)
        if not args.old_string:
            raise ToolError("old_string is empty; to create or replace a whole file use write_file.")
        if args.old_string == args.new_string:
            raise ToolError("old_string and new_string are identical; there is nothing to change.")
        if path == root:
            raise ToolError(f"'{shown}' is a directory, not a file.")
        if ctx.files is not None and ctx.files.reads and ctx.files.writes:
            before = await ctx.files.read_text(path)
            if len(before) > MAX_EDIT_BYTES:
                raise ToolError(
                    f"'{shown}' is over {MAX_EDIT_BYTES // (1024 * 1024)} MiB; edit_file only edits files up to that."
                )
            at, old, new = _find_unique(before, shown, args.old_string, args.new_string)
            after = before[:at] + new + before[at + len(old) :]
            try:
                after.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ToolError(f"new_string is not valid Unicode: it has a lone surrogate ({exc.reason}).") from None
            await ctx.files.write_text(path, after)
            return ToolResult(f"edited '{shown}'\n{change_diff(before, at, old, new, shown)}")
        return await anyio.to_thread.run_sync(_edit, root, path, shown, args.old_string, args.new_string)


def _edit(root: Path, path: Path, shown: str, old: str, new: str) -> ToolResult:
    try:
        with confined_parent(root, path) as (dir_fd, name):
            fd, info = open_regular(name, dir_fd, shown)
            with open(fd, "rb") as file:
                check_replaceable(info, shown, "edit_file")
                if info.st_size > MAX_EDIT_BYTES:
                    raise ToolError(
                        f"'{shown}' is {info.st_size // (1024 * 1024)} MiB; edit_file only edits files up to "
                        f"{MAX_EDIT_BYTES // (1024 * 1024)} MiB."
                    )
                data = file.read(MAX_EDIT_BYTES + 1)
            before = decode_text(data)
            if before is None:
                raise ToolError(f"'{shown}' is binary or not UTF-8 text; edit_file only edits text.")
            at, old, new = _find_unique(before, shown, old, new)
            after = before[:at] + new + before[at + len(old) :]
            replace_file(dir_fd, name, after.encode("utf-8"), info.st_mode)
    except UnicodeEncodeError as exc:
        raise ToolError(f"new_string is not valid Unicode: it has a lone surrogate ({exc.reason}).") from None
    except FileNotFoundError:
        raise ToolError(f"file '{shown}' does not exist; use write_file to create it.") from None
    except NotADirectoryError:
        raise ToolError(f"file '{shown}' does not exist: a parent of it is a file, not a directory.") from None
    except OSError as exc:
        raise ToolError(f"cannot edit '{shown}': {exc.strerror or exc}; the file is unchanged.") from None
    return ToolResult(f"edited '{shown}'\n{change_diff(before, at, old, new, shown)}")


def _find_unique(before: str, shown: str, old: str, new: str) -> tuple[int, str, str]:
    """``(where old occurs in before, old, new)``, old and new given the file's line endings."""
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
    return before.index(old), old, new


def change_diff(before: str, at: int, old: str, new: str, shown: str) -> str:
    """The unified diff of replacing ``before[at:at + len(old)]`` with ``new``.

    Only the changed lines and their context are compared: the same diff as of the whole
    files, in time proportional to the change rather than the file, and without difflib's
    heuristics mistaking a one-line change in a repetitive file for a huge one.
    """
    start = _context_start(before, at)
    end = _context_end(before, at + len(old))
    region = before[start:end]
    changed = region[: at - start] + new + region[at - start + len(old) :]
    offset = before.count("\n", 0, start)  # lines above the region
    return re.sub(
        _HUNK,
        lambda m: f"@@ -{int(m[1]) + offset}{m[2] or ''} +{int(m[3]) + offset}{m[4] or ''} @@",
        unified_diff(region, changed, shown),
    )


_CONTEXT = 3  # difflib's default
# A pattern, compiled (and cached) by ``re`` with the first edit, not when the tools load.
_HUNK = r"(?m)^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@"


def _context_start(text: str, pos: int) -> int:
    """Where the line ``_CONTEXT`` lines above the one holding ``pos`` starts."""
    i = text.rfind("\n", 0, pos)
    for _ in range(_CONTEXT):
        if i < 0:
            break
        i = text.rfind("\n", 0, i)
    return i + 1


def _context_end(text: str, end: int) -> int:
    """Where the line ``_CONTEXT`` lines below the one holding ``text[end]`` ends.

    That line is changed too when ``old`` ended with a newline (``new``'s tail joins it);
    when it is not, difflib shows only ``_CONTEXT`` of the lines after all the same.
    """
    j = text.find("\n", end)
    for _ in range(_CONTEXT):
        if j < 0:
            break
        j = text.find("\n", j + 1)
    return len(text) if j < 0 else j + 1


def unified_diff(before: str, after: str, shown: str) -> str:
    import difflib  # the first diff loads it, not every session's tool list

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
