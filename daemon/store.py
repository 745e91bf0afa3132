"""The session store: sessions, their messages and parts, model/thinking changes, turn leases.

Owns ``sessions.db`` (SQLite): opening it safely (mode 0600, WAL, foreign keys, busy
timeout), the queries, and the mapping between rows and ``SessionRow`` / ``ChatMessage``.
The schema itself lives in ``daemon.migrations``.

``Store`` is synchronous and holds one connection; ``AsyncStore`` runs every call on a
worker thread, one at a time, so the event loop (asyncio or trio) never blocks on disk.
Several daemons may share one file: every write is one ``BEGIN IMMEDIATE`` transaction,
lock contention waits on ``busy_timeout`` and is retried, and a turn is guarded across
processes by a lease row whose owner is ``"<pid>:<process start time>:<random>"``.

sqlite3 errors are turned into ``StoreError`` here, at the one edge; callers see the
daemon's own exception hierarchy only. A store that cannot be used (full disk, lock held
too long, read-only, damaged, newer schema) raises ``StoreUnavailable`` with one sentence
naming the cause; a file that is damaged or from a newer ponder is never written to.
"""

from __future__ import annotations

import base64
import errno
import functools
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import anyio
import msgspec

from daemon.conversation import ChatMessage, Part
from daemon.errors import InvalidParams, SessionNotFound, ShuttingDown, StoreError, StoreUnavailable
from daemon.migrations import check_not_too_new, migrate
from daemon.util.clock import new_id, rfc3339
from protocol.objects import Session, Usage

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
# busy_timeout already waits inside SQLite; these extra rounds cover the cases it cannot
# (a lock taken while opening, SQLITE_BUSY_SNAPSHOT) without giving up on a long write.
LOCK_RETRIES = 5
LOCK_RETRY_DELAY_S = 0.05

_SESSION_COLUMNS = (
    "id, title, cwd, model_id, thinking_level, approval_policy, system_prompt, "
    "parent_id, created_at, updated_at, message_count"
)
_UPDATABLE_SESSION_FIELDS = frozenset(
    {"title", "model_id", "thinking_level", "approval_policy", "system_prompt", "updated_at"}
)
_MESSAGE_COLUMNS = (
    "id, session_id, seq, role, model_id, thinking_requested, thinking_effective, "
    "stop_reason, usage_json, status, created_at"
)
_PART_COLUMNS = (
    "message_id, position, type, text, redacted, call_id, name, arguments_json, "
    "is_error, provider, model, signature, provider_data_json"
)
_PART_COLUMNS_OF_P = ", ".join(f"p.{name.strip()}" for name in _PART_COLUMNS.split(","))

_json_encode = msgspec.json.Encoder().encode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_decode_usage = msgspec.json.Decoder(Usage).decode
_decode_cursor = msgspec.json.Decoder(tuple[str, str]).decode


class StoreClosed(ShuttingDown):
    """The store was closed, which happens only on the way out."""


class SessionRow(msgspec.Struct, kw_only=True):
    id: str
    cwd: str
    model_id: str
    thinking_level: str
    approval_policy: str = "ask"
    title: str | None = None
    system_prompt: str | None = None
    parent_id: str | None = None
    created_at: str = ""  # filled with the store's clock when empty
    updated_at: str = ""
    message_count: int = 0  # maintained by the store; ignored on create

    def to_wire(self, status: str = "idle") -> Session:
        return Session(
            session_id=self.id,
            title=self.title,
            cwd=self.cwd,
            model_id=self.model_id,
            thinking_level=self.thinking_level,  # type: ignore[arg-type]
            approval_policy=self.approval_policy,  # type: ignore[arg-type]
            created_at=self.created_at,
            updated_at=self.updated_at,
            message_count=self.message_count,
            parent_id=self.parent_id,
            status=status,  # type: ignore[arg-type]
        )


class SessionChange(msgspec.Struct, kw_only=True):
    kind: str  # "model" or "thinking"
    value: str | None
    at: str


class Lease(msgspec.Struct, kw_only=True):
    session_id: str
    owner: str
    expires_at: float  # unix seconds


def process_start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from /proc), or "" where unknown.

    A pid is reused (a container restart hands the daemon the same pid again); the pid with
    its start time names one process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return ""
    # Field 2 (the command name) may hold spaces and parentheses: count from the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


