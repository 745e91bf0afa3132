"""What a live session writes to the store beside its prompts: a turn's messages (kept in memory
when the store refuses them, written again in seq order later) and the turn lease that keeps
two daemons sharing a home from running turns in the same session at once.

When the store refuses a write during a turn (disk full, lock held, read-only), the turn
ends with that error and the messages stay in the live session (``unsaved``): they are
written at the next write of the session or by a periodic retry, and the session keeps
its lease and stays loaded until then.
"""

import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from daemon.conversation import ChatMessage
from daemon.errors import PonderError, ReplyNotSaved, StoreError, StoreUnavailable
from daemon.sessions.live import LiveSession
from daemon.store import AsyncStore, new_lease_owner
from daemon.store.store import Admission

log = logging.getLogger("ponder.sessions")

LEASE_TTL_S = 3600.0  # a crashed owner is detected by its pid and start time long before this
STORE_RETRY_S = 5.0  # how often unsaved messages (and a lease the store would not release) are retried


class SessionWrites:
    """Leases and unsaved messages of every live session of this daemon."""

    def __init__(self, store: AsyncStore, background: Callable[[], TaskGroup | None]) -> None:
        self.store = store
        self._background = background  # where retries run; None once shutting down
        self.lease_owner = new_lease_owner()

    async def acquire_lease(self, live: LiveSession) -> bool:
        """Take the session's turn lease; False when another ponder process holds it."""
        if not await self.store.acquire_lease(live.row.id, self.lease_owner, LEASE_TTL_S):
            return False
        live.lease_held = True
        return True

    async def admit(self, live: LiveSession, message: ChatMessage, known_count: int) -> Admission:
        """Take the session's turn lease and store the prompt ``message`` in one transaction
        (``Store.admit``: not stored when the session holds other than ``known_count`` messages)."""
        admitted = await self.store.admit(message, self.lease_owner, LEASE_TTL_S, known_count)
        if admitted.leased:
            live.lease_held = True
        return admitted

    async def release_lease(self, live: LiveSession) -> None:
        """Give the turn lease back, unless messages are unsaved (they go in first, under it).

        A store that refuses keeps the lease ours (the periodic retry releases it later)
        instead of failing the caller: a turn's end must not die of it.
        """
        if not live.lease_held or live.unsaved:
            return
        live.lease_held = False
        try:
            await self.store.release_lease(live.row.id, self.lease_owner)
        except StoreError as exc:
            live.lease_held = True
            log.warning("session %s: could not release its turn lease: %s", live.row.id, exc.message)
            self.retry_later(live)

    def saver(self, live: LiveSession) -> Callable[[ChatMessage], Awaitable[None]]:
        """The turn's save: this message after any earlier unsaved ones; kept in memory if refused."""

        async def save(message: ChatMessage) -> None:
            live.unsaved[message.message_id] = message
            try:
                await self.flush_unsaved(live)
            except StoreUnavailable as exc:
                log.error("session %s: %d message(s) not saved yet: %s", live.row.id, len(live.unsaved), exc.message)
                self.retry_later(live)
                raise ReplyNotSaved(exc.message) from exc
            except anyio.get_cancelled_exc_class():
                if live.unsaved:
                    self.retry_later(live)  # the write may or may not have happened: write it again
                raise

        return save

    async def flush_unsaved(self, live: LiveSession) -> None:
        """Write the messages the store refused, in seq order; raises (keeping the rest) if it still refuses."""
        for message in sorted(live.unsaved.values(), key=lambda m: m.seq):
            try:
                await self.store.save_message(message)
            except StoreUnavailable:
                raise
            except PonderError:
                # Not an outage (the session was deleted meanwhile, or a bug): retrying cannot help.
                live.unsaved.pop(message.message_id, None)
                raise
            if live.unsaved.get(message.message_id) is message:
                del live.unsaved[message.message_id]

    def retry_later(self, live: LiveSession) -> None:
        background = self._background()
        if not live.retrying and background is not None:
            live.retrying = True
            background.start_soon(self._retry_store_writes, live)

    async def _retry_store_writes(self, live: LiveSession) -> None:
        """Every ``STORE_RETRY_S``: save the unsaved messages, then give the lease back, once idle."""
        try:
            while (live.unsaved or live.lease_held) and not live.unloaded and self._background() is not None:
                await anyio.sleep(STORE_RETRY_S)
                async with live.admit_lock:
                    if live.current is not None or live.queued:
                        continue  # a running turn saves them itself and releases the lease after
                    try:
                        await self.flush_unsaved(live)
                    except StoreError:
                        continue
                    log.info("session %s: the messages kept in memory are saved now", live.row.id)
                    await self.release_lease(live)
        finally:
            live.retrying = False
