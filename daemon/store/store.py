"""``Store``: the synchronous store, one connection, every public method one transaction.

Built from the query classes, one per concern (``SessionQueries``, ``MessageQueries``,
``LeaseQueries``, ``AccountQueries``, ``CompactionQueries``), on ``Database`` (the connection and
its transactions). Blocking: from async code use ``daemon.store.async_store.AsyncStore``.
"""

from __future__ import annotations

from daemon.store.accounts import AccountQueries
from daemon.store.compactions import CompactionQueries
from daemon.store.leases import LeaseQueries
from daemon.store.messages import MessageQueries
from daemon.store.sessions import SessionQueries


class Store(SessionQueries, MessageQueries, LeaseQueries, AccountQueries, CompactionQueries):
    """One SQLite connection; every public method is a complete transaction.

    Safe to call from any thread (calls are serialized by a lock), but each call blocks:
    from async code use ``AsyncStore``.
    """
