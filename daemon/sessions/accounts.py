"""Each session's account: every model call's usage and cost into its running totals (in the
store, so they survive a restart), its context fill, and whether its budget is spent.

``SessionAccounts.record_call`` is the one way a model call is counted, a turn's replies and a
compaction's summary alike; it answers with the fields of the ``usage`` event. The arithmetic
is ``daemon.context`` (pricing, window, budget); this module only applies it to a live session.
"""

import logging
from typing import Any

from daemon import agent
from daemon.catalog.catalog import Catalog
from daemon.context.budget import add_cost, add_usage, budget_exceeded
from daemon.context.pricing import cost_of
from daemon.context.window import context_fill
from daemon.errors import PonderError, StoreError
from daemon.models.spec import ModelSpec
from daemon.sessions.live import LiveSession
from daemon.store import AsyncStore, SessionRow
from protocol import events as ev
from protocol.methods import BudgetParams
from protocol.objects import Budget, ContextFill, Cost, Usage

log = logging.getLogger("ponder.sessions")


def budget_from(params: BudgetParams | None) -> Budget | None:
    """A client's budget as the session keeps it: None (no budget) when it sets no limit."""
    if params is None or (params.max_cost is None and params.max_tokens is None):
        return None
    return Budget(max_cost=params.max_cost, max_tokens=params.max_tokens)


class SessionAccounts:
    """Counts model calls into sessions' totals and answers whether a session may make another."""

    def __init__(self, store: AsyncStore, catalog: Catalog) -> None:
        self.store = store
        self.catalog = catalog
        # Per session: calls counted in memory that the store refused, added to its next write.
        self._unstored: dict[str, tuple[Usage, Cost | None]] = {}

    async def record_call(
        self, live: LiveSession, spec: ModelSpec, usage: Usage | None, *, context: ContextFill | None = None
    ) -> dict[str, Any]:
        """Count one model call of ``spec`` in ``live``'s totals (store and memory); return the
        fields of its ``usage`` event (``emit(ev.UsageEvent, fields)``).

        ``cost`` is None where the model has no known price. ``context`` is the session's context
        fill after the call; by default the call's input plus output tokens in the model's window.
        Pass one where that is not the session's context (a summary call: the compacted history)
        or where the call reported no usage (an estimate); with neither, the last fill stays.
        A store that refuses the write still leaves the call counted in memory (a budget holds
        while the store is down), and the store gets it with the next call it takes.
        """
        cost = cost_of(usage, self.catalog.price(spec))
        window = self.catalog.context_window(spec)[0]
        fill = context if context is not None else context_fill(usage, window)
        row = live.row
        unstored_usage, unstored_cost = self._unstored.pop(row.id, (Usage(), None))
        to_store = (add_usage(unstored_usage, usage), add_cost(unstored_cost, cost))
        try:
            stored = await self.store.record_usage(row.id, *to_store, fill)
        except StoreError as exc:
            log.warning("session %s: its totals could not be stored yet: %s", row.id, exc.message)
            self._unstored[row.id] = to_store
            row.totals, row.cost = add_usage(row.totals, usage), add_cost(row.cost, cost)
            row.context = fill or row.context
        else:
            # ``live.row`` may have been replaced meanwhile (a rename): take the stored totals, the truth.
            row = live.row
            row.totals, row.cost, row.context = stored.totals, stored.cost, stored.context
        return {
            "context": row.context or ContextFill(used=0, size=window),
            "usage": usage or Usage(),
            "totals": row.totals,
            "cost": cost,
            "totals_cost": row.cost,
        }

    async def budget_spent(self, live: LiveSession, reread: bool = True) -> str | None:
        """None while the session's budget allows another model call, else the sentence saying which is
        spent. The budget is read from the store first (``reread_budget``)."""
        if reread:
            await self.reread_budget(live)
        return self.spent(live.row)

    async def reread_budget(self, live: LiveSession) -> None:
        """Take the session's budget from the store: another daemon on the same home may have raised,
        lowered or cleared it (the store is the truth; the totals in memory are never older than the
        store's, so only the budget is taken). A store that cannot be read leaves the budget in memory."""
        try:
            stored = await self.store.get_session(live.row.id)
        except PonderError as exc:
            log.info("session %s: its budget could not be re-read: %s", live.row.id, exc.message)
            return
        if stored is not None:
            live.row.budget, live.row.budget_own = stored.budget, stored.budget_own

    def spent(self, row: SessionRow) -> str | None:
        """``budget_spent`` on the row as it is in memory: its own budget, else config.toml's ``[budget]``."""
        budget = row.budget_in_force(self.catalog.config.budget)
        if budget is None:  # nothing to spend: the model's price is not looked up before every call
            return None
        try:
            spec = self.catalog.get(row.model_id)
        except PonderError:
            return budget_exceeded(row.totals, row.cost, budget)
        priced = self.catalog.price(spec) is not None
        return budget_exceeded(row.totals, row.cost, budget, priced=priced, model_id=spec.id)


class TurnAccount:
    """One turn's view of its session's spending (``agent.Account``): each reply counted and told
    as a ``usage`` event, and the budget asked before each model call."""

    def __init__(self, accounts: SessionAccounts, live: LiveSession, spec: ModelSpec, emit: agent.Emit) -> None:
        self._accounts = accounts
        self._live = live
        self._spec = spec
        self._emit = emit

    async def record(self, usage: Usage, estimated: bool) -> None:
        """``estimated``: the provider reported no usage and ponder's estimate was counted."""
        fields = await self._accounts.record_call(self._live, self._spec, usage)
        await self._emit(ev.UsageEvent, {**fields, "estimated": estimated})

    async def spent(self, reread: bool) -> str | None:
        return await self._accounts.budget_spent(self._live, reread)
