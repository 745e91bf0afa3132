"""``PlanKeeper``: where ``update_plan`` keeps a session's plan (``ToolContext.plan``); its own
module so that ``tools.base`` can name it without importing the tool (no import cycle)."""

from __future__ import annotations

from typing import Protocol

from protocol.objects import PlanEntry

__all__ = ["PlanKeeper"]


class PlanKeeper(Protocol):
    """Where a session keeps its plan and tells its client."""

    async def set_plan(self, explanation: str | None, entries: list[PlanEntry]) -> None: ...
