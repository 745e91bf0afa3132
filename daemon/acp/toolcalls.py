"""How a ponder tool call looks in ACP: its ``kind``, ``title``, ``locations`` and content.

Edits are shown as ``diff`` content: the edited file is read just before the tool runs
(``snapshot``) and again after it finished, so the diff is what really happened on disk
(CRLF handling and all), not a re-implementation of the edit. A permission request for an
edit carries the proposed diff (``preview``). Files that are large, binary or outside the
session's directory get plain text content instead. Where the file tools go through the
editor (ACP ``fs``), the file is read through it too (``Reader``): the diff is of its buffer.
"""

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from daemon.acp import types as t
from daemon.tools import Tool, ToolError, parse_arguments
from daemon.tools.paths import resolve_in_cwd
from daemon.tools.text import decode_text

log = logging.getLogger("ponder.acp")

KINDS = {
    "read_file": "read",
    "list_files": "search",
    "search": "search",
    "write_file": "edit",
    "edit_file": "edit",
    "run_command": "execute",
}
EDIT_TOOLS = frozenset({"write_file", "edit_file"})
MAX_DIFF_BYTES = 1024 * 1024
_IDS = uuid.UUID("5b0f3c52-8a1e-4d7e-9a53-5d1f0c0e6a11")  # namespace of ponder's ACP message ids


def block_message_id(message_id: str, index: int) -> str:
    """The ACP ``messageId`` of one block of a stored message: the same live and on replay."""
    return str(uuid.uuid5(_IDS, f"{message_id}/{index}"))


def user_message_id(message_id: str) -> str:
    return str(uuid.uuid5(_IDS, message_id))


def tool_kind(name: str) -> str:
    return KINDS.get(name, "other")


def tool_title(tools: dict[str, Tool[Any]], name: str, arguments: dict[str, Any]) -> str:
    """The tool's own one-line summary (``Edit a.txt``, ``Run: make``), else its name."""
    tool = tools.get(name)
    if tool is None:
        return name
    try:
        return tool.summary(parse_arguments(tool, arguments))
    except ToolError:
        return name


def target_path(name: str, arguments: dict[str, Any], cwd: str) -> Path | None:
    """The absolute path a file tool works on, when it is inside the session's directory."""
    if name not in KINDS or name == "run_command":
        return None
    path = arguments.get("path", "." if name in ("list_files", "search") else None)
    if not isinstance(path, str):
        return None
    try:
        return resolve_in_cwd(Path(cwd), path)
    except (ToolError, OSError, ValueError):
        return None


def locations(name: str, arguments: dict[str, Any], cwd: str) -> list[t.ToolCallLocation]:
    path = target_path(name, arguments, cwd)
    if path is None:
        return []
    offset = arguments.get("offset") if name == "read_file" else None
    line = offset if isinstance(offset, int) and not isinstance(offset, bool) and offset >= 1 else None
    return [t.ToolCallLocation(path=str(path), line=line)]


def text_content(text: str) -> list[t.ToolContent]:
    return [t.ContentToolContent(content=t.TextContent(text=text))]


def tool_call(
    tools: dict[str, Tool[Any]], call_id: str, name: str, arguments: dict[str, Any], cwd: str, status: str
) -> t.ToolCallStart:
    return t.ToolCallStart(
        tool_call_id=call_id,
        title=tool_title(tools, name, arguments),
        kind=tool_kind(name),
        status=status,
        raw_input=arguments,
        locations=locations(name, arguments, cwd),
    )


# --- diffs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """An edited file's text before the edit; ``text`` is None when it did not exist."""

    path: Path
    text: str | None


UNREADABLE = object()
# A file's text for a diff: the text, None when the file does not exist, ``UNREADABLE`` when it cannot be diffed.
Reader = Callable[[Path], Awaitable[Any]]


async def disk_text(path: Path) -> Any:
    """A ``Reader`` of the disk."""
    return await anyio.to_thread.run_sync(_read_text, path)


def _read_text(path: Path) -> Any:
    """The file's text, None when it does not exist, ``_UNREADABLE`` when it cannot be diffed."""
    try:
        if not path.exists():
            return None
        if not path.is_file() or path.stat().st_size > MAX_DIFF_BYTES:
            return UNREADABLE
        text = decode_text(path.read_bytes())
    except OSError:
        return UNREADABLE
    return UNREADABLE if text is None else text


async def snapshot(name: str, arguments: dict[str, Any], cwd: str, read: Reader = disk_text) -> Snapshot | None:
    """Read the file an edit tool is about to change (None for other tools or unreadable files)."""
    if name not in EDIT_TOOLS:
        return None
    path = target_path(name, arguments, cwd)
    if path is None:
        return None
    text = await read(path)
    return None if text is UNREADABLE else Snapshot(path, text)


async def diff_after(before: Snapshot, read: Reader = disk_text) -> t.DiffToolContent | None:
    """The diff from ``before`` to what the file holds now."""
    after = await read(before.path)
    if after is None or after is UNREADABLE:
        return None
    return t.DiffToolContent(path=str(before.path), old_text=before.text, new_text=after)


async def preview(
    name: str, arguments: dict[str, Any], cwd: str, read: Reader = disk_text
) -> list[t.ToolContent] | None:
    """The diff an edit would make, for a permission request (None when it cannot be shown)."""
    before = await snapshot(name, arguments, cwd, read)
    if before is None:
        return None
    if name == "write_file":
        new = arguments.get("content")
        if not isinstance(new, str):
            return None
    else:
        old_string, new_string = arguments.get("old_string"), arguments.get("new_string")
        if before.text is None or not isinstance(old_string, str) or not isinstance(new_string, str) or not old_string:
            return None
        text = before.text
        if text.count(old_string) == 0 and "\r\n" in text and "\r\n" not in old_string:
            old_string, new_string = old_string.replace("\n", "\r\n"), new_string.replace("\n", "\r\n")
        if text.count(old_string) != 1:
            return None  # the tool will refuse it and say why
        new = text.replace(old_string, new_string, 1)
    return [t.DiffToolContent(path=str(before.path), old_text=before.text, new_text=new)]
