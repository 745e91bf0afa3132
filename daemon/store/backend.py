"""What the query classes stand on, whichever engine holds the sessions: ``StoreBackend``.

The store has two backends, SQLite (``db.Database``, the embedded default) and PostgreSQL
(``postgres.PostgresDatabase``, when a ``postgresql://`` URL is configured). The row mapping,
the queries and the invariants are shared (``sessions``, ``messages``, ``leases``, ``accounts``,
``compactions``); each backend owns its connection, its transactions, its SQL dialect's
differences, its migrations, its error mapping and its clock. Query bodies see one
``SqlConnection``: ``execute`` / ``executemany`` with ``?`` placeholders and rows as tuples.

Also owned here: the turn's fence. A daemon that takes a session's turn lease remembers the
lease's epoch; every write of the turn (a message, a checkpoint, an account, a compaction, a
plan) checks in its own transaction that the lease still names this owner and epoch, and
raises ``LeaseLost`` otherwise (another daemon took the session over).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, Self, TypeVar

import msgspec

from daemon.errors import LeaseLost, SessionNotFound
from daemon.store.changes import ChangeFeed
from daemon.util.clock import rfc3339

T = TypeVar("T")


class SqlCursor(Protocol):
    """The part of a DB-API cursor the queries use."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class SqlConnection(Protocol):
    """The connection a query body gets, inside its transaction: ``?`` placeholders, tuple rows."""

    def execute(self, sql: str, parameters: Any = ..., /) -> SqlCursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> SqlCursor: ...


Body = Callable[[SqlConnection], T]


class StoreStatus(msgspec.Struct, kw_only=True):
    """What ``ponder store status`` says: which store, where (never a password), its schema."""

    backend: str  # "sqlite" | "postgresql"
    location: str
    schema_version: int
    schema_latest: int
    sessions: int
    pooler: str = "none"  # "none" | "transaction" | "session" (PostgreSQL behind a connection pooler)
    notifications: str = "none"  # how other daemons' changes reach this one


class StoreBackend(ABC):
    """One connection to the session store and its transactions; every public method of the
    query classes built on it is one transaction. Safe to call from any thread (calls are
    serialized by a lock), but each call blocks."""

    backend_name: str = ""
    # Why the store cannot be used (it could not be opened, or its server cannot be reached):
    # initialize reports it; None when it can.
    problem: str | None = None
    # What works less well than it could with this configuration (the store is usable): initialize
    # reports it beside the problems; None when nothing does.
    notice: str | None = None

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        # session id -> (owner, epoch) of the turn leases this store took and still holds.
        self._fences: dict[str, tuple[str, int]] = {}

    # --- what each backend provides ---------------------------------------------------------

    @abstractmethod
    def _transaction(self, body: Body[T], *, write: bool) -> T:
        """Run ``body`` in one transaction (a write one takes the store's write lock first)."""

    @abstractmethod
    def _as_store_error(self, error: Exception) -> Exception:
        """What ``_transaction`` would raise for ``error``, a body's failure (its own errors pass through)."""

    @abstractmethod
    def _is_unique_violation(self, error: Exception) -> bool:
        """Whether ``error`` is the engine refusing a duplicate key (a taken id or ``seq``)."""

    @abstractmethod
    def _lease_now(self, db: SqlConnection) -> float:
        """Now, in Unix seconds, on the clock every daemon sharing this store agrees on."""

    @abstractmethod
    def _holder_alive(self, db: SqlConnection, session_id: str, owner: str) -> bool:
        """Whether the daemon holding ``session_id``'s lease as ``owner`` is still there."""

    @abstractmethod
    def _stamp_holder(self, db: SqlConnection, session_id: str) -> None:
        """Record on the lease just taken what ``_holder_alive`` needs to tell this daemon is alive."""

    @abstractmethod
    def status(self) -> StoreStatus:
        """Which store this is, where, and its schema version."""

    def change_feed(self) -> ChangeFeed | None:
        """Other daemons' changes to this store, as they commit; None where the backend has no feed."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Close the connection; later calls raise ``StoreClosed``. Idempotent."""

    @property
    @abstractmethod
    def closed(self) -> bool: ...

    # --- shared -----------------------------------------------------------------------------

    def run_together(self, bodies: list[Body[Any]], *, write: bool) -> list[tuple[Any, Exception | None]]:
        """Run ``bodies`` in one transaction, each in its own savepoint, and return each one's
        (result, error): a body that fails rolls back only its own writes, the others commit
        together. An error of the transaction itself (closed, locked, disk full) raises."""

        def body(db: SqlConnection) -> list[tuple[Any, Exception | None]]:
            outcomes: list[tuple[Any, Exception | None]] = []
            for item in bodies:
                db.execute("SAVEPOINT together")
                try:
                    outcomes.append((item(db), None))
                except Exception as error:
                    db.execute("ROLLBACK TO SAVEPOINT together")
                    outcomes.append((None, self._as_store_error(error)))
                db.execute("RELEASE SAVEPOINT together")
            return outcomes

        return self._transaction(body, write=write)

    def check(self) -> None:
        """One empty read: ``StoreUnavailable`` when the store cannot be used (a backend that
        lost its server connects again here)."""
        self._read(lambda db: None)

    def _write(self, body: Body[T]) -> T:
        return self._transaction(body, write=True)

    def _read(self, body: Body[T]) -> T:
        # A read transaction gives multi-query reads one consistent snapshot.
        return self._transaction(body, write=False)

    def _now(self) -> str:
        return rfc3339(self._clock())

    @staticmethod
    def _require_session(db: SqlConnection, session_id: str) -> None:
        """The check a write naming a session makes first: ``SessionNotFound`` if it is gone."""
        if db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise SessionNotFound(session_id)

    def _check_fence(self, db: SqlConnection, session_id: str) -> None:
        """In a write of a turn: ``LeaseLost`` when this store took the session's lease and the
        lease no longer names its owner and epoch (another daemon took it over)."""
        fence = self._fences.get(session_id)
        if fence is None:
            return  # not a turn of ours (an edit, a write outside any lease)
        held = db.execute("SELECT owner, epoch FROM turn_leases WHERE session_id = ?", (session_id,)).fetchone()
        if held is None or (str(held[0]), int(held[1])) != fence:
            raise LeaseLost(session_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
