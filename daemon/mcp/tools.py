"""MCP tools as ponder ``Tool``s: names, schemas, approval, and results the model can read.

A server's tool ``search`` on server ``docs`` reaches the model as ``mcp__docs__search``
(characters providers reject become ``_``; over-long names are shortened with a hash
so they stay unique). Its input schema is the server's, made self-contained (``$ref``
inlined) like the built-in tools' schemas; the server validates the arguments, so any
JSON object is accepted here. A tool is mutating, and so asks for approval (and never
runs under ``read_only``), unless the server annotates it ``readOnlyHint: true`` and
config.toml marks the server ``trusted = true``: annotations are a third party's claim,
not a guarantee, so only a server the person vouched for is taken at its word.

Results: text content as is, images passed on (the session shows them to a model that takes
images, PROTOCOL.md "Prompt content") with a placeholder in the text, other content as a short
placeholder, structured content
as JSON text only when it adds to what the text says (servers are asked to send both, and
most wrap the text's content in an object of one key);
``isError`` makes a tool error. Progress notifications stream as tool output.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio

from daemon.mcp.client import McpClient, McpConnectionClosed, McpError, McpRemoteError, McpTimeout
from daemon.mcp.spec import ServerSpec
from daemon.tools.base import MCP_TOOL_PREFIX, Tool, ToolContext, ToolError, ToolResult, inline_schema

__all__ = ["McpTool", "ToolHost", "qualified_name", "render_result"]

log = logging.getLogger("ponder.mcp")

MAX_NAME = 64  # the tightest provider limit (OpenAI, Anthropic)
MAX_RESULT_CHARS = 200_000
# An image a tool returns is passed on up to this size of base64 (larger ones stay a placeholder).
MAX_TOOL_IMAGE_BASE64 = 16 * 1024 * 1024
PROGRESS_BUFFER = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def qualified_name(server: str, tool: str) -> str:
    name = f"{MCP_TOOL_PREFIX}{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


class ToolHost(Protocol):
    """What a tool needs of the server it belongs to (``daemon.mcp.manager.ServerHandle``):
    declared here so that the tools do not import the manager that makes them."""

    @property
    def spec(self) -> ServerSpec: ...

    @property
    def client(self) -> McpClient | None:
        """The running server's connection; None while it is not running."""
        ...

    @property
    def status(self) -> str:
        """``starting``, ``ready``, ``failed`` or ``stopped``."""
        ...

    def describe(self) -> str:
        """The status with its error, for messages."""
        ...

    def check_alive(self) -> None:
        """Ping the server after a call timed out; one that does not answer is failed."""
        ...


class McpTool(Tool[Any]):
    """One tool of one server, as the agent's tool loop sees it."""

    # Any JSON object: the server's own schema is the contract, and the server checks it.
    Args = dict  # type: ignore[assignment]

    def __init__(self, handle: ToolHost, tool: dict[str, Any]) -> None:
        self.handle = handle
        self.server = handle.spec.name
        self.tool_name: str = tool["name"]
        self.name = qualified_name(self.server, self.tool_name)  # type: ignore[misc]
        description = tool.get("description")
        self.description = (  # type: ignore[misc]
            description.strip()
            if isinstance(description, str) and description.strip()
            else f"The {self.tool_name} tool of the MCP server {self.server}."
        )
        annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
        claims_read_only = annotations.get("readOnlyHint") is True  # type: ignore[union-attr]
        self.mutating = not (claims_read_only and handle.spec.trusted)  # type: ignore[misc]
        self._schema = provider_schema(tool.get("inputSchema"))

    @property
    def input_schema(self) -> dict[str, Any]:
        return copy.deepcopy(self._schema)

    def summary(self, args: Any) -> str:
        shown = json.dumps(args, ensure_ascii=False)
        if len(shown) > 200:
            shown = shown[:199] + "…"
        return f"MCP {self.server}: {self.tool_name} {shown}"

    async def run(self, args: Any, ctx: ToolContext) -> ToolResult:
        client = self.handle.client
        if client is None or self.handle.status != "ready":
            raise ToolError(
                f"the MCP server {self.server!r} is not running ({self.handle.describe()}); "
                "its tools are unavailable until it is restarted on a later turn."
            )
        timeout = self.handle.spec.timeout_s
        outcome: dict[str, Any] | McpError | None = None
        send, receive = anyio.create_memory_object_stream[str](PROGRESS_BUFFER)

        def on_progress(params: dict[str, Any]) -> None:
            try:
                send.send_nowait(_progress_line(params))
            except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # a flood of progress, or progress after the result: not worth blocking the reader

        async with anyio.create_task_group() as tg:
            if ctx.emit_output is not None:
                tg.start_soon(_forward_progress, receive, ctx.emit_output)
            else:
                receive.close()
            try:
                outcome = await client.call_tool(
                    self.tool_name, args, timeout=timeout, on_progress=on_progress if ctx.emit_output else None
                )
            except McpError as exc:
                outcome = exc
            finally:
                send.close()  # the forwarder emits what is queued, then ends
        if isinstance(outcome, McpTimeout):
            self.handle.check_alive()
            raise ToolError(
                f"{self.tool_name} on MCP server {self.server!r} did not answer within {timeout:g} s and was "
                "cancelled; try again with a smaller request, or ask the user to raise its timeout_s."
            )
        if isinstance(outcome, McpConnectionClosed):
            tail = client.stderr.text()
            raise ToolError(
                f"the MCP server {self.server!r} stopped while running {self.tool_name}: {outcome}."
                + (f" Its last stderr output:\n{tail}" if tail else "")
            )
        if isinstance(outcome, McpRemoteError):
            raise ToolError(
                f"MCP server {self.server!r} rejected the call to {self.tool_name}: {outcome} (code {outcome.code})."
            )
        if isinstance(outcome, McpError):
            raise ToolError(f"MCP server {self.server!r} failed on {self.tool_name}: {outcome}")
        assert outcome is not None
        return render_result(outcome)


