"""Messages and their parts: saving a message whole (a checkpoint, then its final save),
reading a session's history a page at a time, and incremental checkpoints of a reply still
streaming (``part_appends``: text appended without rewriting what is stored, folded in when
read and by the next whole save). Owns the mapping between rows and ``ChatMessage`` / ``Part``,
and the message's ``body``: the same message as one value, which the history read fetches.

The body is the message as its columns and its ``parts`` rows read (appended text not folded
in), JSON of a ``ChatMessage`` with the fields that stay columns blanked: its id, session and
seq (a fork gives fresh ids), ``client_message_id`` and ``admission_json`` (a fork does not copy
them). NULL means "read the columns": rows written before m012, and a message whose parts an
incremental checkpoint rewrote until its last checkpoint stores the body again. Every writer
of a message or its parts either writes the body from what it stored or sets it NULL; so the
two never disagree, and clearing every body is always a correct step.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

import msgspec

from daemon.conversation import ChatMessage, Part
from daemon.errors import InvalidLimit, StoreError
from daemon.store.backend import Body, SqlConnection, StoreBackend
from daemon.store.db import json_encode
from protocol.objects import Usage

_MESSAGE_COLUMNS = (
    "id, session_id, seq, role, model_id, thinking_requested, thinking_effective, "
    "stop_reason, usage_json, status, created_at, origin, turn_id, client_message_id, admission_json"
)
PART_COLUMNS = (
    "message_id, position, type, text, redacted, call_id, name, arguments_json, "
    "is_error, provider, model, signature, provider_data_json, attachment_id, media_json"
)
_PART_PLACEHOLDERS = ", ".join("?" * len(PART_COLUMNS.split(",")))
# What a read of parts rows fetches (messages without a body): no value it can do without, as the
# sqlite3 module pays per value: not a part's position (the order gives it), and a part's two
# flags as one number.
_HISTORY_PART_COLUMNS = (
    "p.message_id, p.type, p.text,"
    " CASE WHEN p.redacted <> 0 THEN 1 ELSE 0 END + CASE WHEN p.is_error <> 0 THEN 2 ELSE 0 END,"
    " p.call_id, p.name, p.arguments_json, p.provider, p.model, p.signature, p.provider_data_json,"
    " p.attachment_id, p.media_json"
)
_REDACTED, _IS_ERROR = 1, 2  # the flags' bits

_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
# A prompt's output request rides in admission_json under this key (no column of its own).
_OUTPUT_KEY = "output"


def _admission_json(message: ChatMessage) -> str | None:
    """``admission_json``: the prompt's first answer, and its output request when it had one."""
    if message.admission is None and message.output is None:
        return None
    stored = dict(message.admission or {})
    if message.output is not None:
        stored[_OUTPUT_KEY] = message.output
    return json_encode(stored).decode()


def _with_admission(message: ChatMessage, text: str | None) -> ChatMessage:
    """``message`` with the ``admission`` and ``output`` its ``admission_json`` holds (a prompt's)."""
    # Set here rather than passed as ``**fields``: a history is mostly messages without, and
    # building and spreading a dict for each cost more than the rest of the message.
    if text is not None:
        stored = _decode_object(text)
        message.output = stored.pop(_OUTPUT_KEY, None)
        message.admission = stored or None
    return message


_decode_usage = msgspec.json.Decoder(Usage).decode


def _body(message: ChatMessage) -> bytes:
    """``messages.body`` of ``message`` as stored (its parts normalized, its ``created_at`` set)."""
    # Bytes (BLOB, BYTEA), not text: the read takes them as they are, without a UTF-8 decode
    # or PostgreSQL's NUL unescaping (JSON escapes a NUL itself).
    return json_encode(
        msgspec.structs.replace(
            message, message_id="", session_id="", seq=0, client_message_id=None, admission=None, output=None
        )
    )


@cache
def _body_decoder() -> msgspec.json.Decoder[ChatMessage]:
    # Made at the first read, not at import: this module is on the daemon's start path.
    return msgspec.json.Decoder(ChatMessage)


