"""``SessionPlans``: where ``update_plan`` keeps a session's plan (PROTOCOL.md "Plans").

The plan is stored with the session (``Session.plan``: it survives restarts, a fork copies
it), the live row takes it, and the turn emits a ``plan`` event, which the ACP bridge shows
as a ``plan`` update.
"""

from daemon import agent
from daemon.sessions.live import LiveSession
from daemon.store import AsyncStore
from daemon.util.clock import now
from protocol import events as ev
from protocol.objects import PlanEntry, SessionPlan


class SessionPlans:
    """The ``PlanKeeper`` of one turn of one session."""

    def __init__(self, store: AsyncStore, live: LiveSession, emit: agent.Emit) -> None:
        self.store = store
        self.live = live
        self.emit = emit

    async def set_plan(self, explanation: str | None, entries: list[PlanEntry]) -> None:
        plan = SessionPlan(explanation=explanation, entries=entries, updated_at=now())
        self.live.row = await self.store.set_session_plan(self.live.row.id, plan)
        await self.emit(ev.PlanUpdate, {"explanation": explanation, "entries": entries})
