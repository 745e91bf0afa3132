"""``StoreQueries``: the synchronous store, one connection, every public method one transaction;
``Store``: it on SQLite.

Built from the query classes, one per concern (``SessionQueries``, ``MessageQueries``,
``LeaseQueries``, ``AccountQueries``, ``CompactionQueries``), on a ``StoreBackend`` (the
connection and its transactions): ``Store`` on ``db.Database`` (SQLite), ``PostgresStore`` (in
``postgres``, imported only when a PostgreSQL URL is configured) on ``PostgresDatabase``.
Blocking: from async code use ``daemon.store.async_store.AsyncStore``.
"""

from __future__ import annotations

import msgspec

from daemon.conversation import ChatMessage
from daemon.store.accounts import AccountQueries
from daemon.store.backend import Body, SqlConnection
from daemon.store.compactions import CompactionQueries
from daemon.store.db import Database
from daemon.store.leases import LeaseQueries
from daemon.store.messages import MessageQueries
from daemon.store.sessions import SessionQueries, SessionRow


class Admission(msgspec.Struct, frozen=True):
    """What ``Store.admit`` did: ``leased`` False, another process holds the turn lease (nothing
    else was done); else the lease is ours and ``row`` is the session as stored before the
    message (None: it was deleted), and ``saved`` says whether the message was stored (not when
    the stored session has other messages than the caller knew of: it catches up first)."""

    leased: bool
    row: SessionRow | None = None
    saved: bool = False


class StoreQueries(SessionQueries, MessageQueries, LeaseQueries, AccountQueries, CompactionQueries):
    """Every query of the store, on whichever backend it is mixed with; every public method is a
    complete transaction.

    Safe to call from any thread (calls are serialized by a lock), but each call blocks:
    from async code use ``AsyncStore``.
    """

    def admit(self, message: ChatMessage, owner: str, ttl_s: float, known_count: int) -> Admission:
        """Take the session's turn lease for ``owner``, read its row and, when it still holds the
        ``known_count`` messages the caller has, store ``message``: one transaction."""
        return self._write(self._admit_body(message, owner, ttl_s, known_count))

    def _admit_body(self, message: ChatMessage, owner: str, ttl_s: float, known_count: int) -> Body[Admission]:
        take_lease = self._acquire_lease_body(message.session_id, owner, ttl_s)
        save = self._save_message_body(message)

        def body(db: SqlConnection) -> Admission:
            if not take_lease(db):
                return Admission(leased=False)
            row = self._fetch_session(db, message.session_id)
            if row is None or row.message_count != known_count:
                return Admission(leased=True, row=row)
            save(db)
            return Admission(leased=True, row=row, saved=True)

        return body


class Store(StoreQueries, Database):
    """The store in one SQLite file (``sessions.db``), the embedded default."""