class _Media(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A part's ``media_json``: what an image or a resource is (the bytes are the attachment's)."""

    mime_type: str | None = None
    uri: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    truncated: bool = False
    omitted: str | None = None


_decode_media = msgspec.json.Decoder(_Media).decode
_MEDIA_TYPES = ("image", "resource", "resource_link")


def _null_if_empty(value: str | None) -> str | None:
    # Round-trip data is NULL when absent; an empty signature is an absent one.
    return value if value else None


def _part_from_row(row: tuple[Any, ...]) -> Part:
    """A part from its ``_HISTORY_PART_COLUMNS``."""
    # Every part of a history passes here (a resume reads tens of thousands). Most have no
    # media, and a call without ``**`` costs half as much: media are laid over afterwards.
    flags = row[3]
    part = Part(
        type=row[1],
        text=row[2],
        redacted=bool(flags & _REDACTED),
        call_id=row[4],
        name=row[5],
        arguments=None if row[6] is None else _decode_object(row[6]),
        is_error=bool(flags & _IS_ERROR),
        provider=row[7],
        model=row[8],
        signature=row[9],
        provider_data=None if row[10] is None else _decode_object(row[10]),
        attachment_id=row[11],
    )
    if row[12] is None:
        return part
    return msgspec.structs.replace(part, **msgspec.structs.asdict(_decode_media(row[12])))


def _media_of(part: Part) -> _Media:
    """What ``part`` carries of a ``media_json``."""
    return _Media(
        mime_type=part.mime_type,
        uri=part.uri,
        size=part.size,
        width=part.width,
        height=part.height,
        truncated=part.truncated,
        omitted=part.omitted,
    )


def _media_json(part: Part) -> str | None:
    if part.type not in _MEDIA_TYPES:
        return None
    return json_encode(_media_of(part)).decode()


_NO_MEDIA = _Media()
_UNREAD = ChatMessage(message_id="", session_id="", seq=0, role="user", parts=[])  # a place kept in a read


def _normalized_part(part: Part) -> Part:
    """``part`` as the store keeps it (and reads it back)."""
    if part.data is not None:  # the bytes are the attachment row's, written beside the part
        part = msgspec.structs.replace(part, data=None)
    if part.type not in _MEDIA_TYPES and _media_of(part) != _NO_MEDIA:
        # Only media parts have a ``media_json``: what another kind carries there is not kept.
        part = msgspec.structs.replace(part, **msgspec.structs.asdict(_NO_MEDIA))
    if part.provider == "" or part.model == "" or part.signature == "":
        return msgspec.structs.replace(
            part,
            provider=_null_if_empty(part.provider),
            model=_null_if_empty(part.model),
            signature=_null_if_empty(part.signature),
        )
    return part


def _part_params(message_id: str, parts: Iterable[Part]) -> list[tuple[Any, ...]]:
    return [
        (
            message_id,
            position,
            part.type,
            part.text,
            int(part.redacted),
            part.call_id,
            part.name,
            None if part.arguments is None else json_encode(part.arguments).decode(),
            int(part.is_error),
            part.provider,
            part.model,
            part.signature,
            None if part.provider_data is None else json_encode(part.provider_data).decode(),
            part.attachment_id,
            _media_json(part),
        )
        for position, part in enumerate(parts)
    ]


class MessageQueries(StoreBackend):
    def save_message(self, message: ChatMessage) -> ChatMessage:
        """Insert or replace the message with this id (parts included); bump updated_at.

        Used for checkpoints and for the final save of the same message. An empty
        ``created_at`` keeps the stored one (or is set to now); empty round-trip strings
        become None. Returns the message as stored.
        """

        return self._write(self._save_message_body(message))

    def _save_message_body(self, message: ChatMessage) -> Body[ChatMessage]:
        attachments = [part for part in message.parts if part.data is not None and part.attachment_id]
        parts = [_normalized_part(part) for part in message.parts]

        def body(db: SqlConnection) -> ChatMessage:
            self._require_session(db, message.session_id)
            self._check_fence(db, message.session_id)
            now_at = self._now()
            # Stored once by content: the id is the sha256 of the bytes, so a second copy is a no-op.
            db.executemany(
                "INSERT INTO attachments (id, mime_type, bytes, width, height, data, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                [
                    (p.attachment_id, p.mime_type or "", len(p.data or b""), p.width, p.height, p.data, now_at)
                    for p in attachments
                ],
            )
            existing = db.execute(
                "SELECT session_id, created_at FROM messages WHERE id = ?", (message.message_id,)
            ).fetchone()
            if existing is not None and existing[0] != message.session_id:
                raise StoreError(
                    f"Message {message.message_id!r} belongs to session {existing[0]!r}, not {message.session_id!r}."
                )
            now = self._now()
            created_at = message.created_at or (existing[1] if existing else now)
            stored = msgspec.structs.replace(message, parts=parts, created_at=created_at)
            try:
                db.execute(
                    f"""
                    INSERT INTO messages ({_MESSAGE_COLUMNS}, body)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (id) DO UPDATE SET
                        seq = excluded.seq, role = excluded.role, model_id = excluded.model_id,
                        thinking_requested = excluded.thinking_requested,
                        thinking_effective = excluded.thinking_effective,
                        stop_reason = excluded.stop_reason, usage_json = excluded.usage_json,
                        status = excluded.status, created_at = excluded.created_at,
                        origin = excluded.origin, turn_id = excluded.turn_id,
                        client_message_id = excluded.client_message_id,
                        admission_json = excluded.admission_json, body = excluded.body
                    """,
                    (
                        message.message_id,
                        message.session_id,
                        message.seq,
                        message.role,
                        message.model_id,
                        message.thinking_requested,
                        message.thinking_effective,
                        message.stop_reason,
                        None if message.usage is None else json_encode(message.usage).decode(),
                        message.status,
                        created_at,
                        message.origin,
                        message.turn_id,
                        message.client_message_id,
                        _admission_json(message),
                        _body(stored),
                    ),
                )
            except Exception as error:
                if not self._is_unique_violation(error):
                    raise
                raise StoreError(
                    f"Seq {message.seq} is already used by another message in session {message.session_id!r}."
                ) from error
            db.execute("DELETE FROM parts WHERE message_id = ?", (message.message_id,))
            db.executemany(
                f"INSERT INTO parts ({PART_COLUMNS}) VALUES ({_PART_PLACEHOLDERS})",
                _part_params(message.message_id, parts),
            )
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, message.session_id))
            return stored

        return body

    def get_messages(
        self, session_id: str, after_seq: int | None = None, limit: int | None = None
    ) -> list[ChatMessage]:
        """Messages in seq order, those with seq > ``after_seq``, at most ``limit``.

        An unknown session has no messages; check ``get_session`` to tell the two apart.
        """
        if limit is not None and limit < 0:
            raise InvalidLimit("limit must not be negative.")
        # Seqs start at 1, so -1 is below all of them.
        low = -1 if after_seq is None else after_seq
        # Five values a message, whatever its parts: the sqlite3 module pays per value (on 3.11
        # it lets the GIL go and takes it back around each column's type), and a long history is
        # ~10,000 messages and ~15,000 parts.
        sql = (
            "SELECT id, seq, client_message_id, admission_json, body FROM messages"
            " WHERE session_id = ? AND seq > ? ORDER BY seq"
        )
        params: tuple[Any, ...] = (session_id, low)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)

        def body(db: SqlConnection) -> list[ChatMessage]:
            from daemon.util.collector import paused  # with the first read of a history: off the start path

            with paused():  # a long history is ~25,000 rows and structs, none in a cycle
                return rows_to_messages(db)

        def rows_to_messages(db: SqlConnection) -> list[ChatMessage]:
            rows = db.execute(sql, params).fetchall()
            if not rows:
                return []
            high = rows[-1][1]
            messages: list[ChatMessage] = []
            unread: dict[int, str] = {}  # index → id of the messages to read from their rows
            decode = _body_decoder().decode
            for message_id, seq, client_message_id, admission, stored in rows:
                if stored is not None:
                    try:
                        message = decode(stored)
                    except (msgspec.DecodeError, UnicodeDecodeError):
                        # A value the struct's types refuse (the columns never checked them, and
                        # the rows hold the same), or bytes damaged on disk: read as a row without
                        # a body is (a damaged text there is the store's "damaged" error).
                        pass
                    else:
                        message.message_id = message_id
                        message.session_id = session_id
                        message.seq = seq
                        message.client_message_id = client_message_id
                        messages.append(_with_admission(message, admission))
                        continue
                unread[len(messages)] = message_id
                messages.append(_UNREAD)
            if unread:
                by_columns = _read_by_columns(
                    db, "m.session_id = ? AND m.seq > ? AND m.seq <= ? AND m.body IS NULL", (session_id, low, high)
                )
                for index, message_id in unread.items():
                    if message_id not in by_columns:  # it has a body it could not be read from
                        by_columns.update(_read_by_columns(db, "m.id = ?", (message_id,)))
                    messages[index] = by_columns[message_id]
            _add_appended_text(db, messages, session_id, low, high)
            return messages

        return self._read(body)

    def delete_message(self, session_id: str, message_id: str) -> bool:
        """Delete one message with its parts (a queued prompt taken back); False if it was not stored."""

        def body(db: SqlConnection) -> bool:
            found = db.execute("DELETE FROM messages WHERE id = ? AND session_id = ?", (message_id, session_id))
            return found.rowcount > 0

        return self._write(body)

    # --- attachments ---------------------------------------------------------------------

    def get_attachment(self, session_id: str, attachment_id: str) -> tuple[str, bytes] | None:
        """(mime_type, bytes) of an attachment that a message of ``session_id`` names, else None."""

        def body(db: SqlConnection) -> tuple[str, bytes] | None:
            row = db.execute(
                """
                SELECT a.mime_type, a.data FROM attachments AS a
                WHERE a.id = ? AND EXISTS (
                    SELECT 1 FROM parts AS p JOIN messages AS m ON m.id = p.message_id
                    WHERE p.attachment_id = ? AND m.session_id = ?
                )
                """,
                (attachment_id, attachment_id, session_id),
            ).fetchone()
            return None if row is None else (row[0], bytes(row[1]))

        return self._read(body)

    def get_attachments(self, attachment_ids: Iterable[str]) -> dict[str, bytes]:
        """The bytes of these attachments (those that exist), for a request to a provider."""
        wanted = list(dict.fromkeys(attachment_ids))

        def body(db: SqlConnection) -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                chunk = wanted[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                for attachment_id, data in db.execute(f"SELECT id, data FROM attachments WHERE id IN ({marks})", chunk):
                    found[attachment_id] = bytes(data)
            return found

        return self._read(body)

    def mark_image_omitted(self, message_id: str, position: int, reason: str) -> None:
        """Mark a stored image part as sent only as a note from now on (a provider refused it)."""

        def body(db: SqlConnection) -> None:
            row = db.execute(
                "SELECT media_json FROM parts WHERE message_id = ? AND position = ? AND type = 'image'",
                (message_id, position),
            ).fetchone()
            if row is None:
                return
            media = msgspec.structs.replace(_decode_media(row[0] or "{}"), omitted=reason)
            db.execute(
                "UPDATE parts SET media_json = ? WHERE message_id = ? AND position = ?",
                (json_encode(media).decode(), message_id, position),
            )
            _store_body(db, message_id)

        self._write(body)

    # --- incremental checkpoints -------------------------------------------------------

    def append_to_message(
        self,
        message_id: str,
        parts: dict[int, Part],
        texts: dict[int, str],
        *,
        keep_text: frozenset[int] = frozenset(),
        final: ChatMessage | None = None,
    ) -> None:
        """Checkpoint a stored message that is still streaming, at the cost of what changed.

        ``parts`` (position → part) are written whole, replacing what the store held at
        those positions, except that for positions in ``keep_text`` every field but the
        text is written and the stored text stays. ``texts`` (position → text) are then
        appended to the text of the parts stored there, without reading or rewriting it.
        ``final`` sets the message's status, stop reason and usage (its last checkpoint).
        Reads fold the appended text in; a later ``save_message`` folds it in the store.
        """
        self._write(self._append_to_message_body(message_id, parts, texts, keep_text=keep_text, final=final))

    def _append_to_message_body(
        self,
        message_id: str,
        parts: dict[int, Part],
        texts: dict[int, str],
        *,
        keep_text: frozenset[int] = frozenset(),
        final: ChatMessage | None = None,
    ) -> Body[None]:
        def body(db: SqlConnection) -> None:
            found = db.execute("SELECT session_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if found is None:
                raise StoreError(f"Message {message_id!r} must be saved before text is appended to it.")
            self._check_fence(db, found[0])
            for position, part in parts.items():
                row = _part_params(message_id, [_normalized_part(part)])[0]
                if position in keep_text:
                    updated = db.execute(
                        """
                        UPDATE parts SET type = ?, redacted = ?, call_id = ?, name = ?, arguments_json = ?,
                            is_error = ?, provider = ?, model = ?, signature = ?, provider_data_json = ?,
                            attachment_id = ?, media_json = ?
                        WHERE message_id = ? AND position = ?
                        """,
                        (row[2], *row[4:], message_id, position),
                    )
                    if updated.rowcount == 0:
                        raise StoreError(f"Message {message_id!r} has no stored part at position {position}.")
                    continue
                db.execute("DELETE FROM part_appends WHERE message_id = ? AND position = ?", (message_id, position))
                db.execute(
                    f"""
                    INSERT INTO parts ({PART_COLUMNS}) VALUES ({_PART_PLACEHOLDERS})
                    ON CONFLICT (message_id, position) DO UPDATE SET
                        type = excluded.type, text = excluded.text, redacted = excluded.redacted,
                        call_id = excluded.call_id, name = excluded.name, arguments_json = excluded.arguments_json,
                        is_error = excluded.is_error, provider = excluded.provider, model = excluded.model,
                        signature = excluded.signature, provider_data_json = excluded.provider_data_json,
                        attachment_id = excluded.attachment_id, media_json = excluded.media_json
                    """,
                    (row[0], position, *row[2:]),
                )
            try:
                db.executemany(
                    "INSERT INTO part_appends (message_id, position, text) VALUES (?, ?, ?)",
                    [(message_id, position, text) for position, text in texts.items()],
                )
            except Exception as error:
                if not self._is_unique_violation(error):
                    raise
                raise StoreError(f"Message {message_id!r} has no part to append text to.") from error
            if final is not None:
                db.execute(
                    "UPDATE messages SET status = ?, stop_reason = ?, usage_json = ? WHERE id = ?",
                    (
                        final.status,
                        final.stop_reason,
                        None if final.usage is None else json_encode(final.usage).decode(),
                        message_id,
                    ),
                )
                # The reply is whole: its body again, as the rows now read (appended text aside).
                _store_body(db, message_id)
            elif parts:
                # Parts rewritten in place: read from the rows until the last checkpoint (a body
                # written at each would cost the whole message each time, not what changed).
                db.execute("UPDATE messages SET body = NULL WHERE id = ?", (message_id,))
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (self._now(), found[0]))

        return body


def _read_by_columns(db: SqlConnection, where: str, params: tuple[Any, ...]) -> dict[str, ChatMessage]:
    """The messages ``where`` picks (on ``messages AS m``) from their columns and ``parts`` rows,
    by id: those without a body, and what a body is written from. Appended text not folded in."""
    parts: dict[str, list[Part]] = {}
    # One query for all parts of the page rather than one per message.
    for part_row in db.execute(
        f"""
        SELECT {_HISTORY_PART_COLUMNS}
        FROM messages AS m JOIN parts AS p ON p.message_id = m.id
        WHERE {where}
        ORDER BY m.seq, p.position
        """,
        params,
    ):
        parts.setdefault(part_row[0], []).append(_part_from_row(part_row))
    return {
        row[0]: _with_admission(
            ChatMessage(
                message_id=row[0],
                session_id=row[1],
                seq=row[2],
                role=row[3],
                parts=parts.get(row[0], []),
                model_id=row[4],
                thinking_requested=row[5],
                thinking_effective=row[6],
                stop_reason=row[7],
                usage=None if row[8] is None else _decode_usage(row[8]),
                status=row[9],
                created_at=row[10],
                origin=row[11],
                turn_id=row[12],
                client_message_id=row[13],
            ),
            row[14],
        )
        for row in db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages AS m WHERE {where} ORDER BY m.seq", params)
    }


def _store_body(db: SqlConnection, message_id: str) -> None:
    """Write the body of a message from its columns and parts (after a writer changed them in place)."""
    found = _read_by_columns(db, "m.id = ?", (message_id,))
    if message_id in found:
        db.execute("UPDATE messages SET body = ? WHERE id = ?", (_body(found[message_id]), message_id))


def _add_appended_text(db: SqlConnection, messages: list[ChatMessage], session_id: str, low: int, high: int) -> None:
    """Fold the text of incremental checkpoints (a reply cut off mid-stream) into ``messages``."""
    appended: dict[tuple[str, int], list[str]] = {}
    for message_id, position, text in db.execute(
        """
        SELECT a.message_id, a.position, a.text
        FROM messages AS m JOIN part_appends AS a ON a.message_id = m.id
        WHERE m.session_id = ? AND m.seq > ? AND m.seq <= ?
        ORDER BY a.id
        """,
        (session_id, low, high),
    ):
        appended.setdefault((message_id, position), []).append(text)
    if not appended:
        return
    parts = {message.message_id: message.parts for message in messages}
    for (message_id, position), texts in appended.items():
        message_parts = parts.get(message_id, [])
        if position < len(message_parts):  # positions are 0..n-1 as saved
            message_parts[position].text += "".join(texts)
