"""``copy_sessions``: every session of one store copied into another (``ponder store copy --to
URL``: a home's SQLite sessions into a PostgreSQL store), idempotent.

Per session, one read transaction on the source and one write transaction on the target: the
session row (its account and budget included) when the target lacks it, then the messages the
target lacks (by id, with their body; a message whose seq the target already uses for another
is left out and counted as a conflict), their parts, appended text and attachments, the compaction records it
lacks, and the model/thinking changes when the session is new there; a session changed in the
source since (a later ``updated_at``) gets the source's row. Run again, it copies only
what is missing. ``message_count`` is the target's own (its triggers count what is inserted).
"""

from __future__ import annotations

from typing import Any

import msgspec

from daemon.store.backend import SqlConnection
from daemon.store.store import StoreQueries

_SESSION = (
    "id, title, cwd, model_id, thinking_level, approval_policy, system_prompt, parent_id, created_at, updated_at, "
    "thinking_display, thinking_fallback, thinking_budget, totals_json, cost_amount, cost_currency, context_used, "
    "context_size, budget_max_cost, budget_max_tokens, sandbox_mode, sandbox_network, budget_own, plan_json"
)
_MESSAGE = (
    "id, session_id, seq, role, model_id, thinking_requested, thinking_effective, stop_reason, usage_json, status, "
    "created_at, origin, turn_id, client_message_id, admission_json, body"
)
_PART = (
    "message_id, position, type, text, redacted, call_id, name, arguments_json, is_error, provider, model, "
    "signature, provider_data_json, attachment_id, media_json"
)
_ATTACHMENT = "id, mime_type, bytes, width, height, data, created_at"
_COMPACTION = (
    "id, session_id, seq, trigger, summary, first_kept_seq, tokens_before, tokens_after, model_id, usage_json, "
    "created_at"
)


def _marks(columns: str) -> str:
    return ", ".join("?" * len(columns.split(",")))


class CopyReport(msgspec.Struct, kw_only=True):
    """What one run copied (zeros on a second run: nothing was missing)."""

    sessions: int = 0
    messages: int = 0
    compactions: int = 0
    attachments: int = 0
    conflicts: int = 0  # messages left out: the target holds another message at their seq
    seen: int = 0  # sessions in the source


class _Session(msgspec.Struct):
    row: tuple[Any, ...]
    messages: list[tuple[Any, ...]]
    parts: list[tuple[Any, ...]]
    appends: list[tuple[Any, ...]]
    attachments: list[tuple[Any, ...]]
    compactions: list[tuple[Any, ...]]
    changes: list[tuple[Any, ...]]


def _read_session(db: SqlConnection, session_id: str) -> _Session | None:
    found = db.execute(f"SELECT {_SESSION} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if found is None:
        return None  # deleted meanwhile

    def all_rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in db.execute(sql, (session_id,)).fetchall()]

    in_session = "message_id IN (SELECT id FROM messages WHERE session_id = ?)"
    return _Session(
        row=tuple(found),
        messages=all_rows(f"SELECT {_MESSAGE} FROM messages WHERE session_id = ? ORDER BY seq"),
        parts=all_rows(f"SELECT {_PART} FROM parts WHERE {in_session} ORDER BY message_id, position"),
        appends=all_rows(f"SELECT message_id, position, text FROM part_appends WHERE {in_session} ORDER BY id"),
        attachments=all_rows(
            f"SELECT {_ATTACHMENT} FROM attachments WHERE id IN (SELECT attachment_id FROM parts WHERE {in_session})"
        ),
        compactions=all_rows(f"SELECT {_COMPACTION} FROM compactions WHERE session_id = ? ORDER BY seq, rowid"),
        changes=all_rows("SELECT session_id, kind, value, at FROM session_changes WHERE session_id = ? ORDER BY id"),
    )


def _write_session(db: SqlConnection, source: _Session, report: CopyReport) -> None:
    session_id = source.row[0]
    held_row = db.execute("SELECT updated_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
    new_session = held_row is None
    if held_row is not None and str(source.row[9]) > str(held_row[0]):
        # Changed in the home since the last copy: the newer row (title, account, budget) wins.
        columns = _SESSION.split(", ")[1:]
        db.execute(
            f"UPDATE sessions SET {', '.join(f'{name} = ?' for name in columns)} WHERE id = ?",
            (*source.row[1:], session_id),
        )
    if new_session:
        db.execute(f"INSERT INTO sessions ({_SESSION}) VALUES ({_marks(_SESSION)})", source.row)
        report.sessions += 1
        db.executemany("INSERT INTO session_changes (session_id, kind, value, at) VALUES (?, ?, ?, ?)", source.changes)
    held = {
        (str(row[0]), int(row[1]))
        for row in db.execute("SELECT id, seq FROM messages WHERE session_id = ?", (session_id,)).fetchall()
    }
    held_ids = {message_id for message_id, _ in held}
    held_seqs = {seq for _, seq in held}
    copied: set[str] = set()
    for message in source.messages:
        if message[0] in held_ids:
            continue
        if int(message[2]) in held_seqs or db.execute("SELECT 1 FROM messages WHERE id = ?", (message[0],)).fetchone():
            report.conflicts += 1
            continue
        db.execute(f"INSERT INTO messages ({_MESSAGE}) VALUES ({_marks(_MESSAGE)})", message)
        copied.add(str(message[0]))
    report.messages += len(copied)
    for attachment in source.attachments:
        if db.execute("SELECT 1 FROM attachments WHERE id = ?", (attachment[0],)).fetchone() is None:
            db.execute(f"INSERT INTO attachments ({_ATTACHMENT}) VALUES ({_marks(_ATTACHMENT)})", attachment)
            report.attachments += 1
    db.executemany(f"INSERT INTO parts ({_PART}) VALUES ({_marks(_PART)})", [p for p in source.parts if p[0] in copied])
    db.executemany(
        "INSERT INTO part_appends (message_id, position, text) VALUES (?, ?, ?)",
        [a for a in source.appends if a[0] in copied],
    )
    held_compactions = {
        str(row[0]) for row in db.execute("SELECT id FROM compactions WHERE session_id = ?", (session_id,)).fetchall()
    }
    for compaction in source.compactions:
        if compaction[0] not in held_compactions:
            db.execute(f"INSERT INTO compactions ({_COMPACTION}) VALUES ({_marks(_COMPACTION)})", compaction)
            report.compactions += 1


def copy_sessions(source: StoreQueries, target: StoreQueries) -> CopyReport:
    """Copy what ``target`` lacks of ``source``'s sessions; one transaction per session."""
    report = CopyReport()
    ids = [
        str(row[0])
        for row in source._read(lambda db: db.execute("SELECT id FROM sessions ORDER BY created_at, id").fetchall())
    ]
    for session_id in ids:
        one = source._read(lambda db, sid=session_id: _read_session(db, sid))  # type: ignore[misc]
        if one is not None:
            target._write(lambda db, one=one: _write_session(db, one, report))  # type: ignore[misc]
            report.seen += 1
    return report