def new_lease_owner() -> str:
    """An owner string for this process: pid and start time make a dead owner detectable."""
    pid = os.getpid()
    return f"{pid}:{process_start_time(pid)}:{os.urandom(8).hex()}"


def _null_if_empty(value: str | None) -> str | None:
    # Round-trip data is NULL when absent; an empty signature is an absent one.
    return value if value else None


def _owner_alive(owner: str) -> bool:
    # "<pid>:<start time>:<random>", or "<pid>:<random>" from an older ponder.
    fields = owner.split(":")
    try:
        pid = int(fields[0])
    except ValueError:
        return True  # not ours to judge; the expiry still frees it
    if pid <= 0:
        return True
    if sys.platform == "win32":
        # os.kill(pid, 0) on Windows sends CTRL_C_EVENT; rely on the expiry there.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # EPERM: it exists, it just belongs to someone else
    if len(fields) != 3 or not fields[1]:
        return True  # no start time recorded: the pid is all there is to go on
    # The pid is alive, but it may be another process that got the dead owner's pid.
    current = process_start_time(pid)
    return not current or current == fields[1]


def _is_busy(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


_DAMAGED_HINT = "; ponder leaves it untouched (move it aside to start with an empty store)."


def _damaged(detail: str) -> StoreUnavailable:
    return StoreUnavailable(f"sessions.db is damaged: {detail}{_DAMAGED_HINT}")


def _store_error(error: sqlite3.Error, *, write: bool) -> StoreError:
    """The daemon's error for a failed SQLite call: one sentence, no raw bytes from the file."""
    # Errors raised by SQLite carry its result code; those raised by the sqlite3 module
    # itself (a text that is not UTF-8) do not have the attribute at all.
    code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
    doing = "written" if write else "read"
    if code == 13:  # SQLITE_FULL
        return StoreUnavailable("The session store could not be written: disk is full.")
    if code in (5, 6) or (code == 0 and _is_busy(error)):  # SQLITE_BUSY, SQLITE_LOCKED
        return StoreUnavailable(
            f"The session store could not be {doing}: another process held its lock for more than "
            f"{BUSY_TIMEOUT_MS / 1000:g} s."
        )
    if code == 8:  # SQLITE_READONLY
        return StoreUnavailable("The session store could not be written: sessions.db is read-only.")
    if code in (3, 14):  # SQLITE_PERM, SQLITE_CANTOPEN
        return StoreUnavailable(f"The session store could not be {doing}: permission denied or the file is missing.")
    if code == 10:  # SQLITE_IOERR
        return StoreUnavailable(f"The session store could not be {doing}: the disk reported an I/O error.")
    if code == 11:  # SQLITE_CORRUPT
        return _damaged("the database disk image is malformed")
    if code == 26:  # SQLITE_NOTADB
        return _damaged("it is not an SQLite database")
    if str(error).startswith("Could not decode to UTF-8"):
        return _damaged("a stored text is not valid UTF-8")
    return StoreError(f"The session database failed: {error}")


def _as_store_error(error: Exception) -> Exception:
    """What ``Store._transaction`` would have raised for ``error`` (a body's own errors pass through)."""
    converted: Exception = error
    if isinstance(error, sqlite3.Error):
        converted = _store_error(error, write=True)
    elif isinstance(error, (msgspec.DecodeError, msgspec.ValidationError)):
        converted = _damaged("a stored JSON value is malformed")
    if converted is not error:
        converted.__cause__ = error
    return converted


def _open_error(path: str, error: OSError) -> StoreUnavailable:
    reasons = {
        errno.EROFS: "it is on a read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOSPC: "disk is full",
        errno.ENOTDIR: "a part of its path is not a directory",
        errno.EEXIST: "a part of its path is not a directory",  # what makedirs says then
        errno.EISDIR: "it is a directory",
    }
    reason = reasons.get(error.errno or 0, error.strerror or type(error).__name__)
    return StoreUnavailable(f"The session store {path} cannot be opened: {reason}.")


def _encode_cursor(updated_at: str, session_id: str) -> str:
    return base64.urlsafe_b64encode(_json_encode((updated_at, session_id))).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return _decode_cursor(raw)
    except (ValueError, msgspec.DecodeError):
        raise InvalidParams("The cursor is not one session/list returned.", path="$.cursor") from None


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
    )


