"""An MCP server (official ``mcp`` SDK, stdio) whose results have the shapes the published
reference servers send: text content plus ``structuredContent`` repeating it.

The shapes, as ``@modelcontextprotocol/server-filesystem`` and ``server-memory`` return them
(modelcontextprotocol/servers, src/filesystem/index.ts and src/memory/index.ts):

- ``read_text_file``: the file as text, and ``{"content": <the same text>}``;
- ``list_directory_with_sizes``: one text block, and ``{"content": [<that block>]}``;
- ``create_entities``: the created entities as indented JSON text, and ``{"entities": [...]}``;
- ``read_graph``: the graph as indented JSON text, and the graph itself;
- ``delete_entities``: a message, and ``{"success": true, "message": <the message>}``.

``stat`` is the control: its structured content says more than its text.
Files are read from ``MCP_FILES_DIR``.
"""

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

ROOT = Path(os.environ.get("MCP_FILES_DIR", "."))
READ_ONLY = ToolAnnotations(read_only_hint=True)
server = MCPServer("files", version="1.0")
graph: dict[str, list[Any]] = {"entities": [], "relations": []}


def result(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


@server.tool(description="Read a text file.", annotations=READ_ONLY)
def read_text_file(path: str) -> CallToolResult:
    text = (ROOT / path).read_text(encoding="utf-8")
    return result(text, {"content": text})


@server.tool(description="List a directory with sizes.", annotations=READ_ONLY)
def list_directory_with_sizes(path: str) -> CallToolResult:
    entries = sorted((ROOT / path).iterdir())
    lines = [f"[FILE] {e.name:<30} {e.stat().st_size:>8} B" for e in entries if e.is_file()]
    text = "\n".join([*lines, "", f"Total: {len(lines)} files"])
    return result(text, {"content": [{"type": "text", "text": text}]})


@server.tool(description="Create entities in the knowledge graph.")
def create_entities(entities: list[dict[str, Any]]) -> CallToolResult:
    graph["entities"].extend(entities)
    return result(json.dumps(entities, indent=2), {"entities": entities})


@server.tool(description="Read the whole knowledge graph.", annotations=READ_ONLY)
def read_graph() -> CallToolResult:
    return result(json.dumps(graph, indent=2), dict(graph))


@server.tool(description="Delete entities from the knowledge graph.")
def delete_entities(entityNames: list[str]) -> CallToolResult:
    graph["entities"] = [e for e in graph["entities"] if e.get("name") not in entityNames]
    message = "Entities deleted successfully"
    return result(message, {"success": True, "message": message})


@server.tool(description="A file's size.", annotations=READ_ONLY)
def stat(path: str) -> CallToolResult:
    size = (ROOT / path).stat().st_size
    return result(f"{path} exists", {"path": path, "size": size})


if __name__ == "__main__":
    server.run("stdio")
