"""Sessions: their rows (``SessionRow``), creating, listing (newest first, a page at a time
behind an opaque cursor), updating, deleting and forking them (the fork gets a copy of the
history), and the record of model and thinking changes (``SessionChange``).
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from daemon.errors import InvalidCursor, InvalidLimit, MessageNotInSession, SessionNotFound, StoreError
from daemon.store.backend import SqlConnection, StoreBackend
from daemon.store.db import json_encode
from daemon.store.messages import PART_COLUMNS
from daemon.util.clock import new_id
from protocol.objects import ApprovalPolicy, Budget, ContextFill, Cost, Session, SessionPlan, Usage

_SESSION_COLUMNS = (
    "id, title, cwd, model_id, thinking_level, approval_policy, system_prompt, "
    "parent_id, created_at, updated_at, message_count, thinking_display, thinking_fallback, thinking_budget, "
    "totals_json, cost_amount, cost_currency, context_used, context_size, budget_max_cost, budget_max_tokens, "
    "sandbox_mode, sandbox_network, budget_own, plan_json"
)
_UPDATABLE_SESSION_FIELDS = frozenset(
    {
        "title",
        "model_id",
        "thinking_level",
        "approval_policy",
        "system_prompt",
        "updated_at",
        "thinking_display",
        "thinking_fallback",
        "thinking_budget",
    }
)
_decode_cursor = msgspec.json.Decoder(tuple[str, str]).decode
_decode_usage = msgspec.json.Decoder(Usage).decode
_decode_plan = msgspec.json.Decoder(SessionPlan).decode


class SessionRow(msgspec.Struct, kw_only=True):
    id: str
    cwd: str
    model_id: str
    thinking_level: str
    approval_policy: ApprovalPolicy = "ask"
    title: str | None = None
    system_prompt: str | None = None
    parent_id: str | None = None
    created_at: str = ""  # filled with the store's clock when empty
    updated_at: str = ""
    message_count: int = 0  # maintained by the store; ignored on create
    # Thinking controls (PROTOCOL.md "Thinking controls"); None follows config.toml's [defaults]
    # (display, fallback) or the level's own budget.
    thinking_display: str | None = None
    thinking_fallback: str | None = None
    thinking_budget: int | None = None
    # Long sessions: running totals and their cost (kept by ``record_usage``), the context
    # fill after the last model call, and the budget. ``budget_own``: the session set its own
    # (``budget``, None for none: on create, then by ``set_budget``); otherwise ``budget`` is None
    # and the session follows config.toml's ``[budget]`` (``budget_in_force``).
    totals: Usage = msgspec.field(default_factory=Usage)
    cost: Cost | None = None
    context: ContextFill | None = None
    budget: Budget | None = None
    budget_own: bool = True
    # The session's own sandbox settings (session/start {sandbox}); None follows config.toml.
    sandbox_mode: str | None = None
    sandbox_network: bool | None = None
    plan: SessionPlan | None = None  # the latest update_plan (set by ``set_session_plan``; a fork copies it)

    def budget_in_force(self, default: Budget | None) -> Budget | None:
        """The budget that holds: the session's own, else ``default`` (config.toml's ``[budget]``)."""
        return self.budget if self.budget_own else default

    def to_wire(self, status: str = "idle", default_budget: Budget | None = None) -> Session:
        """The wire's Session; ``default_budget`` is config.toml's ``[budget]``, shown for a session
        that has no budget of its own."""
        return Session(
            session_id=self.id,
            title=self.title,
            cwd=self.cwd,
            model_id=self.model_id,
            thinking_level=self.thinking_level,  # type: ignore[arg-type]
            approval_policy=self.approval_policy,
            created_at=self.created_at,
            updated_at=self.updated_at,
            message_count=self.message_count,
            parent_id=self.parent_id,
            status=status,  # type: ignore[arg-type]
            totals=self.totals,
            cost=self.cost,
            context=self.context,
            budget=self.budget_in_force(default_budget),
            plan=self.plan,
        )


class SessionChange(msgspec.Struct, kw_only=True):
    kind: str  # "model" or "thinking"
    value: str | None
    at: str


def _encode_cursor(updated_at: str, session_id: str) -> str:
    return base64.urlsafe_b64encode(json_encode((updated_at, session_id))).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return _decode_cursor(raw)
    except (ValueError, msgspec.DecodeError):
        raise InvalidCursor() from None


def _session_from_row(row: tuple[Any, ...]) -> SessionRow:
    return SessionRow(
        id=row[0],
        title=row[1],
        cwd=row[2],
        model_id=row[3],
        thinking_level=row[4],
        approval_policy=row[5],
        system_prompt=row[6],
        parent_id=row[7],
        created_at=row[8],
        updated_at=row[9],
        message_count=row[10],
        thinking_display=row[11],
        thinking_fallback=row[12],
        thinking_budget=row[13],
        totals=_decode_usage(row[14]),
        cost=None if row[15] is None else Cost(amount=row[15], currency=row[16] or "USD"),
        context=None if row[17] is None else ContextFill(used=row[17], size=row[18]),
        budget=None if row[19] is None and row[20] is None else Budget(max_cost=row[19], max_tokens=row[20]),
        sandbox_mode=row[21],
        sandbox_network=None if row[22] is None else bool(row[22]),
        budget_own=bool(row[23]),
        plan=None if row[24] is None else _decode_plan(row[24]),
    )


class SessionQueries(StoreBackend):
    @staticmethod
    def _fetch_session(db: SqlConnection, session_id: str) -> SessionRow | None:
        row = db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else _session_from_row(row)

    def _insert_session(self, db: SqlConnection, row: SessionRow) -> SessionRow:
        now = self._now()
        created_at = row.created_at or now
        try:
            inserted = db.execute(
                f"""
                INSERT INTO sessions (id, title, cwd, model_id, thinking_level, approval_policy,
                                      system_prompt, parent_id, created_at, updated_at,
                                      thinking_display, thinking_fallback, thinking_budget,
                                      budget_max_cost, budget_max_tokens, sandbox_mode, sandbox_network,
                                      budget_own, plan_json)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                RETURNING {_SESSION_COLUMNS}
                """,
                (
                    row.id,
                    row.title,
                    row.cwd,
                    row.model_id,
                    row.thinking_level,
                    row.approval_policy,
                    row.system_prompt,
                    row.parent_id,
                    created_at,
                    row.updated_at or created_at,
                    row.thinking_display,
                    row.thinking_fallback,
                    row.thinking_budget,
                    row.budget.max_cost if row.budget and row.budget_own else None,
                    row.budget.max_tokens if row.budget and row.budget_own else None,
                    row.sandbox_mode,
                    None if row.sandbox_network is None else int(row.sandbox_network),
                    int(row.budget_own),
                    None if row.plan is None else json_encode(row.plan).decode(),
                ),
            ).fetchone()
        except Exception as error:
            if not self._is_unique_violation(error):
                raise
            raise StoreError(f"Session id {row.id!r} is already taken.") from error
        return _session_from_row(inserted)

    # --- sessions -----------------------------------------------------------------------

    def create_session(self, row: SessionRow) -> SessionRow:
        """Insert ``row`` (timestamps default to now); return it as stored."""
        return self._write(lambda db: self._insert_session(db, row))

    def get_session(self, session_id: str) -> SessionRow | None:
        return self._read(lambda db: self._fetch_session(db, session_id))

    def list_sessions(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[SessionRow], str | None]:
        """Newest ``updated_at`` first; ``next_cursor`` is None on the last page.

        The cursor is the (updated_at, id) of the last row returned, so pages stay
        stable while sessions are added; a session updated meanwhile may move to the
        front (and then is not repeated on later pages).
        """
        if limit < 1:
            raise InvalidLimit("limit must be at least 1.")
        where: list[str] = []
        params: list[Any] = []
        if cwd is not None:
            where.append("cwd = ?")
            params.append(cwd)
        if cursor is not None:
            where.append("(updated_at, id) < (?, ?)")
            params.extend(_parse_cursor(cursor))
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, id DESC LIMIT ?"
        params.append(limit + 1)

        rows = self._read(lambda db: db.execute(sql, params).fetchall())
        sessions = [_session_from_row(row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = sessions[-1]
            next_cursor = _encode_cursor(last.updated_at, last.id)
        return sessions, next_cursor

    def update_session(self, session_id: str, **fields: Any) -> SessionRow:
        """Change some of title, model_id, the thinking controls, approval_policy, system_prompt.

        ``updated_at`` is set to now unless given.
        """
        unknown = set(fields) - _UPDATABLE_SESSION_FIELDS
        if unknown:
            raise TypeError(f"update_session() cannot change {sorted(unknown)}")
        fields.setdefault("updated_at", self._now())
        assignments = ", ".join(f"{name} = ?" for name in fields)  # names come from the allow-list

        def body(db: SqlConnection) -> SessionRow:
            row = db.execute(
                f"UPDATE sessions SET {assignments} WHERE id = ? RETURNING {_SESSION_COLUMNS}",
                (*fields.values(), session_id),
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            return _session_from_row(row)

        return self._write(body)

    def set_session_plan(self, session_id: str, plan: SessionPlan) -> SessionRow:
        """Keep ``plan`` as the session's latest (``updated_at`` becomes the plan's); a write of the
        turn, fenced by its lease."""

        def body(db: SqlConnection) -> SessionRow:
            self._check_fence(db, session_id)
            row = db.execute(
                f"UPDATE sessions SET plan_json = ?, updated_at = ? WHERE id = ? RETURNING {_SESSION_COLUMNS}",
                (json_encode(plan).decode(), plan.updated_at, session_id),
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            return _session_from_row(row)

        return self._write(body)

    def delete_session(self, session_id: str) -> bool:
        """Delete the session with its messages, parts, changes and lease, and the attachments
        no other session names (a fork shares them); False if absent."""

        def body(db: SqlConnection) -> bool:
            named = [
                row[0]
                for row in db.execute(
                    "SELECT DISTINCT p.attachment_id FROM parts AS p JOIN messages AS m ON m.id = p.message_id "
                    "WHERE m.session_id = ? AND p.attachment_id IS NOT NULL",
                    (session_id,),
                )
            ]
            deleted = db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0
            db.executemany(
                "DELETE FROM attachments WHERE id = ? AND NOT EXISTS (SELECT 1 FROM parts WHERE attachment_id = ?)",
                [(attachment_id, attachment_id) for attachment_id in named],
            )
            return deleted

        return self._write(body)

    def fork_session(self, source_id: str, new_row: SessionRow, up_to_message_id: str | None = None) -> SessionRow:
        """Create ``new_row`` (its parent_id set to ``source_id``) with a copy of the history.

        Messages up to and including ``up_to_message_id`` (default: all) are copied with
        their parts and body (which names neither id nor session), keeping their seq, under
        fresh message ids; so are the compaction records among them (``seq`` up to that message's).
        """

        def body(db: SqlConnection) -> SessionRow:
            self._require_session(db, source_id)
            seq_filter, params = "", [source_id]
            if up_to_message_id is not None:
                found = db.execute(
                    "SELECT seq FROM messages WHERE id = ? AND session_id = ?", (up_to_message_id, source_id)
                ).fetchone()
                if found is None:
                    raise MessageNotInSession(up_to_message_id, source_id)
                seq_filter = " AND seq <= ?"
                params.append(found[0])
            self._insert_session(db, msgspec.structs.replace(new_row, parent_id=source_id))

            old_ids = [r[0] for r in db.execute(f"SELECT id FROM messages WHERE session_id = ?{seq_filter}", params)]
            mapping = [(new_id("msg"), old_id) for old_id in old_ids]
            db.executemany(
                """
                INSERT INTO messages (id, session_id, seq, role, model_id, thinking_requested,
                                      thinking_effective, stop_reason, usage_json, status, created_at,
                                      origin, turn_id, body)
                SELECT ?, ?, seq, role, model_id, thinking_requested,
                       thinking_effective, stop_reason, usage_json, status, created_at,
                       origin, turn_id, body
                FROM messages WHERE id = ?
                """,
                [(new_id, new_row.id, old_id) for new_id, old_id in mapping],
            )
            db.executemany(
                f"""
                INSERT INTO parts ({PART_COLUMNS})
                SELECT ?, position, type, text, redacted, call_id, name, arguments_json,
                       is_error, provider, model, signature, provider_data_json, attachment_id, media_json
                FROM parts WHERE message_id = ?
                """,
                mapping,
            )
            db.executemany(
                "INSERT INTO part_appends (message_id, position, text) "
                "SELECT ?, position, text FROM part_appends WHERE message_id = ? ORDER BY id",
                mapping,
            )
            # Compaction records within the copied range go along (fresh ids, same seqs).
            rowids = db.execute(
                f"SELECT rowid FROM compactions WHERE session_id = ?{seq_filter} ORDER BY rowid", params
            ).fetchall()
            for (rowid,) in rowids:
                db.execute(
                    "INSERT INTO compactions (id, session_id, seq, trigger, summary, first_kept_seq, tokens_before, "
                    "tokens_after, model_id, usage_json, created_at) "
                    "SELECT ?, ?, seq, trigger, summary, first_kept_seq, tokens_before, tokens_after, model_id, "
                    "usage_json, created_at FROM compactions WHERE rowid = ?",
                    (new_id("cmp"), new_row.id, rowid),
                )
            forked = self._fetch_session(db, new_row.id)
            assert forked is not None
            return forked

        return self._write(body)

    # --- changes ------------------------------------------------------------------------

    def record_change(self, session_id: str, kind: str, value: str | None) -> None:
        """Remember a model or thinking change (``kind`` "model" / "thinking") with its time."""

        def body(db: SqlConnection) -> None:
            self._require_session(db, session_id)
            db.execute(
                "INSERT INTO session_changes (session_id, kind, value, at) VALUES (?, ?, ?, ?)",
                (session_id, kind, value, self._now()),
            )

        self._write(body)

    def get_changes(self, session_id: str) -> list[SessionChange]:
        rows = self._read(
            lambda db: db.execute(
                "SELECT kind, value, at FROM session_changes WHERE session_id = ? ORDER BY id", (session_id,)
            ).fetchall()
        )
        return [SessionChange(kind=kind, value=value, at=at) for kind, value, at in rows]
