"""One lock per key (a session id), taken in the order the tasks asked for it.

The locks are fair (anyio's ``Lock`` hands itself to the longest waiter on both backends),
so tasks that ask before anything is awaited get it in the order they were started, which
for request handlers is the order the requests arrived. A task holding a key's lock may
take it again (a caller reads, decides and changes under one hold, and the change takes
the lock too). A key's lock is dropped once nobody holds or waits for it.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import msgspec

__all__ = ["KeyedLock"]


class _Entry(msgspec.Struct):
    lock: anyio.Lock = msgspec.field(default_factory=anyio.Lock)
    owner: int | None = None  # the id of the task holding it
    users: int = 0  # holding or waiting


class KeyedLock:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        task = anyio.get_current_task().id
        entry = self._entries.get(key)
        if entry is not None and entry.owner == task:
            yield  # re-entered by the task holding it
            return
        if entry is None:
            entry = self._entries[key] = _Entry()
        entry.users += 1
        try:
            async with entry.lock:
                entry.owner = task
                try:
                    yield
                finally:
                    entry.owner = None
        finally:
            entry.users -= 1
            if not entry.users:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
