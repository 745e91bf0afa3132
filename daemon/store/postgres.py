"""The session store on a PostgreSQL server (``PostgresStore``): sessions shared by daemons on
several machines. Imported only when a ``postgresql://`` URL is configured (``open``), so the
start-up of a daemon on SQLite never loads psycopg.

Owns the connection (psycopg 3, used synchronously on the store's worker thread as sqlite3 is:
its async connection is asyncio-only and ponder runs on trio too), the dialect adapter the
shared queries see (``?`` placeholders, NUL characters in text kept), transactions (every write
transaction takes one advisory lock first, so writes are serialized as SQLite's ``BEGIN
IMMEDIATE`` serializes them, and the read-then-write queries keep their meaning across
daemons), migrations under an advisory lock (``pg_migrations``), the clock (the server's), the
turn lease's liveness (the holder's backend connection, from ``pg_stat_activity``), the error
mapping (a sentence naming the host, never the password), and reconnecting: a lost connection
makes the call that found it raise ``StoreUnavailable`` and the next call connects again.
"""

from __future__ import annotations

import functools
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any, Self, TypeVar

import msgspec
import psycopg
import psycopg.errors
import psycopg.sql
from psycopg.adapt import Buffer
from psycopg.types.string import StrDumperUnknown, TextLoader

from daemon.errors import StoreClosed, StoreError, StoreUnavailable
from daemon.store.backend import Body, SqlConnection, SqlCursor, StoreBackend, StoreStatus
from daemon.store.changes import StoreChange
from daemon.store.pg_migrations import PG_MIGRATIONS, pg_migrate, pg_schema_version
from daemon.store.store import StoreQueries
from daemon.util import redact

T = TypeVar("T")

CONNECT_TIMEOUT_S = 5
# How long a statement may wait for a lock (another daemon's write) before the call fails.
LOCK_TIMEOUT_MS = 5000
# Not more often than this does a call try to connect again after a failure.
RECONNECT_INTERVAL_S = 0.5

