"""The session store on a PostgreSQL server (``PostgresStore``): sessions shared by daemons on
several machines. Imported only when a ``postgresql://`` URL is configured (``open``), so the
start-up of a daemon on SQLite never loads psycopg.

Owns the connection (psycopg 3, used synchronously on the store's worker thread as sqlite3 is:
its async connection is asyncio-only and ponder runs on trio too), the dialect adapter the
shared queries see (``?`` placeholders, NUL characters in text kept), transactions (every write
transaction takes one advisory lock first, so writes are serialized as SQLite's ``BEGIN
IMMEDIATE`` serializes them, and the read-then-write queries keep their meaning across
daemons; a transaction left idle by a stopped daemon is ended by the server, so its lock holds
no one up), migrations under an advisory lock (``pg_migrations``), the clock (the server's), the
turn lease's liveness, the error mapping (a sentence naming the host, never the password), and
reconnecting: a lost connection makes the call that found it raise ``StoreUnavailable`` and the
next call connects again.

Nothing relies on the database session outliving a transaction: the locks are transaction
locks, and the settings a transaction needs (``lock_timeout``, the idle-in-transaction timeout,
the origin its notifications carry, and behind a pooler the URL's ``options`` such as ``search_path``) are set in it
(``SET LOCAL``, sent with its ``BEGIN`` in one round trip). So the store also works behind a
connection pooler (``pooler``: ``"transaction"``, as PgBouncer's transaction mode, or
``"session"``), which the configuration must declare: a pooler is detected (the connection's
backend pid, which PgBouncer makes up, is not the server's ``pg_backend_pid()``) and refused
with a sentence saying so when it is not declared. Declared "transaction", the store prepares
no statements; declared either way, the lease holder's liveness is a heartbeat instead of its
backend connection (a pooled backend outlives the daemon that used it): leases held expire
``POOLED_LEASE_TTL_S`` after the last heartbeat, which renews them every ``HEARTBEAT_S``.
``LISTEN`` needs a session of its own: behind a transaction pooler the change feed uses
``listen_url`` (a direct connection), and without one it is off (``notice`` says so).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Literal, Self, TypeVar

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

log = logging.getLogger(__name__)

Pooler = Literal["transaction", "session"]
POOLERS: tuple[Pooler, ...] = ("transaction", "session")

CONNECT_TIMEOUT_S = 5
# How long a statement may wait for a lock (another daemon's write) before the call fails.
LOCK_TIMEOUT_MS = 5000
# A transaction left idle this long (its daemon stopped, paused or wedged between two statements)
# is ended by the server, so the write lock it holds cannot keep every other daemon's writes
# waiting past LOCK_TIMEOUT_MS for good. Well under that timeout, far over any pause of ours.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 2000
# Not more often than this does a call try to connect again after a failure.
RECONNECT_INTERVAL_S = 0.5
# Behind a pooler: a held lease lasts this long past the last heartbeat (a crashed daemon's
# sessions are free this long after it stopped), and the heartbeat renews every lease held this often.
POOLED_LEASE_TTL_S = 4.0
HEARTBEAT_S = 1.0

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


def _option_settings(options: str) -> dict[str, str]:
    """libpq's ``options`` (``-c name=value``, ``-cname=value``, ``--name=value``, backslash
    escapes a space) as settings; ``StoreUnavailable`` for anything else."""
    tokens = [token.replace("\\ ", " ") for token in re.split(r"(?<!\\)\s+", options.strip()) if token]
    settings: dict[str, str] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "-c" and index + 1 < len(tokens):
            index += 1
            token = tokens[index]
        elif token.startswith("-c"):
            token = token[2:]
        elif token.startswith("--"):
            token = token[2:].replace("-", "_")
        else:
            token = ""
        name, equals, value = token.partition("=")
        if not name or not equals:
            raise StoreUnavailable(
                "The store URL's options cannot be passed through a pooler: ponder sets them in each "
                "transaction, and understands only -c name=value settings there."
            )
        settings[name] = value
        index += 1
    return settings


def _quote(value: str) -> str:
    """A string literal (standard_conforming_strings, on since PostgreSQL 9.1)."""
    return "'" + value.replace("'", "''") + "'"


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
            # Sent as a simple query: it may hold several statements (a transaction's BEGIN and settings).
            return self.connection.execute(sql.encode(), prepare=False)
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


class PoolerNotDeclared(StoreUnavailable):
    """The connection goes through a pooler the configuration does not declare."""


def pooler_not_declared(location: str) -> str:
    return (
        f"The PostgreSQL store at {location} is reached through a connection pooler (PgBouncer or the like), "
        'which the configuration does not declare: set [store] pooler = "transaction" (or "session" for a '
        "session-mode pool), or PONDER_STORE_POOLER, so that ponder keeps nothing in a database session "
        "between transactions."
    )


class PostgresDatabase(StoreBackend):
    """One connection to a PostgreSQL store and its transactions; the query classes build
    ``PostgresStore`` on it. Safe to call from any thread (calls are serialized), each call blocks."""

    backend_name = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] | None = None,
        connect: bool = True,
        pooler: Pooler | None = None,
        listen_url: str | None = None,
    ) -> None:
        super().__init__(clock or self._server_clock)
        self.url = url
        self.pooler = pooler
        self.listen_url = listen_url
        for secret in (url_password(url), url_password(listen_url) if listen_url else None):
            if secret:
                redact.remember(secret)
        self.location = describe_url(url)
        # Each store's writes carry this in their notifications: the change feed leaves its own out.
        self.origin = uuid.uuid4().hex[:16]
        self._db: psycopg.Connection[Any] | None = None
        self._closed = False
        self._offset_s = 0.0  # the server's clock minus ours, measured at each connect
        self._write_key = 0
        self._migrate_key = 0
        self.schema = ""
        self.backend_pid = 0
        self.problem: str | None = None
        self.notice: str | None = None
        if pooler == "transaction" and not listen_url:
            self.notice = (
                f"Cross-daemon notifications are off: the PostgreSQL store at {self.location} is reached through "
                "a pooler in transaction mode, where LISTEN cannot work, and no [store] listen_url "
                "(PONDER_STORE_LISTEN_URL) names a direct connection for it; this daemon's clients see another "
                "daemon's changes to a session when this daemon next reads it."
            )
        self._last_attempt = 0.0
        self._connect_lock = threading.Lock()
        self._for_good = False
        # What each transaction sets first (SET LOCAL): nothing is kept in the session between them.
        self._settings = {
            "lock_timeout": str(LOCK_TIMEOUT_MS),
            "idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_TIMEOUT_MS),
            "ponder.origin": self.origin,
        }
        self._connect_url = url
        if pooler is not None:
            # A pooler passes no startup options (PgBouncer refuses or ignores them): the URL's
            # options (search_path, typically) are set in each transaction instead.
            try:
                info = psycopg.conninfo.conninfo_to_dict(url)
            except psycopg.ProgrammingError:
                info = {}
            options = info.pop("options", None)
            if options:
                try:
                    self._settings.update(_option_settings(str(options)))
                except StoreUnavailable as error:
                    self.problem, self._for_good = error.message, True
                self._connect_url = psycopg.conninfo.make_conninfo("", **info)
        self._begin = "BEGIN; SELECT " + ", ".join(
            f"set_config({_quote(name)}, {_quote(value)}, true)" for name, value in self._settings.items()
        )
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        if connect:
            if self._for_good:
                raise StoreUnavailable(self.problem or "")
            self._connect()
        if pooler is not None:
            self._heartbeat = threading.Thread(target=self._beat, name="ponder-lease-heartbeat", daemon=True)
            self._heartbeat.start()

    @classmethod
    def unavailable(cls, url: str, problem: str, *, for_good: bool = False, **options: Any) -> Self:
        """A store whose server could not be reached: each call tries again (not more than every
        ``RECONNECT_INTERVAL_S``) and raises ``StoreUnavailable(problem)`` until it can; with
        ``for_good`` (a URL that names no server, an undeclared pooler) it never tries."""
        store = cls(url, connect=False, **options)
        store.problem = problem
        store._for_good = store._for_good or for_good
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
                self._connect_url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="ponder",
                # A transaction pooler may run each transaction on another server connection: a
                # statement prepared on one is missing (or already there) on the next.
                prepare_threshold=None if self.pooler == "transaction" else 5,
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
            db.execute(self._begin)
            row = db.execute(
                "SELECT extract(epoch FROM clock_timestamp())::float8, current_schema(), pg_backend_pid(), "
                "hashtext(coalesce(current_schema(), '') || '/ponder-write'), "
                "hashtext(coalesce(current_schema(), '') || '/ponder-migrate')"
            ).fetchone()
            db.execute("COMMIT")
            self._offset_s = float(row[0]) - (before + time.time()) / 2
            # libpq's backend pid is the one the server sent at login; a pooler sends one of its own.
            if self.pooler is None and connection.info.backend_pid not in (0, int(row[2])):
                raise PoolerNotDeclared(pooler_not_declared(self.location))
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
            pg_migrate(db, self._migrate_key, begin=self._begin)
            self._reclaim_leases(db)
        except psycopg.Error as error:
            connection.close()
            if isinstance(error, _PREPARED_GONE):
                unavailable = PoolerNotDeclared(pooler_not_declared(self.location))
            else:
                unavailable = StoreUnavailable(f"The PostgreSQL store at {self.location} failed: {_cause(error)}.")
            self.problem = unavailable.message
            raise unavailable from None
        except PoolerNotDeclared as error:
            connection.close()
            self.problem, self._for_good = error.message, True
            raise
        except BaseException:
            connection.close()
            raise
        self._db = connection
        self.problem = None

    def _reclaim_leases(self, db: _PgConnection) -> None:
        """After a reconnect: the leases this store still holds (nobody took them over while its
        connection was gone) are stamped with the new connection, so they read as alive again."""
        if self.pooler is not None:
            return  # the heartbeat keeps them
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
        if isinstance(error, psycopg.Error) and (self._db is None or self._db.closed or self._db.broken):
            return self._lost(error)
        if isinstance(error, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
            doing = "written" if write else "read"
            return StoreUnavailable(
                f"The session store could not be {doing}: another daemon held its lock for more than "
                f"{LOCK_TIMEOUT_MS / 1000:g} s."
            )
        if isinstance(error, _PREPARED_GONE):
            # A statement prepared on one server connection, run on another: a transaction pooler
            # the configuration calls a session pooler.
            return StoreUnavailable(
                f"The PostgreSQL store at {self.location} lost a prepared statement between transactions: "
                'the pooler in front of it runs in transaction mode; set [store] pooler = "transaction".'
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
            # BEGIN, the transaction's settings and (for a write) the store's write lock, in one
            # round trip. One writer at a time per store, as SQLite's BEGIN IMMEDIATE: the
            # read-then-write queries (a lease, totals, a seq) keep their meaning across daemons.
            db.execute(f"{self._begin}; SELECT pg_advisory_xact_lock({self._write_key:d})" if write else self._begin)
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
            elif not committing and isinstance(error, psycopg.Error):
                # Any error that left the connection closed (a lost server, or one that ended the
                # session: an idle-in-transaction timeout is an InternalError) rolled it back.
                raise _BrokenBeforeCommit() from error
            if isinstance(error, Exception):
                converted = self._converted(error, write=write)
                if converted is not error:
                    raise converted from None
            raise

    def _is_unique_violation(self, error: Exception) -> bool:
        return isinstance(error, psycopg.errors.UniqueViolation)

    # --- leases: the server's clock, the holder's connection or heartbeat ------------------------

    def _lease_now(self, db: SqlConnection) -> float:
        return float(db.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0])

    def _holder_alive(self, db: SqlConnection, session_id: str, owner: str) -> bool:
        # A holder behind a pooler records no backend (NULL): its lease lives as long as its heartbeat.
        row = db.execute(
            "SELECT l.holder_pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_activity AS a "
            "WHERE a.pid = l.holder_pid AND a.backend_start = l.holder_started) "
            "FROM turn_leases AS l WHERE l.session_id = ?",
            (session_id,),
        ).fetchone()
        return bool(row[0]) if row is not None else False

    def _stamp_holder(self, db: SqlConnection, session_id: str) -> None:
        if self.pooler is not None:
            # The backend is the pooler's, shared and outliving this daemon: liveness is the heartbeat.
            db.execute(
                "UPDATE turn_leases SET holder_pid = NULL, holder_started = NULL, "
                "expires_at = LEAST(expires_at, extract(epoch FROM clock_timestamp()) + ?) WHERE session_id = ?",
                (POOLED_LEASE_TTL_S, session_id),
            )
            return
        db.execute(
            "UPDATE turn_leases SET holder_pid = pg_backend_pid(), holder_started = "
            "(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) WHERE session_id = ?",
            (session_id,),
        )

    def _beat(self) -> None:
        """Behind a pooler, until closed: renew the leases this store holds every ``HEARTBEAT_S``."""
        while not self._heartbeat_stop.wait(HEARTBEAT_S):
            if self._fences and not self._closed:
                try:
                    self.renew_leases()
                except Exception as error:  # an unreachable server: the leases lapse, as they must
                    log.debug("lease heartbeat failed: %s", redact.scrub(str(error)))

    def renew_leases(self) -> None:
        """Push the expiry of every lease this store holds ``POOLED_LEASE_TTL_S`` past now."""

        def body(db: SqlConnection) -> None:
            for session_id, (owner, epoch) in list(self._fences.items()):
                db.execute(
                    "UPDATE turn_leases SET expires_at = extract(epoch FROM clock_timestamp()) + ? "
                    "WHERE session_id = ? AND owner = ? AND epoch = ?",
                    (POOLED_LEASE_TTL_S, session_id, owner, epoch),
                )

        self._write(body)

    def change_feed(self) -> PostgresChangeFeed | None:
        if self.pooler == "transaction" and not self.listen_url:
            return None  # LISTEN needs a session of its own (``notice`` says so)
        return PostgresChangeFeed(self, self.listen_url or self._connect_url)

    # --- what it is ----------------------------------------------------------------------------

    def notifications(self) -> str:
        """How other daemons' changes reach this one, as ``ponder store status`` says it."""
        if self.pooler == "transaction" and not self.listen_url:
            return "off (behind a transaction pooler, with no listen_url)"
        if self.listen_url:
            return f"LISTEN at {describe_url(self.listen_url)}"
        return "LISTEN"

    def status(self) -> StoreStatus:
        def body(db: SqlConnection) -> StoreStatus:
            return StoreStatus(
                backend="postgresql",
                location=f"{self.location} (schema {self.schema})",
                schema_version=pg_schema_version(db),
                schema_latest=len(PG_MIGRATIONS),
                sessions=int(db.execute("SELECT count(*) FROM sessions").fetchone()[0]),
                pooler=self.pooler or "none",
                notifications=self.notifications(),
            )

        return self._read(body)

    def close(self) -> None:
        self._heartbeat_stop.set()
        with self._lock:
            self._closed = True
            connection, self._db = self._db, None
            _close_quietly(connection)

    @property
    def closed(self) -> bool:
        return self._closed