async def _forward_progress(receive: Any, emit: Callable[[str], Awaitable[None]]) -> None:
    async with receive:
        async for line in receive:
            try:
                await emit(line)
            except Exception:
                log.exception("emit_output failed; no more MCP progress will be streamed")
                return


def _progress_line(params: dict[str, Any]) -> str:
    message = params.get("message")
    if isinstance(message, str) and message:
        return message + "\n"
    progress, total = params.get("progress"), params.get("total")
    return (
        f"progress {progress:g}/{total:g}\n" if _is_number(total) and _is_number(progress) else f"progress {progress}\n"
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def render_result(result: dict[str, Any]) -> ToolResult:
    parts: list[str] = []
    texts: list[str] = []
    images: list[tuple[str, bytes]] = []
    for block in result.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
            parts.append(block["text"])
        elif kind == "image" and (image := _image(block)) is not None:
            images.append(image)  # shown to a model that takes images (the session checks it first)
            parts.append(f"[image {len(images)}: {image[0]}, {len(image[1])} bytes]")
        elif kind in ("image", "audio"):
            size = len(block.get("data") or "") * 3 // 4
            parts.append(f"[{kind}: {block.get('mimeType', 'unknown type')}, about {size} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.get('name') or ''} {block.get('uri', '')}]".replace("  ", " "))
        elif kind == "resource":
            resource = block.get("resource") if isinstance(block.get("resource"), dict) else {}
            if isinstance(resource.get("text"), str):  # type: ignore[union-attr]
                texts.append(resource["text"])  # type: ignore[index]
                parts.append(resource["text"])  # type: ignore[index]
            else:
                parts.append(f"[resource: {resource.get('uri', '')} ({resource.get('mimeType', 'binary')}), not shown]")  # type: ignore[union-attr]
        else:
            parts.append(f"[{kind} content, not shown]")
    structured = result.get("structuredContent")
    if structured is not None and not _carried_by(structured, texts, result.get("content")):
        parts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    text = "\n".join(parts) if parts else "(no output)"
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters omitted ...]"
    return ToolResult(text, is_error=result.get("isError") is True, images=tuple(images))


def _image(block: dict[str, Any]) -> tuple[str, bytes] | None:
    """An image block's (mime_type, bytes), or None when it is too large or not base64."""
    data = block.get("data")
    if not isinstance(data, str) or not data or len(data) > MAX_TOOL_IMAGE_BASE64:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    mime = block.get("mimeType")
    return (mime if isinstance(mime, str) else "application/octet-stream", raw)


def _carried_by(structured: Any, texts: list[str], content: Any) -> bool:
    """Whether the text content already says what the structured content does.

    The spec asks servers to send structured results as JSON text too, and servers wrap
    what their text says in an object of one key: the reference servers send
    ``{"content": text}`` or ``{"content": <the content blocks>}`` (filesystem),
    ``{"entities": <the JSON of the text>}`` (memory), the Python SDK ``{"result": value}``.
    A ``true`` flag next to a message that is the text (memory's ``{"success": true,
    "message": text}``) adds nothing either.
    """
    parsed_texts = [_parse(text) for text in texts]

    def said(value: Any) -> bool:
        if content and value == content:
            return True
        pairs = zip(texts, parsed_texts, strict=True)
        return any(value == text or (parsed is not _ABSENT and value == parsed) for text, parsed in pairs)

    if said(structured):
        return True
    if not isinstance(structured, dict) or not structured:
        return False
    if len(structured) == 1:
        return said(next(iter(structured.values())))
    values = [v for v in structured.values() if v is not True]
    return bool(values) and all(isinstance(v, str) and said(v) for v in values)


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _ABSENT


_ABSENT = object()


def provider_schema(raw: Any) -> dict[str, Any]:
    """The server's input schema in the self-contained form every provider accepts."""
    if not isinstance(raw, dict):
        return {"type": "object", "properties": {}}
    schema = {k: v for k, v in raw.items() if k != "$schema"}
    schema.setdefault("type", "object")
    try:
        return inline_schema(schema)
    except (RecursionError, KeyError, TypeError, AttributeError):
        # A recursive or broken $ref: send it as the server wrote it; most providers cope.
        return schema
