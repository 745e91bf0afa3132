"""A session's account in the store: its running totals and their cost, the context fill after
its last model call, and its budget (columns of ``sessions``, migrations ``m004`` and ``m009``).

``record_usage`` adds one call to the totals inside the write transaction, reading what is
stored, so that the totals stay right when two daemons share a home and survive a restart.
Neither write touches ``updated_at``: spending is not an edit of the session.
"""

from __future__ import annotations

from daemon.errors import SessionNotFound
from daemon.store.backend import Body, SqlConnection, StoreBackend
from daemon.store.db import json_encode
from daemon.store.sessions import _SESSION_COLUMNS, SessionRow, _decode_usage, _session_from_row
from protocol.objects import Budget, ContextFill, Cost, Usage


class AccountQueries(StoreBackend):
    def record_usage(
        self, session_id: str, usage: Usage | None, cost: Cost | None, context: ContextFill | None
    ) -> SessionRow:
        """Add one model call (its usage and cost) to the session's totals and keep its context
        fill (None keeps the last one); return the row as stored."""
        return self._write(self._record_usage_body(session_id, usage, cost, context))

    def _record_usage_body(
        self, session_id: str, usage: Usage | None, cost: Cost | None, context: ContextFill | None
    ) -> Body[SessionRow]:
        from daemon.context.budget import add_cost, add_usage  # with the first model call: off the start path

        def body(db: SqlConnection) -> SessionRow:
            found = db.execute(
                "SELECT totals_json, cost_amount, cost_currency FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if found is None:
                raise SessionNotFound(session_id)
            self._check_fence(db, session_id)  # a write of the turn
            totals = add_usage(_decode_usage(found[0]), usage)
            stored_cost = None if found[1] is None else Cost(amount=found[1], currency=found[2] or "USD")
            totals_cost = add_cost(stored_cost, cost)
            values: list[object] = [
                json_encode(totals).decode(),
                None if totals_cost is None else totals_cost.amount,
                None if totals_cost is None else totals_cost.currency,
            ]
            context_sql = ""
            if context is not None:
                context_sql = ", context_used = ?, context_size = ?"
                values += [context.used, context.size]
            row = db.execute(
                f"UPDATE sessions SET totals_json = ?, cost_amount = ?, cost_currency = ?{context_sql} "
                f"WHERE id = ? RETURNING {_SESSION_COLUMNS}",
                (*values, session_id),
            ).fetchone()
            return _session_from_row(row)

        return body

    def set_budget(self, session_id: str, budget: Budget | None) -> SessionRow:
        """Replace the session's budget with one of its own (None, or a budget without limits: none,
        whatever config.toml's ``[budget]`` says); return the row."""

        def body(db: SqlConnection) -> SessionRow:
            row = db.execute(
                f"UPDATE sessions SET budget_max_cost = ?, budget_max_tokens = ?, budget_own = 1 WHERE id = ? "
                f"RETURNING {_SESSION_COLUMNS}",
                (budget.max_cost if budget else None, budget.max_tokens if budget else None, session_id),
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            return _session_from_row(row)

        return self._write(body)
