"""The watchdogs of streamed responses (a reply or a summary): each aborts its response when
the provider goes silent for ``stall_timeout_s`` (its keep-alives count as life) or sends
nothing but keep-alives for ``no_progress_timeout_s``.

One task watches every response of the daemon (``Watchdogs.run``, in the session manager's
task group); a response only registers while it streams (``Watchdogs.watching``). A task of
its own per response (spawned, woken, cancelled and joined) cost each of 200 turns started
at once ~85 µs of CPU on asyncio, more than the rest of its watching for its whole reply.
"""

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

import anyio
import anyio.abc

# Why the watchdog aborted a response: nothing at all, or nothing but keep-alives, for too long.
Verdict = Literal["stall", "no_progress"]


class Timeouts(Protocol):
    """What a watchdog goes by (a turn's ``TurnSettings``)."""

    @property
    def stall_timeout_s(self) -> float: ...

    @property
    def no_progress_timeout_s(self) -> float: ...


class Watchdog:
    """The watch over one streamed response: the stream loop only stamps the time after each
    event (``last_life``, ``last_progress``), and marks the time it spends relaying an event to
    the client (``relaying``), which is excluded, since a slow client is not a stalled provider."""

    def __init__(self, settings: Timeouts, scope: anyio.CancelScope) -> None:
        self.settings = settings
        self.scope = scope
        self.last_life = self.last_progress = time.monotonic()
        self.relaying = False
        self.verdict: Verdict | None = None  # set once it fired

    def look(self, now: float) -> float | None:
        """Abort the response if it is overdue (None: it fired); else when to look again."""
        stall_s, progress_s = self.settings.stall_timeout_s, self.settings.no_progress_timeout_s
        if self.relaying:  # the provider's clock starts again when the client has read
            return now + min(1.0, stall_s / 4)
        stall_left = self.last_life + stall_s - now
        progress_left = self.last_progress + progress_s - now
        if stall_left <= 0 or progress_left <= 0:
            self.verdict = "stall" if stall_left <= 0 else "no_progress"
            self.scope.cancel()
            return None
        return now + min(stall_left, progress_left)


class Watchdogs:
    """Every streamed response's ``Watchdog``, looked at by one task (``run``) when the
    earliest of them is due."""

    def __init__(self) -> None:
        self._watched: set[Watchdog] = set()
        self._next = math.inf  # when ``run`` looks next
        self._wake: anyio.Event | None = None  # set: look now (made by ``run``, in its event loop)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled; started before any response is (``task_status``)."""
        self._wake = anyio.Event()
        task_status.started()
        try:
            while True:
                now = time.monotonic()
                due = math.inf
                for watchdog in list(self._watched):
                    at = watchdog.look(now)
                    if at is None:
                        self._watched.discard(watchdog)  # fired: its response ends
                    else:
                        due = min(due, at)
                self._next = due
                with anyio.move_on_after(due - now):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = anyio.Event()
        finally:
            self._wake = None

    @contextmanager
    def watching(self, settings: Timeouts) -> Iterator[Watchdog]:
        """Run the body (one streamed response) under a ``Watchdog``, from before it connects:
        waiting for headers counts as silence too. A verdict cancels the body and is left on
        the watchdog for the caller to word."""
        wake = self._wake
        if wake is None:
            raise RuntimeError("no Watchdogs.run is running: a response would go unwatched")
        with anyio.CancelScope() as scope:
            watchdog = Watchdog(settings, scope)
            self._watched.add(watchdog)
            try:
                # Due before ``run`` looks next (a turn with shorter timeouts): it looks sooner.
                due = watchdog.last_life + min(settings.stall_timeout_s, settings.no_progress_timeout_s)
                if due < self._next:
                    self._next = due
                    wake.set()
                yield watchdog
            finally:
                self._watched.discard(watchdog)