_KINDS = {"I": "updated", "U": "updated", "D": "deleted"}
# psycopg's errors for a prepared statement missing (or already there) on the connection a pooler chose.
_PREPARED_GONE = (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement)


class PostgresChangeFeed:
    """``LISTEN "ponder.<schema>"`` on a connection of its own (``url``: the store's, or its
    ``listen_url``); the triggers of ``pg_migrations`` notify on commit, naming the writer's
    origin. The store's own writes are left out: the daemon tells its clients of those itself.
    A cut connection is opened again (not more often than every ``RECONNECT_INTERVAL_S``), then
    ``resync`` says changes may have been missed."""

    def __init__(self, store: PostgresDatabase, url: str) -> None:
        self._store = store
        self._url = url
        self._db: psycopg.Connection[Any] | None = None
        self._cut = False  # was connected, lost it: the next connection reports a resync
        self._closed = False
        self._lock = threading.Lock()

    def _connect(self) -> psycopg.Connection[Any]:
        connection = psycopg.connect(
            self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="ponder-listen"
        )
        channel = f"ponder.{self._store.schema}"  # the store's schema: a listen_url may name no search_path
        connection.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        return connection

    def wait(self, timeout_s: float) -> list[StoreChange]:
        with self._lock:
            if self._closed:
                return []
            changes: list[StoreChange] = []
            if self._db is None or self._db.closed:
                if not self._store.schema:  # the store has not connected yet: its schema is unknown
                    time.sleep(min(timeout_s, RECONNECT_INTERVAL_S))
                    return []
                try:
                    self._db = self._connect()
                except psycopg.Error:
                    time.sleep(min(timeout_s, RECONNECT_INTERVAL_S))
                    return []
                if self._cut:
                    self._cut = False
                    changes.append(StoreChange("resync"))
            own = self._store.origin
            try:
                for notify in self._db.notifies(timeout=timeout_s, stop_after=1):
                    op, origin, session_id = [*notify.payload.split(":", 2), "", ""][:3]
                    if origin != own and op in _KINDS and session_id:
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
    when the server cannot be reached or refuses the login (never: an undeclared pooler)."""
    if not is_postgres_url(url):
        return PostgresStore.unavailable(
            url,
            "The store URL must name a PostgreSQL server (postgresql://… or libpq's key=value form).",
            for_good=True,
            **options,
        )
    try:
        return PostgresStore(url, **options)
    except PoolerNotDeclared as error:
        return PostgresStore.unavailable(url, error.message, for_good=True, **options)
    except StoreUnavailable as error:
        return PostgresStore.unavailable(url, error.message, **options)


def _close_quietly(connection: psycopg.Connection[Any] | None) -> None:
    """Close a connection that is being let go; one already broken may fail to close, which changes nothing."""
    if connection is not None:
        try:
            connection.close()
        except psycopg.Error:
            pass