def _part_from_row(row: tuple[Any, ...]) -> Part:
    return Part(
        type=row[2],
        text=row[3],
        redacted=bool(row[4]),
        call_id=row[5],
        name=row[6],
        arguments=None if row[7] is None else _decode_object(row[7]),
        is_error=bool(row[8]),
        provider=row[9],
        model=row[10],
        signature=row[11],
        provider_data=None if row[12] is None else _decode_object(row[12]),
    )


def _normalized_part(part: Part) -> Part:
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
            None if part.arguments is None else _json_encode(part.arguments).decode(),
            int(part.is_error),
            part.provider,
            part.model,
            part.signature,
            None if part.provider_data is None else _json_encode(part.provider_data).decode(),
        )
        for position, part in enumerate(parts)
    ]


def _prepare_file(path: str) -> None:
    """Create the db file owner-only before SQLite sees it, so it never exists world-readable."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    os.close(fd)


def _restrict_files(path: str) -> None:
    # SQLite gives -wal/-shm the db file's mode, but a file left by an older run or made
    # under another umask may be looser; tighten whatever is there.
    for name in (path, f"{path}-wal", f"{path}-shm"):
        try:
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)
        except OSError:
            pass  # absent (no WAL yet) or not ours to change


class Store:
    """One SQLite connection; every public method is a complete transaction.

    Safe to call from any thread (calls are serialized by a lock), but each call blocks:
    from async code use ``AsyncStore``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        problem: str | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self._clock = clock
        self._lock = threading.RLock()
        self.problem = problem  # why it could not be opened (see ``unavailable``)
        self._db: sqlite3.Connection | None = None
        if problem is not None:
            return  # nothing is opened, created or touched
        in_memory = self.path == ":memory:"
        if not in_memory:
            try:
                _prepare_file(self.path)
            except OSError as error:
                raise _open_error(self.path, error) from error
        try:
            db = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # AsyncStore calls from pooled worker threads
            )
        except sqlite3.Error as error:
            raise _store_error(error, write=False) from error
        try:
            # Read before anything is written: a damaged file or one from a newer ponder
            # stops here, untouched (switching to WAL would rewrite its header).
            self._retry_locked(lambda: check_not_too_new(db))
            self._retry_locked(lambda: self._configure(db))
            self._retry_locked(lambda: migrate(db))
        except sqlite3.Error as error:
            db.close()
            raise _store_error(error, write=True) from error
        except BaseException:
            db.close()
            raise
        self._db = db
        if not in_memory:
            _restrict_files(self.path)

    @classmethod
    def unavailable(cls, path: str | os.PathLike[str], problem: str) -> Store:
        """A store that could not be opened: every call raises ``StoreUnavailable(problem)``.

        Lets the daemon start and answer anyway (PROTOCOL.md, ``initialize``); the file is
        left as it is.
        """
        return cls(path, problem=problem)

    @staticmethod
    def _configure(db: sqlite3.Connection) -> None:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
        db.execute("PRAGMA foreign_keys = ON")
        # WAL lets readers in other daemons proceed during our writes; NORMAL is durable
        # against crashes of the process (not of the OS), which is the trade WAL is for.
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")

    # --- transactions -----------------------------------------------------------------

    def _retry_locked(self, attempt: Callable[[], T]) -> T:
        for remaining in range(LOCK_RETRIES, -1, -1):
            started = time.monotonic()
            try:
                return attempt()
            except sqlite3.OperationalError as error:
                if not (_is_busy(error) and remaining):
                    raise
                # A whole busy_timeout spent waiting: another process holds the lock, and
                # more rounds would only multiply the wait.
                if time.monotonic() - started >= BUSY_TIMEOUT_MS / 1000:
                    raise
            time.sleep(LOCK_RETRY_DELAY_S * (LOCK_RETRIES - remaining + 1))
        raise AssertionError("unreachable")

    def _transaction(self, body: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        def attempt() -> T:
            with self._lock:
                db = self._db
                if db is None:
                    if self.problem is not None:
                        raise StoreUnavailable(self.problem)
                    raise StoreClosed()
                # IMMEDIATE takes the write lock up front, so contention waits on
                # busy_timeout instead of failing when a read would upgrade to a write.
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = body(db)
                    db.execute("COMMIT")
                    return result
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise

        try:
            return self._retry_locked(attempt)
        except sqlite3.Error as error:
            raise _store_error(error, write=write) from error
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise _damaged("a stored JSON value is malformed") from error

    def run_together(
        self, bodies: list[Callable[[sqlite3.Connection], Any]], *, write: bool
    ) -> list[tuple[Any, Exception | None]]:
        """Run ``bodies`` in one transaction, each in its own savepoint, and return each one's
        (result, error): a body that fails rolls back only its own writes, the others commit
        together. An error of the transaction itself (closed, locked, disk full) raises."""

        def body(db: sqlite3.Connection) -> list[tuple[Any, Exception | None]]:
            outcomes: list[tuple[Any, Exception | None]] = []
            for item in bodies:
                db.execute("SAVEPOINT together")
                try:
                    outcomes.append((item(db), None))
                except Exception as error:
                    db.execute("ROLLBACK TO together")
                    outcomes.append((None, _as_store_error(error)))
                db.execute("RELEASE together")
            return outcomes

        return self._transaction(body, write=write)

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        return self._transaction(body, write=True)

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        # A read transaction gives multi-query reads one consistent snapshot.
        return self._transaction(body, write=False)

    def _now(self) -> str:
        return rfc3339(self._clock())

    @staticmethod
    def _require_session(db: sqlite3.Connection, session_id: str) -> None:
        if db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise SessionNotFound(session_id)

    @staticmethod
    def _fetch_session(db: sqlite3.Connection, session_id: str) -> SessionRow | None:
        row = db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else _session_from_row(row)

    def _insert_session(self, db: sqlite3.Connection, row: SessionRow) -> SessionRow:
        now = self._now()
        created_at = row.created_at or now
        try:
            inserted = db.execute(
                f"""
                INSERT INTO sessions (id, title, cwd, model_id, thinking_level, approval_policy,
                                      system_prompt, parent_id, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
                ),
            ).fetchone()
        except sqlite3.IntegrityError as error:
            raise StoreError(f"Session id {row.id!r} is already taken: {error}") from error
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
            raise InvalidParams("limit must be at least 1.", path="$.limit")
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
        """Change some of title, model_id, thinking_level, approval_policy, system_prompt.

        ``updated_at`` is set to now unless given.
        """
        unknown = set(fields) - _UPDATABLE_SESSION_FIELDS
        if unknown:
            raise TypeError(f"update_session() cannot change {sorted(unknown)}")
        fields.setdefault("updated_at", self._now())
        assignments = ", ".join(f"{name} = ?" for name in fields)  # names come from the allow-list

        def body(db: sqlite3.Connection) -> SessionRow:
            row = db.execute(
                f"UPDATE sessions SET {assignments} WHERE id = ? RETURNING {_SESSION_COLUMNS}",
                (*fields.values(), session_id),
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            return _session_from_row(row)

        return self._write(body)

    def delete_session(self, session_id: str) -> bool:
        """Delete the session with its messages, parts, changes and lease; False if absent."""
        return self._write(lambda db: db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0)

    def fork_session(self, source_id: str, new_row: SessionRow, up_to_message_id: str | None = None) -> SessionRow:
        """Create ``new_row`` (its parent_id set to ``source_id``) with a copy of the history.

        Messages up to and including ``up_to_message_id`` (default: all) are copied with
        their parts, keeping their seq, under fresh message ids.
        """

        def body(db: sqlite3.Connection) -> SessionRow:
            self._require_session(db, source_id)
            seq_filter, params = "", [source_id]
            if up_to_message_id is not None:
                found = db.execute(
                    "SELECT seq FROM messages WHERE id = ? AND session_id = ?", (up_to_message_id, source_id)
                ).fetchone()
                if found is None:
                    raise InvalidParams(
                        f"Message {up_to_message_id!r} is not in session {source_id!r}.", path="$.message_id"
                    )
                seq_filter = " AND seq <= ?"
                params.append(found[0])
            self._insert_session(db, msgspec.structs.replace(new_row, parent_id=source_id))

            old_ids = [r[0] for r in db.execute(f"SELECT id FROM messages WHERE session_id = ?{seq_filter}", params)]
            mapping = [(new_id("msg"), old_id) for old_id in old_ids]
            db.executemany(
                """
                INSERT INTO messages (id, session_id, seq, role, model_id, thinking_requested,
                                      thinking_effective, stop_reason, usage_json, status, created_at)
                SELECT ?1, ?3, seq, role, model_id, thinking_requested,
                       thinking_effective, stop_reason, usage_json, status, created_at
                FROM messages WHERE id = ?2
                """,
                [(new_id, old_id, new_row.id) for new_id, old_id in mapping],
            )
            db.executemany(
                f"""
                INSERT INTO parts ({_PART_COLUMNS})
                SELECT ?1, position, type, text, redacted, call_id, name, arguments_json,
                       is_error, provider, model, signature, provider_data_json
                FROM parts WHERE message_id = ?2
                """,
                mapping,
            )
            db.executemany(
                "INSERT INTO part_appends (message_id, position, text) "
                "SELECT ?1, position, text FROM part_appends WHERE message_id = ?2 ORDER BY id",
                mapping,
            )
            forked = self._fetch_session(db, new_row.id)
            assert forked is not None
            return forked

        return self._write(body)

    # --- messages -----------------------------------------------------------------------

    def save_message(self, message: ChatMessage) -> ChatMessage:
        """Insert or replace the message with this id (parts included); bump updated_at.

        Used for checkpoints and for the final save of the same message. An empty
        ``created_at`` keeps the stored one (or is set to now); empty round-trip strings
        become None. Returns the message as stored.
        """

        return self._write(self._save_message_body(message))

    def _save_message_body(self, message: ChatMessage) -> Callable[[sqlite3.Connection], ChatMessage]:
        parts = [_normalized_part(part) for part in message.parts]

        def body(db: sqlite3.Connection) -> ChatMessage:
            self._require_session(db, message.session_id)
            existing = db.execute(
                "SELECT session_id, created_at FROM messages WHERE id = ?", (message.message_id,)
            ).fetchone()
            if existing is not None and existing[0] != message.session_id:
                raise StoreError(
                    f"Message {message.message_id!r} belongs to session {existing[0]!r}, not {message.session_id!r}."
                )
            now = self._now()
            created_at = message.created_at or (existing[1] if existing else now)
            try:
                db.execute(
                    f"""
                    INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (id) DO UPDATE SET
                        seq = excluded.seq, role = excluded.role, model_id = excluded.model_id,
                        thinking_requested = excluded.thinking_requested,
                        thinking_effective = excluded.thinking_effective,
                        stop_reason = excluded.stop_reason, usage_json = excluded.usage_json,
                        status = excluded.status, created_at = excluded.created_at
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
                        None if message.usage is None else _json_encode(message.usage).decode(),
                        message.status,
                        created_at,
                    ),
                )
            except sqlite3.IntegrityError as error:
                raise StoreError(
                    f"Seq {message.seq} is already used by another message in session {message.session_id!r}."
                ) from error
            db.execute("DELETE FROM parts WHERE message_id = ?", (message.message_id,))
            db.executemany(
                f"INSERT INTO parts ({_PART_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _part_params(message.message_id, parts),
            )
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, message.session_id))
            return msgspec.structs.replace(message, parts=parts, created_at=created_at)

        return body

    def get_messages(
        self, session_id: str, after_seq: int | None = None, limit: int | None = None
    ) -> list[ChatMessage]:
        """Messages in seq order, those with seq > ``after_seq``, at most ``limit``.

        An unknown session has no messages; check ``get_session`` to tell the two apart.
        """
        if limit is not None and limit < 0:
            raise InvalidParams("limit must not be negative.", path="$.limit")
        # SQLite reads LIMIT -1 as "no limit"; seqs start at 1, so -1 is below all of them.
        low = -1 if after_seq is None else after_seq

        def body(db: sqlite3.Connection) -> list[ChatMessage]:
            rows = db.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, low, -1 if limit is None else limit),
            ).fetchall()
            if not rows:
                return []
            # One query for all parts of the page rather than one per message.
            parts: dict[str, list[Part]] = {row[0]: [] for row in rows}
            for part_row in db.execute(
                f"""
                SELECT {_PART_COLUMNS_OF_P}
                FROM messages AS m JOIN parts AS p ON p.message_id = m.id
                WHERE m.session_id = ? AND m.seq > ? AND m.seq <= ?
                ORDER BY m.seq, p.position
                """,
                (session_id, low, rows[-1][2]),
            ):
                parts[part_row[0]].append(_part_from_row(part_row))
            self._add_appended_text(db, parts, session_id, low, rows[-1][2])
            return [
                ChatMessage(
                    message_id=row[0],
                    session_id=row[1],
                    seq=row[2],
                    role=row[3],
                    parts=parts[row[0]],
                    model_id=row[4],
                    thinking_requested=row[5],
                    thinking_effective=row[6],
                    stop_reason=row[7],
                    usage=None if row[8] is None else _decode_usage(row[8]),
                    status=row[9],
                    created_at=row[10],
                )
                for row in rows
            ]

        return self._read(body)

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

        def body(db: sqlite3.Connection) -> None:
            found = db.execute("SELECT session_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if found is None:
                raise StoreError(f"Message {message_id!r} must be saved before text is appended to it.")
            for position, part in parts.items():
                row = _part_params(message_id, [_normalized_part(part)])[0]
                if position in keep_text:
                    updated = db.execute(
                        """
                        UPDATE parts SET type = ?, redacted = ?, call_id = ?, name = ?, arguments_json = ?,
                            is_error = ?, provider = ?, model = ?, signature = ?, provider_data_json = ?
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
                    INSERT INTO parts ({_PART_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (message_id, position) DO UPDATE SET
                        type = excluded.type, text = excluded.text, redacted = excluded.redacted,
                        call_id = excluded.call_id, name = excluded.name, arguments_json = excluded.arguments_json,
                        is_error = excluded.is_error, provider = excluded.provider, model = excluded.model,
                        signature = excluded.signature, provider_data_json = excluded.provider_data_json
                    """,
                    (row[0], position, *row[2:]),
                )
            try:
                db.executemany(
                    "INSERT INTO part_appends (message_id, position, text) VALUES (?, ?, ?)",
                    [(message_id, position, text) for position, text in texts.items()],
                )
            except sqlite3.IntegrityError as error:
                raise StoreError(f"Message {message_id!r} has no part to append text to: {error}") from error
            if final is not None:
                db.execute(
                    "UPDATE messages SET status = ?, stop_reason = ?, usage_json = ? WHERE id = ?",
                    (
                        final.status,
                        final.stop_reason,
                        None if final.usage is None else _json_encode(final.usage).decode(),
                        message_id,
                    ),
                )
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (self._now(), found[0]))

        self._write(body)

    @staticmethod
    def _add_appended_text(
        db: sqlite3.Connection, parts: dict[str, list[Part]], session_id: str, low: int, high: int
    ) -> None:
        """Fold the text of incremental checkpoints (a reply cut off mid-stream) into ``parts``."""
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
        for (message_id, position), texts in appended.items():
            message_parts = parts.get(message_id, [])
            if position < len(message_parts):  # positions are 0..n-1 as saved
                message_parts[position].text += "".join(texts)

    def next_seq(self, session_id: str) -> int:
        """The seq for the session's next message: 1 for an empty session."""
        return self._read(
            lambda db: db.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
        )

    # --- changes ------------------------------------------------------------------------

    def record_change(self, session_id: str, kind: str, value: str | None) -> None:
        """Remember a model or thinking change (``kind`` "model" / "thinking") with its time."""

        def body(db: sqlite3.Connection) -> None:
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

    # --- turn leases --------------------------------------------------------------------

    def acquire_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        """Take (or extend) the session's turn lease for ``owner``.

        False while another owner holds it unexpired and that owner's process is alive.
        """
        return self._write(self._acquire_lease_body(session_id, owner, ttl_s))

    def _acquire_lease_body(self, session_id: str, owner: str, ttl_s: float) -> Callable[[sqlite3.Connection], bool]:
        def body(db: sqlite3.Connection) -> bool:
            now = self._clock()
            held = db.execute(
                "SELECT owner, expires_at FROM turn_leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if held is not None and held[0] != owner and held[1] > now and _owner_alive(held[0]):
                return False
            self._require_session(db, session_id)
            db.execute(
                """
                INSERT INTO turn_leases (session_id, owner, expires_at) VALUES (?, ?, ?)
                ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
                """,
                (session_id, owner, now + ttl_s),
            )
            return True

        return body

    def renew_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        """Extend ``owner``'s lease; False if it was taken over (the turn must stop)."""
        return self._write(
            lambda db: (
                db.execute(
                    "UPDATE turn_leases SET expires_at = ? WHERE session_id = ? AND owner = ?",
                    (self._clock() + ttl_s, session_id, owner),
                ).rowcount
                > 0
            )
        )

    def release_lease(self, session_id: str, owner: str) -> bool:
        """Drop ``owner``'s lease; False if it did not hold it."""
        return self._write(
            lambda db: (
                db.execute("DELETE FROM turn_leases WHERE session_id = ? AND owner = ?", (session_id, owner)).rowcount
                > 0
            )
        )

    def get_lease(self, session_id: str) -> Lease | None:
        row = self._read(
            lambda db: db.execute(
                "SELECT owner, expires_at FROM turn_leases WHERE session_id = ?", (session_id,)
            ).fetchone()
        )
        return None if row is None else Lease(session_id=session_id, owner=row[0], expires_at=row[1])

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection; later calls raise ``StoreClosed``. Idempotent."""
        with self._lock:
            db, self._db = self._db, None
            if db is None:
                return
            try:
                # Cheap, and keeps the planner's statistics fresh (SQLite's advice on close).
                db.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass  # e.g. locked by another daemon; not worth delaying shutdown
            finally:
                db.close()

    @property
    def closed(self) -> bool:
        return self._db is None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Pending:
    """One store call waiting in a ``_Batch``, and then its outcome."""

    def __init__(self, body: Callable[[sqlite3.Connection], Any]) -> None:
        self.body = body
        self.taken = False  # by the store thread: it will run, even if its caller is cancelled
        self.done = False
        self.promoted = False  # its caller flushes next
        self.woken = anyio.Event()  # done, or promoted
        self.result: Any = None
        self.error: Exception | None = None


class _Batch:
    """Store calls that arrive together run in one transaction and one thread hop (a burst of
    prompts commits its user messages together, instead of one transaction each).

    One caller at a time flushes: it runs everything pending, again until its own call is
    done, then hands the flushing over to the oldest call still pending (so no caller keeps
    flushing for a stream of later ones); the others wait for theirs. A caller cancelled
    before its call was taken withdraws it; once taken, the call finishes (as with
    ``AsyncStore._call``) before the cancellation takes effect.
    """

    def __init__(
        self,
        run: Callable[[list[Callable[[sqlite3.Connection], Any]]], list[tuple[Any, Exception | None]]],
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self._run = run
        self._limiter = limiter  # the store's: batches take their turn with single calls
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()  # the store thread takes the batch
        self._in_flight: list[_Pending] = []  # the batch on the store thread
        self._flushing = False

    async def call(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body``'s result, once the transaction it ran in has committed."""
        call = _Pending(body)
        with self._lock:
            self._pending.append(call)
        if self._flushing:
            try:
                await call.woken.wait()
            except anyio.get_cancelled_exc_class():
                with self._lock:
                    withdrawn = not call.taken
                    if withdrawn:
                        self._pending.remove(call)
                if withdrawn and call.promoted:
                    self._hand_over()
                elif not withdrawn:
                    with anyio.CancelScope(shield=True):
                        await call.woken.wait()
                raise
        if not call.done:  # nobody was flushing, or this caller was promoted
            await self._flush_until(call)
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[no-any-return]

    async def _flush_until(self, call: _Pending) -> None:
        self._flushing = True
        try:
            with anyio.CancelScope(shield=True):  # the others are waiting on this flush
                while not call.done:
                    for done in await anyio.to_thread.run_sync(self._flush, limiter=self._limiter):
                        done.done = True
                        done.woken.set()
        except BaseException as error:  # the thread could not be reached: no waiter may hang
            with self._lock:
                stranded, self._pending = [*self._in_flight, *self._pending], []
            for left in stranded:
                if not left.done:
                    left.error = error if isinstance(error, Exception) else StoreClosed()
                    left.done = True
                    left.woken.set()
            raise
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        """The oldest pending call's caller flushes next; none pending, nobody flushes."""
        with self._lock:
            successor = self._pending[0] if self._pending else None
        self._flushing = successor is not None
        if successor is not None:
            successor.promoted = True
            successor.woken.set()

    def _flush(self) -> list[_Pending]:
        """On the store thread: run every pending call together; return them, answered."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._in_flight = batch
            for call in batch:
                call.taken = True
        try:
            outcomes = self._run([call.body for call in batch])
        except Exception as error:
            outcomes = [(None, error)] * len(batch)
        for call, (result, error) in zip(batch, outcomes, strict=True):
            call.result, call.error = result, error
        return batch


class AsyncStore:
    """``Store`` for the event loop: each call runs on a worker thread, one call at a time.

    Works on asyncio and trio (anyio threads, no aiosqlite). A call that has reached its
    thread finishes even if the caller is cancelled, so a write is never half-observed;
    cancellation while waiting for the previous call still takes effect.
    """

    def __init__(self, store: Store) -> None:
        self.store = store  # the sync store; blocking, so not for use on the event loop
        self._limiter = anyio.CapacityLimiter(1)
        self._closing = False
        # Writes batch with writes; reads with reads, so a read never waits on another
        # process's write lock.
        self._writes = _Batch(lambda bodies: self.store.run_together(bodies, write=True), self._limiter)
        self._reads = _Batch(lambda bodies: self.store.run_together(bodies, write=False), self._limiter)

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> AsyncStore:
        store = await anyio.to_thread.run_sync(functools.partial(Store, path, **options))
        return cls(store)

    @classmethod
    async def open_or_unavailable(cls, path: str | os.PathLike[str], **options: Any) -> AsyncStore:
        """The opened store, or one that answers every call with why it could not be opened."""
        try:
            return await cls.open(path, **options)
        except StoreUnavailable as error:
            return cls(Store.unavailable(path, error.message))

    async def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self._closing:
            raise StoreClosed()
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._limiter)

    async def _together(self, batch: _Batch, body: Callable[[sqlite3.Connection], T]) -> T:
        if self._closing:
            raise StoreClosed()
        return await batch.call(body)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Close after the call in flight; safe to call twice and from cancelled scopes.

        If the store stays busy longer than ``timeout_s`` the connection is left for the
        process exit to drop: WAL keeps the file consistent either way.
        """
        if self._closing:
            return
        self._closing = True
        with anyio.move_on_after(timeout_s, shield=True):
            await anyio.to_thread.run_sync(self.store.close, limiter=self._limiter)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def create_session(self, row: SessionRow) -> SessionRow:
        return await self._call(self.store.create_session, row)

    async def get_session(self, session_id: str) -> SessionRow | None:
        return await self._together(self._reads, functools.partial(Store._fetch_session, session_id=session_id))

    async def list_sessions(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[SessionRow], str | None]:
        return await self._call(self.store.list_sessions, cwd, limit, cursor)

    async def update_session(self, session_id: str, **fields: Any) -> SessionRow:
        return await self._call(self.store.update_session, session_id, **fields)

    async def delete_session(self, session_id: str) -> bool:
        return await self._call(self.store.delete_session, session_id)

    async def fork_session(
        self, source_id: str, new_row: SessionRow, up_to_message_id: str | None = None
    ) -> SessionRow:
        return await self._call(self.store.fork_session, source_id, new_row, up_to_message_id)

    async def save_message(self, message: ChatMessage) -> ChatMessage:
        return await self._together(self._writes, self.store._save_message_body(message))

    async def get_messages(
        self, session_id: str, after_seq: int | None = None, limit: int | None = None
    ) -> list[ChatMessage]:
        return await self._call(self.store.get_messages, session_id, after_seq, limit)

    async def append_to_message(
        self,
        message_id: str,
        parts: dict[int, Part],
        texts: dict[int, str],
        *,
        keep_text: frozenset[int] = frozenset(),
        final: ChatMessage | None = None,
    ) -> None:
        await self._call(self.store.append_to_message, message_id, parts, texts, keep_text=keep_text, final=final)

    async def next_seq(self, session_id: str) -> int:
        return await self._call(self.store.next_seq, session_id)

    async def record_change(self, session_id: str, kind: str, value: str | None) -> None:
        await self._call(self.store.record_change, session_id, kind, value)

    async def get_changes(self, session_id: str) -> list[SessionChange]:
        return await self._call(self.store.get_changes, session_id)

    async def acquire_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        return await self._together(self._writes, self.store._acquire_lease_body(session_id, owner, ttl_s))

    async def renew_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        return await self._call(self.store.renew_lease, session_id, owner, ttl_s)

    async def release_lease(self, session_id: str, owner: str) -> bool:
        return await self._call(self.store.release_lease, session_id, owner)

    async def get_lease(self, session_id: str) -> Lease | None:
        return await self._call(self.store.get_lease, session_id)
