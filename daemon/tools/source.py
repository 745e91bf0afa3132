"""Where a session's tools come from: the ``ToolSource`` seam.

The built-in tools are every session's; other sources (MCP servers, ``daemon.mcp``) add
theirs, asked afresh at every turn since a server may have started, failed or changed its
tools since the last one. A source knows sessions only by id, so it needs nothing of the
store.
"""

from __future__ import annotations

from typing import Any, Protocol

from daemon.tools.base import Tool

__all__ = ["SessionRef", "ToolSource"]


class SessionRef(Protocol):
    """The session a source is asked about (``daemon.store.SessionRow`` is one)."""

    @property
    def id(self) -> str: ...


class ToolSource(Protocol):
    """Tools beyond the built-in ones, by name, for one session's next turn."""

    async def tools_for(self, row: SessionRef) -> dict[str, Tool[Any]]:
        """The source's tools ready for ``row``'s session (starting what is due); never raises
        for a source that failed, which just has no tools this turn."""
        ...
