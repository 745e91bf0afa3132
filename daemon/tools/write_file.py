"""``write_file``: create or overwrite a text file, creating its parent directories.

The path is confined to the session cwd before anything is created, so parent
directories are only ever made inside it. Content is written exactly as given (no
newline translation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.paths import display_path, resolve_in_cwd

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
        shown = display_path(path, ctx.cwd)
        return await anyio.to_thread.run_sync(_write, path, shown, args.content)


def _write(path: Path, shown: str, content: str) -> ToolResult:
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory; give a file path.")
    existed = path.exists()
    if existed and not path.is_file():
        raise ToolError(f"'{shown}' is not a regular file.")  # a FIFO would block forever
    data = content.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except FileExistsError:
        raise ToolError(f"cannot create '{shown}': a parent of it is a file, not a directory.") from None
    except NotADirectoryError:
        raise ToolError(f"cannot create '{shown}': a parent of it is a file, not a directory.") from None
    except OSError as exc:
        raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}.") from None
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    verb = "overwrote" if existed else "created"
    return ToolResult(f"{verb} '{shown}' ({len(data)} bytes, {lines} lines)")
