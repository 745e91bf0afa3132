"""``AsyncStore``: the store for the event loop (asyncio or trio).

Every call runs on a worker thread, one at a time (anyio threads, no aiosqlite); calls that
arrive together share a transaction through ``Batch``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import anyio

from daemon.conversation import ChatMessage, Part
from daemon.errors import StoreClosed, StoreUnavailable
from daemon.store.backend import Body, StoreStatus
from daemon.store.batch import Batch
from daemon.store.changes import StoreChange
from daemon.store.compactions import StoredCompaction
from daemon.store.sessions import SessionRow
from daemon.store.store import Admission, Store, StoreQueries
from protocol.objects import Budget, Compaction, ContextFill, Cost, SessionPlan, Usage

T = TypeVar("T")

FEED_WAIT_S = 1.0  # how long one wait for other daemons' changes blocks its thread


class AsyncStore:
    """``Store`` for the event loop: each call runs on a worker thread, one call at a time.

    Works on asyncio and trio (anyio threads, no aiosqlite). A call that has reached its
    thread finishes even if the caller is cancelled, so a write is never half-observed;
    cancellation while waiting for the previous call still takes effect.
    """

    def __init__(self, store: StoreQueries) -> None:
        self.store = store  # the sync store; blocking, so not for use on the event loop
        self._limiter = anyio.CapacityLimiter(1)
        self._closing = False
        # Writes batch with writes; reads with reads, so a read never waits on another
        # process's write lock.
        self._writes = Batch(lambda bodies: self.store.run_together(bodies, write=True), self._limiter)
        self._reads = Batch(lambda bodies: self.store.run_together(bodies, write=False), self._limiter)

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> AsyncStore:
        store = await anyio.to_thread.run_sync(functools.partial(Store, path, **options))
        return cls(store)

    @classmethod
    async def open_or_unavailable(cls, path: str | os.PathLike[str], **options: Any) -> AsyncStore:
        """The opened store, or one that answers every call with why it could not be opened."""
        try:
            return await cls.open(path, **options)
        except StoreUnavailable as error:
            return cls(Store.unavailable(path, error.message))

    @classmethod
    async def open_url(cls, url: str, **options: Any) -> AsyncStore:
        """The PostgreSQL store at ``url``; one that answers every call with why (and keeps trying to
        connect) when the server cannot be reached or refuses the login."""
        from daemon.store import postgres  # psycopg loads only when a PostgreSQL URL is configured

        return cls(await anyio.to_thread.run_sync(functools.partial(postgres.open_store, url, **options)))

    @classmethod
    async def open_configured(
        cls,
        db_path: str | os.PathLike[str],
        url: str | None,
        *,
        pooler: Literal["transaction", "session"] | None = None,
        listen_url: str | None = None,
    ) -> AsyncStore:
        """The store the configuration names: the PostgreSQL store at ``url`` (through a ``pooler``
        in that mode, listening at ``listen_url``), else ``db_path``'s."""
        if url:
            return await cls.open_url(url, pooler=pooler, listen_url=listen_url)
        return await cls.open_or_unavailable(db_path)

    async def follow_changes(self, apply: Callable[[list[StoreChange]], Awaitable[None]]) -> None:
        """Until cancelled: ``apply`` other daemons' changes to the store as they commit (on a
        thread of its own, never the store's). Returns at once where the store has no feed (SQLite)."""
        feed = self.store.change_feed()
        if feed is None:
            return
        waiting = anyio.CapacityLimiter(1)
        try:
            while not self._closing:
                changes = await anyio.to_thread.run_sync(
                    feed.wait, FEED_WAIT_S, abandon_on_cancel=True, limiter=waiting
                )
                if changes:
                    await apply(changes)
        finally:
            feed.close()

    async def problem_now(self) -> str | None:
        """Why the store cannot be used now; None when it can. A store with a problem is tried
        once more first (a PostgreSQL server that was away may be back: the try connects again)."""
        if self.store.problem is None or self._closing:
            return self.store.problem
        try:
            await self._call(self.store.check)
        except (StoreUnavailable, StoreClosed):
            pass  # still: the problem says why
        return self.store.problem

    async def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self._closing:
            raise StoreClosed()
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._limiter)

    async def _together(self, batch: Batch, body: Body[T]) -> T:
        if self._closing:
            raise StoreClosed()
        return await batch.call(body)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Close after the call in flight; safe to call twice and from cancelled scopes.

        If the store stays busy longer than ``timeout_s`` the connection is left for the
        process exit to drop: WAL keeps the file consistent either way.
        """
        if self._closing:
            return
        self._closing = True
        with anyio.move_on_after(timeout_s, shield=True):
            await anyio.to_thread.run_sync(self.store.close, limiter=self._limiter)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def create_session(self, row: SessionRow) -> SessionRow:
        return await self._call(self.store.create_session, row)

    async def get_session(self, session_id: str) -> SessionRow | None:
        return await self._together(self._reads, functools.partial(StoreQueries._fetch_session, session_id=session_id))

    async def list_sessions(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[SessionRow], str | None]:
        return await self._call(self.store.list_sessions, cwd, limit, cursor)

    async def update_session(self, session_id: str, **fields: Any) -> SessionRow:
        return await self._call(self.store.update_session, session_id, **fields)

    async def delete_session(self, session_id: str) -> bool:
        return await self._call(self.store.delete_session, session_id)

    async def set_session_plan(self, session_id: str, plan: SessionPlan) -> SessionRow:
        return await self._call(self.store.set_session_plan, session_id, plan)

    async def fork_session(
        self, source_id: str, new_row: SessionRow, up_to_message_id: str | None = None
    ) -> SessionRow:
        return await self._call(self.store.fork_session, source_id, new_row, up_to_message_id)

    async def save_message(self, message: ChatMessage) -> ChatMessage:
        return await self._together(self._writes, self.store._save_message_body(message))

    async def delete_message(self, session_id: str, message_id: str) -> bool:
        return await self._call(self.store.delete_message, session_id, message_id)

    async def get_messages(
        self, session_id: str, after_seq: int | None = None, limit: int | None = None
    ) -> list[ChatMessage]:
        return await self._call(self.store.get_messages, session_id, after_seq, limit)

    async def append_to_message(
        self,
        message_id: str,
        parts: dict[int, Part],
        texts: dict[int, str],
        *,
        keep_text: frozenset[int] = frozenset(),
        final: ChatMessage | None = None,
    ) -> None:
        # Batched with the writes that arrive with it: many sessions streaming at once checkpoint
        # in one transaction, not one thread hop each ahead of every other write.
        body = self.store._append_to_message_body(message_id, parts, texts, keep_text=keep_text, final=final)
        await self._together(self._writes, body)

    async def get_attachment(self, session_id: str, attachment_id: str) -> tuple[str, bytes] | None:
        return await self._call(self.store.get_attachment, session_id, attachment_id)

    async def get_attachments(self, attachment_ids: list[str]) -> dict[str, bytes]:
        return await self._call(self.store.get_attachments, attachment_ids)

    async def mark_image_omitted(self, message_id: str, position: int, reason: str) -> None:
        await self._call(self.store.mark_image_omitted, message_id, position, reason)

    async def record_usage(
        self, session_id: str, usage: Usage | None, cost: Cost | None, context: ContextFill | None
    ) -> SessionRow:
        # Batched with the writes that arrive with it (the reply's own save, another session's).
        return await self._together(self._writes, self.store._record_usage_body(session_id, usage, cost, context))

    async def set_budget(self, session_id: str, budget: Budget | None) -> SessionRow:
        return await self._call(self.store.set_budget, session_id, budget)

    async def record_change(self, session_id: str, kind: str, value: str | None) -> None:
        await self._call(self.store.record_change, session_id, kind, value)

    async def acquire_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        return await self._together(self._writes, self.store._acquire_lease_body(session_id, owner, ttl_s))

    async def status(self) -> StoreStatus:
        return await self._call(self.store.status)

    async def lease_holder(self, session_id: str) -> str | None:
        return await self._call(self.store.lease_holder, session_id)

    async def admit(self, message: ChatMessage, owner: str, ttl_s: float, known_count: int) -> Admission:
        """``Store.admit``, batched with the writes that arrive with it (a burst of prompts)."""
        return await self._together(self._writes, self.store._admit_body(message, owner, ttl_s, known_count))

    async def release_lease(self, session_id: str, owner: str) -> bool:
        return await self._call(self.store.release_lease, session_id, owner)

    async def save_compaction(self, session_id: str, compaction: Compaction, usage: Usage | None = None) -> Compaction:
        return await self._call(self.store.save_compaction, session_id, compaction, usage)

    async def get_compactions(self, session_id: str) -> list[StoredCompaction]:
        return await self._call(self.store.get_compactions, session_id)
