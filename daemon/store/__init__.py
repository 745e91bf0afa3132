"""The session store: sessions, their messages and parts, model/thinking changes, turn leases,
accounts and compaction records, in ``sessions.db`` (SQLite).

``Store`` is synchronous and holds one connection; ``AsyncStore`` runs every call on a worker
thread, one at a time, so the event loop (asyncio or trio) never blocks on disk. Several
daemons may share one file: every write is one ``BEGIN IMMEDIATE`` transaction, lock
contention waits on ``busy_timeout`` and is retried, and a turn is guarded across processes by
a lease row. sqlite3 errors become ``StoreError`` at the one edge (``db``); callers see the
daemon's own exception hierarchy only (``daemon.errors``).

Modules: ``db`` (opening, pragmas, file modes, transactions, lock retries), ``migrations``
(the schema), ``sessions``, ``messages`` (with incremental checkpoints), ``leases``, ``accounts``
(a session's totals, cost, context fill and budget), ``compactions`` (one row per compaction
record) (queries and row mapping, one concern each), ``store`` (``Store`` built from them), ``batch`` (calls
that arrive together share a transaction), ``async_store`` (``AsyncStore``). This module only
re-exports.
"""

from daemon.errors import StoreClosed, StoreError, StoreUnavailable
from daemon.store.async_store import AsyncStore
from daemon.store.leases import new_lease_owner, process_start_time
from daemon.store.sessions import SessionChange, SessionRow
from daemon.store.store import Store

__all__ = [
    "AsyncStore",
    "SessionChange",
    "SessionRow",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreUnavailable",
    "new_lease_owner",
    "process_start_time",
]
