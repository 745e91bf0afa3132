"""Store calls that arrive together, run in one transaction and one thread hop (``Batch``).

The async side of ``Database.run_together``: ``AsyncStore`` keeps one batch for writes and one
for reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from daemon.errors import StoreClosed
from daemon.store.backend import Body

T = TypeVar("T")


class _Pending:
    """One store call waiting in a ``Batch``, and then its outcome."""

    def __init__(self, body: Body[Any]) -> None:
        self.body = body
        self.taken = False  # by the store thread: it will run, even if its caller is cancelled
        self.done = False
        self.promoted = False  # its caller flushes next
        self.woken = anyio.Event()  # done, or promoted
        self.result: Any = None
        self.error: Exception | None = None


class Batch:
    """Store calls that arrive together run in one transaction and one thread hop (a burst of
    prompts commits its user messages together, instead of one transaction each).

    One caller at a time flushes: it runs everything pending, again until its own call is
    done, then hands the flushing over to the oldest call still pending (so no caller keeps
    flushing for a stream of later ones); the others wait for theirs. A caller cancelled
    before its call was taken withdraws it; once taken, the call finishes (as with
    ``AsyncStore._call``) before the cancellation takes effect.
    """

    def __init__(
        self,
        run: Callable[[list[Body[Any]]], list[tuple[Any, Exception | None]]],
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self._run = run
        self._limiter = limiter  # the store's: batches take their turn with single calls
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()  # the store thread takes the batch
        self._in_flight: list[_Pending] = []  # the batch on the store thread
        self._flushing = False

    async def call(self, body: Body[T]) -> T:
        """``body``'s result, once the transaction it ran in has committed."""
        call = _Pending(body)
        with self._lock:
            self._pending.append(call)
        if self._flushing:
            try:
                await call.woken.wait()
            except anyio.get_cancelled_exc_class():
                with self._lock:
                    withdrawn = not call.taken
                    if withdrawn:
                        self._pending.remove(call)
                if withdrawn and call.promoted:
                    self._hand_over()
                elif not withdrawn:
                    with anyio.CancelScope(shield=True):
                        await call.woken.wait()
                raise
        if not call.done:  # nobody was flushing, or this caller was promoted
            await self._flush_until(call)
        if call.error is not None:
            raise call.error
        return call.result

    async def _flush_until(self, call: _Pending) -> None:
        self._flushing = True
        try:
            with anyio.CancelScope(shield=True):  # the others are waiting on this flush
                while not call.done:
                    for done in await anyio.to_thread.run_sync(self._flush, limiter=self._limiter):
                        done.done = True
                        done.woken.set()
        except BaseException as error:  # the thread could not be reached: no waiter may hang
            with self._lock:
                stranded, self._pending = [*self._in_flight, *self._pending], []
            for left in stranded:
                if not left.done:
                    left.error = error if isinstance(error, Exception) else StoreClosed()
                    left.done = True
                    left.woken.set()
            raise
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        """The oldest pending call's caller flushes next; none pending, nobody flushes."""
        with self._lock:
            successor = self._pending[0] if self._pending else None
        self._flushing = successor is not None
        if successor is not None:
            successor.promoted = True
            successor.woken.set()

    def _flush(self) -> list[_Pending]:
        """On the store thread: run every pending call together; return them, answered."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._in_flight = batch
            for call in batch:
                call.taken = True
        try:
            outcomes = self._run([call.body for call in batch])
        except Exception as error:
            outcomes = [(None, error)] * len(batch)
        for call, (result, failure) in zip(batch, outcomes, strict=True):
            call.result, call.error = result, failure
        return batch
