"""``update_plan``: the model keeps a visible plan (a checklist) for long, multi-step work.

Each call sends the whole plan; the session keeps it (``Session.plan``, stored, copied by a
fork) and tells the client (a ``plan`` event; in ACP a ``plan`` update). It changes no file
and runs nothing, so no rule, hook or policy applies to it and it never asks (PROTOCOL.md
"Plans"). A plan with more than one step ``in_progress`` is a tool error and changes nothing;
an unknown status is refused by the arguments' validation the same way; ``plan: []`` clears it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.plan_keeper import PlanKeeper
from protocol.objects import PlanEntry, PlanStatus

__all__ = ["PLAN_GUIDANCE", "PlanKeeper", "UpdatePlan", "UpdatePlanArgs"]

# The line the system prompt carries when the model is offered update_plan: when a plan helps.
PLAN_GUIDANCE = (
    "For long work with several steps (changes across files, a fix that needs investigating, building and "
    "testing), keep a short plan with update_plan: send it once you know the steps, mark one step in_progress "
    "at a time, and update it as each step is done. Do not make a plan for a question, a one-line answer or a "
    "single small change."
)


class PlanStep(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    step: Annotated[str, msgspec.Meta(min_length=1, description="One step, a few words in the imperative.")]
    status: Annotated[PlanStatus, msgspec.Meta(description="pending, in_progress (at most one step) or completed.")]


class UpdatePlanArgs(ToolArgs):
    plan: Annotated[
        list[PlanStep],
        msgspec.Meta(description="The whole plan, in order, each time (an empty list clears it)."),
    ]
    explanation: (
        Annotated[str, msgspec.Meta(description="Optional: why the plan is what it is, or what changed.")] | None
    ) = None


class UpdatePlan(Tool[UpdatePlanArgs]):
    name = "update_plan"
    description = (
        "Show the user your plan for a long, multi-step task as a checklist, and keep it current: send the "
        "whole plan each time, with at most one step in_progress. Not for simple questions or one-step changes."
    )
    mutating = False
    permission_free = True
    Args = UpdatePlanArgs

    def summary(self, args: UpdatePlanArgs) -> str:
        return f"Update the plan ({len(args.plan)} steps)"

    async def run(self, args: UpdatePlanArgs, ctx: ToolContext) -> ToolResult:
        working = [entry.step for entry in args.plan if entry.status == "in_progress"]
        if len(working) > 1:
            raise ToolError(
                f"{len(working)} steps are in_progress ({', '.join(repr(s) for s in working)}); at most one may be. "
                "The plan is unchanged: send it again with one step in_progress."
            )
        if ctx.plan is None:
            raise ToolError("this session cannot keep a plan; go on without one.")
        entries = [PlanEntry(step=entry.step, status=entry.status) for entry in args.plan]
        await ctx.plan.set_plan(args.explanation, entries)
        if not entries:
            return ToolResult("Plan cleared.")
        counts = {status: sum(1 for e in entries if e.status == status) for status in ("completed", "in_progress")}
        pending = len(entries) - counts["completed"] - counts["in_progress"]
        return ToolResult(
            f"Plan updated: {counts['completed']} completed, {counts['in_progress']} in progress, {pending} pending."
        )
