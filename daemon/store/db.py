"""Opening ``sessions.db`` and running transactions on it; the one edge where sqlite3 errors
become the daemon's own.

Owns the file (created 0600 before SQLite sees it; ``-wal``/``-shm`` tightened), the pragmas
(WAL, foreign keys, busy timeout), the schema check and migration on open, ``BEGIN IMMEDIATE``
transactions retried while another process holds the lock, several calls in one transaction
(``run_together``, each in its own savepoint), and closing. A store that cannot be used raises
``StoreUnavailable`` with one sentence naming the cause; a file that is damaged or from a newer
ponder is never written to.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Self, TypeVar

import msgspec

from daemon.config.home import PRIVATE_FILE_MODE, too_open
from daemon.errors import StoreClosed, StoreError, StoreUnavailable
from daemon.store.backend import Body, SqlConnection, StoreBackend, StoreStatus
from daemon.store.migrations import MIGRATIONS, check_not_too_new, migrate, schema_version
from daemon.store.owners import owner_alive

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
MMAP_BYTES = 256 * 1024 * 1024  # the most of sessions.db read through a memory mapping (see ``_configure``)
# busy_timeout already waits inside SQLite; these extra rounds cover the cases it cannot
# (a lock taken while opening, SQLITE_BUSY_SNAPSHOT) without giving up on a long write.
LOCK_RETRIES = 5
LOCK_RETRY_DELAY_S = 0.05

# JSON columns (usage, arguments, round-trip data) and the session cursor.
json_encode = msgspec.json.Encoder().encode


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
    """What ``Database._transaction`` would have raised for ``error`` (a body's own errors pass through)."""
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
            if too_open(os.stat(name).st_mode):
                os.chmod(name, PRIVATE_FILE_MODE)
        except OSError:
            pass  # absent (no WAL yet) or not ours to change


class Database(StoreBackend):
    """One SQLite connection and its transactions; the query classes build ``Store`` on it.

    Safe to call from any thread (calls are serialized by a lock), but each call blocks.
    """

    backend_name = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        problem: str | None = None,
    ) -> None:
        super().__init__(clock)
        self.path = os.fspath(path)
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
    def unavailable(cls, path: str | os.PathLike[str], problem: str) -> Self:
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
        # Reads through memory-mapped I/O: a long history is ~30 MB of pages, which read(2) would
        # copy into SQLite's cache first (~12 ms a 10,000-message resume). Nothing here ever
        # shrinks the file (no VACUUM), the one thing a mapping cannot survive.
        db.execute(f"PRAGMA mmap_size = {MMAP_BYTES:d}")

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

    def _transaction(self, body: Body[T], *, write: bool) -> T:
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

    def _as_store_error(self, error: Exception) -> Exception:
        return _as_store_error(error)

    def _is_unique_violation(self, error: Exception) -> bool:
        return isinstance(error, sqlite3.IntegrityError)

    # --- leases: one machine, its clock, its processes ----------------------------------

    def _lease_now(self, db: SqlConnection) -> float:
        return self._clock()

    def _holder_alive(self, db: SqlConnection, session_id: str, owner: str) -> bool:
        return owner_alive(owner)

    def _stamp_holder(self, db: SqlConnection, session_id: str) -> None:
        pass  # the owner string names the process already

    def status(self) -> StoreStatus:
        def body(db: SqlConnection) -> StoreStatus:
            version = schema_version(db)  # type: ignore[arg-type]
            count = int(db.execute("SELECT count(*) FROM sessions").fetchone()[0])
            return StoreStatus(
                backend="sqlite",
                location=self.path,
                schema_version=version,
                schema_latest=len(MIGRATIONS),
                sessions=count,
            )

        return self._read(body)

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
