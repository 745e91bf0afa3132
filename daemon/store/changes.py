"""Changes made by other daemons sharing the store, as the store reports them (``ChangeFeed``):
coarse, one per session and transaction, after the commit. PostgreSQL has a feed (``LISTEN``
/ ``NOTIFY``, ``postgres.PostgresChangeFeed``); SQLite has none: daemons sharing a home read the
file's state when they next need it, as before.
"""

from __future__ import annotations

from typing import Literal, Protocol

import msgspec

ChangeKind = Literal["updated", "deleted", "resync"]


class StoreChange(msgspec.Struct, frozen=True):
    """``updated``: a session's row, messages, compactions or account changed; ``deleted``: it is
    gone; ``resync``: the feed was cut and is back, so changes may have been missed (every
    session should be read again). ``session_id`` is empty for ``resync``."""

    kind: ChangeKind
    session_id: str = ""


class ChangeFeed(Protocol):
    """Another daemon's changes, read on a worker thread of their own (never the store's)."""

    def wait(self, timeout_s: float) -> list[StoreChange]:
        """The changes that arrived, waiting up to ``timeout_s`` for the first; [] if none."""
        ...

    def close(self) -> None: ...
