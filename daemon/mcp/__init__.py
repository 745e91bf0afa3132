"""MCP (Model Context Protocol) servers as tool sources for ponder sessions.

- ``spec``: what a server is (``ServerSpec``), from ``[mcp_servers.NAME]`` or ACP.
- ``client``: the stdio client (process, JSON-RPC framing, requests, progress, stop).
- ``tools``: a server's tool as a ponder ``Tool`` (``mcp__{server}__{tool}``).
- ``manager``: ``McpManager``, the ``ToolSource`` that starts, shares, restarts and
  stops servers, and answers ``mcp/list``.
"""

from daemon.mcp.manager import McpManager, ServerHandle
from daemon.mcp.spec import ServerSpec

__all__ = ["McpManager", "ServerHandle", "ServerSpec"]
