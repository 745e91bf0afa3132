"""Compaction records: saving one (a single row, so a crash leaves the whole record or none)
and reading a session's, in ``seq`` order. Messages are never touched here: a compaction only
says which of them a request replaces by its summary. Forks copy them (``sessions``); deleting a
session removes them (ON DELETE CASCADE).
"""

from __future__ import annotations

import msgspec

from daemon.store.backend import Body, SqlConnection, StoreBackend
from daemon.store.db import json_encode
from protocol.objects import Compaction, Usage

_COLUMNS = "id, seq, trigger, summary, first_kept_seq, tokens_before, tokens_after, model_id, usage_json, created_at"
_decode_usage = msgspec.json.Decoder(Usage).decode


class StoredCompaction(msgspec.Struct, kw_only=True):
    """A compaction as the store holds it: the wire record and the summarizer call's usage."""

    compaction: Compaction
    usage: Usage | None = None


def _from_row(row: tuple[object, ...]) -> StoredCompaction:
    (cid, seq, trigger, summary, first_kept, before, after, model_id, usage_json, created_at) = row
    compaction = Compaction(
        compaction_id=str(cid),
        seq=int(seq),  # type: ignore[call-overload]
        trigger=trigger,  # type: ignore[arg-type]
        summary=str(summary),
        first_kept_seq=int(first_kept),  # type: ignore[call-overload]
        tokens_before=int(before),  # type: ignore[call-overload]
        tokens_after=int(after),  # type: ignore[call-overload]
        model_id=model_id if model_id is None else str(model_id),
        created_at=str(created_at),
    )
    usage = _decode_usage(str(usage_json)) if usage_json else None
    return StoredCompaction(compaction=compaction, usage=usage)


class CompactionQueries(StoreBackend):
    def _save_compaction_body(self, session_id: str, compaction: Compaction, usage: Usage | None) -> Body[Compaction]:
        def body(db: SqlConnection) -> Compaction:
            self._require_session(db, session_id)
            self._check_fence(db, session_id)
            created_at = compaction.created_at or self._now()
            db.execute(
                f"INSERT INTO compactions (session_id, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    compaction.compaction_id,
                    compaction.seq,
                    compaction.trigger,
                    compaction.summary,
                    compaction.first_kept_seq,
                    compaction.tokens_before,
                    compaction.tokens_after,
                    compaction.model_id,
                    json_encode(usage).decode() if usage is not None else None,
                    created_at,
                ),
            )
            return msgspec.structs.replace(compaction, created_at=created_at)

        return body

    def save_compaction(self, session_id: str, compaction: Compaction, usage: Usage | None = None) -> Compaction:
        """Store one compaction record (one transaction); the record as stored (``created_at`` set)."""
        return self._write(self._save_compaction_body(session_id, compaction, usage))

    def get_compactions(self, session_id: str) -> list[StoredCompaction]:
        """The session's compaction records in ``seq`` order (those at one seq in the order they happened)."""
        rows = self._read(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM compactions WHERE session_id = ? ORDER BY seq, rowid", (session_id,)
            ).fetchall()
        )
        return [_from_row(row) for row in rows]
