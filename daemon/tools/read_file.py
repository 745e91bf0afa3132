"""``read_file``: a text file's lines, numbered, optionally a range of them.

Output is capped at ``MAX_OUTPUT_BYTES`` so one huge file cannot flood the context;
a note then says where to continue with ``offset``. Lines are read without loading the
whole file, so a range deep into a big log costs a scan, not the memory; the scan checks
for cancellation as it goes, and lines are only counted in files up to ``COUNT_LINES_BYTES``
(a sparse terabyte must not keep a thread, and so shutdown, busy for minutes). The file is
opened through ``confined_parent``, so the file read is the one checked to be inside.
With a client that reads files (``ctx.files``), the checked path's text comes from the client
(an editor's unsaved buffer) and is numbered and capped the same way.
"""

from __future__ import annotations

import codecs
import io
from pathlib import Path
from typing import Annotated, BinaryIO

import anyio
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.paths import check_protected, confined_parent, display_path, open_regular, resolve_in_cwd
from daemon.tools.text import SNIFF_BYTES, looks_binary

__all__ = ["COUNT_LINES_BYTES", "MAX_OUTPUT_BYTES", "ReadFile", "ReadFileArgs"]

MAX_OUTPUT_BYTES = 256 * 1024
COUNT_LINES_BYTES = 256 * 1024 * 1024
_CHUNK = 64 * 1024


class ReadFileArgs(ToolArgs):
    path: Annotated[str, msgspec.Meta(description="File path, relative to the working directory.")]
    offset: Annotated[int, msgspec.Meta(ge=1, description="First line to read (1-based); default 1.")] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, description="How many lines to read; default to the end.")] | None = None


class ReadFile(Tool[ReadFileArgs]):
    name = "read_file"
    description = "Read a text file in the working directory as numbered lines; offset/limit select a range."
    mutating = False
    Args = ReadFileArgs

    def summary(self, args: ReadFileArgs) -> str:
        return f"Read {args.path}"

    async def run(self, args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
        path = resolve_in_cwd(ctx.cwd, args.path)
        root = resolve_in_cwd(ctx.cwd, ".")
        check_protected(path, ctx, write=False)
        shown = display_path(path, ctx.cwd)
        if path == root:
            raise ToolError(f"'{shown}' is a directory; use list_files to see its contents.")
        if ctx.files is not None and ctx.files.reads:
            text = await ctx.files.read_text(path)
            return _numbered_text(text, shown, args.offset or 1, args.limit)
        return await anyio.to_thread.run_sync(_read, root, path, shown, args.offset or 1, args.limit)


def _numbered_text(text: str, shown: str, first: int, limit: int | None) -> ToolResult:
    """The client's text of a file, numbered as a file on disk is."""
    data = text.encode("utf-8", errors="surrogatepass")
    return _numbered_lines(io.BytesIO(data), shown, first, limit, countable=len(data) <= COUNT_LINES_BYTES)


def _read(root: Path, path: Path, shown: str, first: int, limit: int | None) -> ToolResult:
    try:
        with confined_parent(root, path) as (dir_fd, name):
            fd, info = open_regular(name, dir_fd, shown)
        with open(fd, "rb") as file:
            if looks_binary(file.read(SNIFF_BYTES)):
                raise ToolError(f"'{shown}' is a binary file; read_file only reads text.")
            file.seek(0)
            return _numbered_lines(file, shown, first, limit, countable=info.st_size <= COUNT_LINES_BYTES)
    except FileNotFoundError:
        raise ToolError(f"file '{shown}' does not exist; use list_files to see what is there.") from None
    except NotADirectoryError:
        raise ToolError(f"'{shown}' does not exist: a parent of it is a file, not a directory.") from None
    except OSError as exc:
        raise ToolError(f"cannot read '{shown}': {exc.strerror or exc}.") from None


def _numbered_lines(file: BinaryIO, shown: str, first: int, limit: int | None, *, countable: bool) -> ToolResult:
    _skip_lines(file, first - 1)
    if not file.read(1):
        total = _count_lines(file)  # a file read to its end: counting it costs no more
        if total == 0:
            return ToolResult(f"(file '{shown}' is empty)")
        raise ToolError(f"offset {first} is past the end of '{shown}', which has {total} lines.")
    file.seek(-1, 1)

    out: list[str] = []
    budget = MAX_OUTPUT_BYTES
    last = first - 1  # the last line shown
    cut_line = False
    while limit is None or last < first - 1 + limit:
        raw = file.readline(budget + 1)
        if not raw:
            break
        if len(raw) > budget and not out:
            # One line larger than the whole budget: show its start, cut at a character.
            out.append(f"{last + 1:6}\t{_decode(raw[:budget], shown, last + 1, final=False)}")
            last += 1
            cut_line = True
            break
        entry = f"{last + 1:6}\t{_decode(raw, shown, last + 1).rstrip(chr(13) + chr(10))}"
        size = len(entry.encode()) + 1
        if size > budget:
            break
        budget -= size
        out.append(entry)
        last += 1

    more = bool(file.read(1)) or cut_line
    text = "\n".join(out)
    if more:
        line_count = _count_lines(file) if countable else None
        of = f" of {line_count}" if line_count is not None else ""
        if cut_line:
            text += f"\n[line {last} is longer than {MAX_OUTPUT_BYTES // 1024} KiB and was cut"
        elif limit is not None and last == first - 1 + limit:
            text += f"\n[showing lines {first}-{last}{of}"
        else:
            text += f"\n[output truncated at {MAX_OUTPUT_BYTES // 1024} KiB: showing lines {first}-{last}{of}"
        text += f"; continue with offset={last + 1}]" if line_count is None or last < line_count else "]"
    return ToolResult(text)


def _decode(raw: bytes, shown: str, lineno: int, *, final: bool = True) -> str:
    try:
        # Not final: a line cut mid-character drops the incomplete bytes at the end.
        return codecs.getincrementaldecoder("utf-8")().decode(raw, final=final)
    except UnicodeDecodeError:
        raise ToolError(f"'{shown}' is not UTF-8 text (line {lineno} is not); it is probably binary.") from None


def _skip_lines(file: BinaryIO, count: int) -> None:
    """Position ``file`` after its first ``count`` newlines (or at its end)."""
    # Here, not at the top: the tools load with a session's first turn, and a turn that reads no
    # file needs none of anyio.from_thread (~3.5 M instructions to import, here on the worker thread).
    import anyio.from_thread

    while count > 0:
        anyio.from_thread.check_cancelled()
        chunk = file.read(_CHUNK)
        if not chunk:
            return
        found = chunk.count(b"\n")
        if found < count:
            count -= found
            continue
        index = -1
        for _ in range(count):
            index = chunk.index(b"\n", index + 1)
        file.seek(index + 1 - len(chunk), 1)
        return


def _count_lines(file: BinaryIO) -> int:
    """Lines in the whole file; a last line without a newline counts."""
    import anyio.from_thread  # as in _skip_lines

    file.seek(0)
    total, last = 0, b""
    while chunk := file.read(_CHUNK):
        anyio.from_thread.check_cancelled()
        total += chunk.count(b"\n")
        last = chunk[-1:]
    return total + (1 if last and last != b"\n" else 0)