# --- URLs: where, never the password -----------------------------------------------------------


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL server (a URL, or libpq's key=value form)."""
    text = url.strip()
    return text.startswith(("postgresql://", "postgres://")) or ("=" in text and "://" not in text)


def url_password(url: str) -> str | None:
    """The password written in ``url``, if any (to be masked wherever text leaves the daemon)."""
    text = url.strip()
    if "://" in text:
        parsed = urllib.parse.urlsplit(text)
        found = parsed.password
        if found is None:
            query = urllib.parse.parse_qs(parsed.query)
            found = query["password"][0] if query.get("password") else None
        return urllib.parse.unquote(found) if found else None
    match = re.search(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", text)
    if match is None:
        return None
    value = match.group(1)
    return value[1:-1].replace("\\'", "'").replace("\\\\", "\\") if value.startswith("'") else value


def describe_url(url: str) -> str:
    """Where ``url`` points, as a person reads it: ``user@host:port/database`` (no password)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "a PostgreSQL server (the URL does not parse)"
    host = str(info.get("host") or "localhost")
    port = str(info.get("port") or "5432")
    where = f"{host}:{port}" if not host.startswith("/") else f"{host} (socket, port {port})"
    user = f"{info['user']}@" if info.get("user") else ""
    database = str(info.get("dbname") or info.get("user") or "")
    return f"{user}{where}/{database}"


# --- NUL in text: PostgreSQL's text cannot hold U+0000, ponder's text can ------------------------

_ESCAPE = "\uffff"  # a noncharacter: text from models and people practically never holds it
_UNESCAPE = re.compile(_ESCAPE + "(.)", re.DOTALL)


def escape_text(text: str) -> str:
    if "\x00" not in text and _ESCAPE not in text:
        return text
    return text.replace(_ESCAPE, _ESCAPE + _ESCAPE).replace("\x00", _ESCAPE + "0")


def unescape_text(text: str) -> str:
    if _ESCAPE not in text:
        return text
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), text)


class _NulStrDumper(StrDumperUnknown):
    def dump(self, obj: str) -> Buffer | None:
        return escape_text(obj).encode("utf-8")


class _NulTextLoader(TextLoader):
    def load(self, data: Buffer) -> str:
        return unescape_text(str(bytes(data), "utf-8"))


# --- the connection the queries see ----------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _dialect(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled first)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _PgConnection:
    """``SqlConnection`` over a psycopg connection."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    def execute(self, sql: str, parameters: Any = (), /) -> SqlCursor:
        if not parameters:
            return self.connection.execute(sql.encode())
        return self.connection.execute(_dialect(sql).encode(), parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> SqlCursor:
        cursor = self.connection.cursor()
        rows = list(parameters)
        if rows:
            cursor.executemany(_dialect(sql).encode(), rows)
        return cursor


# --- errors ------------------------------------------------------------------------------------


def _cause(error: psycopg.Error) -> str:
    """The server's or libpq's own words, on one line, never the password."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return redact.scrub(text)


class _BrokenBeforeCommit(Exception):
    """The connection was lost before the call's transaction was sent to commit."""


class PostgresDatabase(StoreBackend):
    """One connection to a PostgreSQL store and its transactions; the query classes build
    ``PostgresStore`` on it. Safe to call from any thread (calls are serialized), each call blocks."""

    backend_name = "postgresql"

    def __init__(self, url: str, *, clock: Callable[[], float] | None = None, connect: bool = True) -> None:
        super().__init__(clock or self._server_clock)
        self.url = url
        password = url_password(url)
        if password:
            redact.remember(password)
        self.location = describe_url(url)
        self._db: psycopg.Connection[Any] | None = None
        self._closed = False
        self._offset_s = 0.0  # the server's clock minus ours, measured at each connect
        self._write_key = 0
        self._migrate_key = 0
        self.schema = ""
        self.backend_pid = 0
        self.problem: str | None = None
        self._last_attempt = 0.0
        self._connect_lock = threading.Lock()
        self._for_good = False
        if connect:
            self._connect()

    @classmethod
    def unavailable(cls, url: str, problem: str, *, for_good: bool = False) -> Self:
        """A store whose server could not be reached: each call tries again (not more than every
        ``RECONNECT_INTERVAL_S``) and raises ``StoreUnavailable(problem)`` until it can; with
        ``for_good`` (a URL that names no server) it never tries."""
        store = cls(url, connect=False)
        store.problem = problem
        store._for_good = for_good
        store._last_attempt = time.monotonic()
        return store

    # --- connecting ----------------------------------------------------------------------

    def _unreachable(self, error: psycopg.Error) -> StoreUnavailable:
        cause = _cause(error)
        if "authentication failed" in cause or "password" in cause.lower():
            return StoreUnavailable(f"The PostgreSQL store at {self.location} refused the login: {cause}.")
        return StoreUnavailable(f"The PostgreSQL store at {self.location} cannot be reached: {cause}.")

    def _connect(self) -> None:
        self._last_attempt = time.monotonic()
        try:
            connection = psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="ponder"
            )
        except psycopg.Error as error:
            unavailable = self._unreachable(error)
            self.problem = unavailable.message
            raise unavailable from None  # psycopg's error may quote the connection string
        try:
            connection.adapters.register_dumper(str, _NulStrDumper)
            connection.adapters.register_loader("text", _NulTextLoader)
            db = _PgConnection(connection)
            before = time.time()
            row = db.execute(
                "SELECT extract(epoch FROM clock_timestamp())::float8, current_schema(), pg_backend_pid(), "
                "hashtext(coalesce(current_schema(), '') || '/ponder-write'), "
                "hashtext(coalesce(current_schema(), '') || '/ponder-migrate')"
            ).fetchone()
            self._offset_s = float(row[0]) - (before + time.time()) / 2
            if row[1] is None:
                raise StoreUnavailable(
                    f"The PostgreSQL store at {self.location} has no schema to write to "
                    "(create one, or set search_path in the URL's options)."
                )
            self.schema, self.backend_pid, self._write_key, self._migrate_key = (
                str(row[1]),
                int(row[2]),
                int(row[3]),
                int(row[4]),
            )
            db.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS:d}")
            pg_migrate(db, self._migrate_key)
            self._reclaim_leases(db)
        except psycopg.Error as error:
            connection.close()
            unavailable = StoreUnavailable(f"The PostgreSQL store at {self.location} failed: {_cause(error)}.")
            self.problem = unavailable.message
            raise unavailable from None
        except BaseException:
            connection.close()
            raise
        self._db = connection
        self.problem = None

    def _reclaim_leases(self, db: _PgConnection) -> None:
        """After a reconnect: the leases this store still holds (nobody took them over while its
        connection was gone) are stamped with the new connection, so they read as alive again."""
        for session_id, (owner, epoch) in list(self._fences.items()):
            db.execute(
                "UPDATE turn_leases SET holder_pid = pg_backend_pid(), holder_started = "
                "(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) "
                "WHERE session_id = ? AND owner = ? AND epoch = ?",
                (session_id, owner, epoch),
            )

    def _connection(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StoreClosed()
        if self._db is not None and not self._db.closed:
            return self._db
        self._db = None
        with self._connect_lock:
            if self.problem is not None and (
                self._for_good or time.monotonic() - self._last_attempt < RECONNECT_INTERVAL_S
            ):
                raise StoreUnavailable(self.problem)
            self._connect()
        assert self._db is not None
        return self._db

    def _server_clock(self) -> float:
        return time.time() + self._offset_s

    # --- transactions ------------------------------------------------------------------------

    def _lost(self, error: psycopg.Error) -> StoreUnavailable:
        """The connection broke under a call: forget it (the next call connects again)."""
        broken, self._db = self._db, None
        _close_quietly(broken)
        unavailable = StoreUnavailable(
            f"The PostgreSQL store at {self.location} could not be reached: {_cause(error)}."
        )
        self.problem = unavailable.message
        self._last_attempt = time.monotonic()
        return unavailable

    def _converted(self, error: Exception, *, write: bool) -> Exception:
        if isinstance(error, psycopg.OperationalError) and (self._db is None or self._db.closed or self._db.broken):
            return self._lost(error)
        if isinstance(error, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
            doing = "written" if write else "read"
            return StoreUnavailable(
                f"The session store could not be {doing}: another daemon held its lock for more than "
                f"{LOCK_TIMEOUT_MS / 1000:g} s."
            )
        if isinstance(error, psycopg.errors.DiskFull):
            return StoreUnavailable("The PostgreSQL store could not be written: its disk is full.")
        if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
            return StoreUnavailable("The PostgreSQL store could not be written: the server is read-only.")
        if isinstance(error, psycopg.OperationalError):
            return StoreUnavailable(f"The PostgreSQL store at {self.location} failed: {_cause(error)}.")
        if isinstance(error, psycopg.Error):
            return StoreError(f"The session database failed: {_cause(error)}")
        if isinstance(error, msgspec.DecodeError | msgspec.ValidationError):
            return StoreUnavailable("The PostgreSQL store holds a malformed JSON value; ponder leaves it untouched.")
        return error

    def _as_store_error(self, error: Exception) -> Exception:
        converted = self._converted(error, write=True)
        if converted is not error:
            converted.__cause__ = error
        return converted

    def _transaction(self, body: Body[T], *, write: bool) -> T:
        with self._lock:
            try:
                return self._attempt(body, write=write)
            except _BrokenBeforeCommit:
                # The connection died before the call could commit (idle, a server restart, a
                # killed backend): the server rolled it back, so it runs once more on a new one.
                self._db, self.problem = None, None
                try:
                    return self._attempt(body, write=write)
                except _BrokenBeforeCommit as again:
                    cause = again.__cause__
                    assert isinstance(cause, psycopg.Error)
                    raise self._lost(cause) from None

    def _attempt(self, body: Body[T], *, write: bool) -> T:
        connection = self._connection()
        db = _PgConnection(connection)
        committing = False
        try:
            db.execute("BEGIN")
            if write:
                # One writer at a time per store, as SQLite's BEGIN IMMEDIATE: the read-then-write
                # queries (a lease, totals, a seq) keep their meaning across daemons.
                db.execute("SELECT pg_advisory_xact_lock(?)", (self._write_key,))
            result = body(db)
            committing = True  # from here a lost connection leaves the outcome unknown: no retry
            db.execute("COMMIT")
            return result
        except BaseException as error:
            if not connection.closed and not connection.broken:
                try:
                    db.execute("ROLLBACK")
                except psycopg.Error:
                    pass
            elif not committing and isinstance(error, psycopg.OperationalError):
                raise _BrokenBeforeCommit() from error
            if isinstance(error, Exception):
                converted = self._converted(error, write=write)
                if converted is not error:
                    raise converted from None
            raise

    def _is_unique_violation(self, error: Exception) -> bool:
        return isinstance(error, psycopg.errors.UniqueViolation)

    # --- leases: the server's clock, the holder's connection --------------------------------------

    def _lease_now(self, db: SqlConnection) -> float:
        return float(db.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0])

    def _holder_alive(self, db: SqlConnection, session_id: str, owner: str) -> bool:
        row = db.execute(
            "SELECT l.holder_pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_activity AS a "
            "WHERE a.pid = l.holder_pid AND a.backend_start = l.holder_started) "
            "FROM turn_leases AS l WHERE l.session_id = ?",
            (session_id,),
        ).fetchone()
        return bool(row[0]) if row is not None else False

    def _stamp_holder(self, db: SqlConnection, session_id: str) -> None:
        db.execute(
            "UPDATE turn_leases SET holder_pid = pg_backend_pid(), holder_started = "
            "(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) WHERE session_id = ?",
            (session_id,),
        )

    def change_feed(self) -> PostgresChangeFeed:
        return PostgresChangeFeed(self)

    # --- what it is ----------------------------------------------------------------------------

    def status(self) -> StoreStatus:
        def body(db: SqlConnection) -> StoreStatus:
            return StoreStatus(
                backend="postgresql",
                location=f"{self.location} (schema {self.schema})",
                schema_version=pg_schema_version(db),
                schema_latest=len(PG_MIGRATIONS),
                sessions=int(db.execute("SELECT count(*) FROM sessions").fetchone()[0]),
            )

        return self._read(body)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connection, self._db = self._db, None
            _close_quietly(connection)

    @property
    def closed(self) -> bool:
        return self._closed


_KINDS = {"I": "updated", "U": "updated", "D": "deleted"}


class PostgresChangeFeed:
    """``LISTEN "ponder.<schema>"`` on a connection of its own; the triggers of ``pg_migrations``
    notify on commit. The store's own writes (sent from its connection's backend) are left out:
    the daemon tells its clients of those itself. A cut connection is opened again (not more
    often than every ``RECONNECT_INTERVAL_S``), then ``resync`` says changes may have been missed."""

    def __init__(self, store: PostgresDatabase) -> None:
        self._store = store
        self._db: psycopg.Connection[Any] | None = None
        self._cut = False  # was connected, lost it: the next connection reports a resync
        self._closed = False
        self._lock = threading.Lock()

    def _connect(self) -> psycopg.Connection[Any]:
        connection = psycopg.connect(
            self._store.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="ponder-listen"
        )
        schema = connection.execute("SELECT current_schema()").fetchone()
        channel = f"ponder.{schema[0] if schema else ''}"
        connection.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        return connection

    def wait(self, timeout_s: float) -> list[StoreChange]:
        with self._lock:
            if self._closed:
                return []
            changes: list[StoreChange] = []
            if self._db is None or self._db.closed:
                try:
                    self._db = self._connect()
                except psycopg.Error:
                    time.sleep(min(timeout_s, RECONNECT_INTERVAL_S))
                    return []
                if self._cut:
                    self._cut = False
                    changes.append(StoreChange("resync"))
            own = self._store.backend_pid
            try:
                for notify in self._db.notifies(timeout=timeout_s, stop_after=1):
                    op, _, session_id = notify.payload.partition(":")
                    if notify.pid != own and op in _KINDS and session_id:
                        changes.append(StoreChange(_KINDS[op], session_id))  # type: ignore[arg-type]
            except psycopg.Error:
                self._cut = True
                self._drop()
            if self._closed:  # closed while this waited
                self._drop()
            return changes

    def _drop(self) -> None:
        connection, self._db = self._db, None
        _close_quietly(connection)

    def close(self) -> None:
        """Stop; never waits for a ``wait`` in progress (that one closes the connection as it returns)."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._lock.release()


class PostgresStore(StoreQueries, PostgresDatabase):
    """The store on a PostgreSQL server."""


def open_store(url: str, **options: Any) -> PostgresStore:
    """The store at ``url``; one that answers every call with why (and keeps trying to connect)
    when the server cannot be reached or refuses the login."""
    if not is_postgres_url(url):
        return PostgresStore.unavailable(
            url,
            "The store URL must name a PostgreSQL server (postgresql://… or libpq's key=value form).",
            for_good=True,
        )
    try:
        return PostgresStore(url, **options)
    except StoreUnavailable as error:
        return PostgresStore.unavailable(url, error.message)


def _close_quietly(connection: psycopg.Connection[Any] | None) -> None:
    """Close a connection that is being let go; one already broken may fail to close, which changes nothing."""
    if connection is not None:
        try:
            connection.close()
        except psycopg.Error:
            pass
