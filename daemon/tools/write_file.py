"""``write_file``: create or overwrite a text file, creating its parent directories.

The path is confined to the session cwd before anything is created, and directories are
made and the file replaced through ``confined_parent`` (no symlink followed), so they are
only ever made inside it. The write is atomic and refuses hard-linked files (``replace``).
Content is written exactly as given (no newline translation). With a client that writes
files (``ctx.files``), the checked path's new text is handed to the client (it lands in the
editor's buffer) instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import anyio
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.paths import check_protected, confined_parent, display_path, resolve_in_cwd
from daemon.tools.replace import check_replaceable, replace_file

__all__ = ["WriteFile", "WriteFileArgs"]


class WriteFileArgs(ToolArgs):
    path: Annotated[str, msgspec.Meta(description="File path, relative to the working directory.")]
    content: Annotated[str, msgspec.Meta(description="The complete new content of the file.")]


class WriteFile(Tool[WriteFileArgs]):
    name = "write_file"
    description = "Create or overwrite a text file in the working directory with the given content."
    mutating = True
    Args = WriteFileArgs

    def summary(self, args: WriteFileArgs) -> str:
        return f"Write {args.path} ({len(args.content.encode())} bytes)"

    async def run(self, args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
        path = resolve_in_cwd(ctx.cwd, args.path)
        root = resolve_in_cwd(ctx.cwd, ".")
        check_protected(path, ctx, write=True)
        shown = display_path(path, ctx.cwd)
        if path == root:
            raise ToolError(f"'{shown}' is a directory; give a file path.")
        if ctx.files is not None and ctx.files.writes:
            _encoded(args.content)
            existed = await anyio.to_thread.run_sync(path.exists)
            await ctx.files.write_text(path, args.content)
            return _written(shown, args.content, existed)
        return await anyio.to_thread.run_sync(_write, root, path, shown, args.content)


def _encoded(content: str) -> bytes:
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"content is not valid Unicode: it has a lone surrogate at position {exc.start}; send plain UTF-8 text."
        ) from None


def _written(shown: str, content: str, existed: bool) -> ToolResult:
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    verb = "overwrote" if existed else "created"
    return ToolResult(f"{verb} '{shown}' ({len(content.encode())} bytes, {lines} lines)")


def _write(root: Path, path: Path, shown: str, content: str) -> ToolResult:
    data = _encoded(content)
    try:
        with confined_parent(root, path, create=True) as (dir_fd, name):
            try:
                existing: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None:
                check_replaceable(existing, shown, "write_file")
            replace_file(dir_fd, name, data, existing.st_mode if existing is not None else None)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot create '{shown}': a parent of it is a file, not a directory.") from None
    except IsADirectoryError:
        raise ToolError(f"'{shown}' is a directory; give a file path.") from None
    except OSError as exc:
        raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}.") from None
    return _written(shown, content, existing is not None)
