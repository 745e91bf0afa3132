"""A session's plan as ACP's ``plan`` update (PROTOCOL.md "Plans").

ponder's plan entries are ``{step, status}``; ACP's are ``{content, priority, status}`` with a
priority ponder does not have, so every entry is ``medium``. The plan's explanation, which
ACP has no field for, rides in ``_meta.ponder.explanation``. ``update_plan`` calls are shown
as the plan they set, not as tool-call cards (a plan is not an action on the workspace).
"""

from daemon.acp import types as t
from protocol.objects import PlanEntry

PLAN_TOOL = "update_plan"


def plan_update(explanation: str | None, entries: list[PlanEntry]) -> t.PlanUpdate:
    meta = {"ponder": {"explanation": explanation}} if explanation else None
    return t.PlanUpdate(
        entries=[t.PlanEntry(content=entry.step, priority="medium", status=entry.status) for entry in entries],
        meta=meta,
    )
