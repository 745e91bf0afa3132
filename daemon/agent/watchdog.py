"""The watchdog of one streamed response (a reply or a summary): it aborts the response when
the provider goes silent for ``stall_timeout_s`` (its keep-alives count as life) or sends
nothing but keep-alives for ``no_progress_timeout_s``."""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import anyio

from daemon.agent.context import TurnSettings

# Why the watchdog aborted a response: nothing at all, or nothing but keep-alives, for too long.
Verdict = Literal["stall", "no_progress"]


class Watchdog:
    """Aborts one streamed response when the provider goes silent or sends only keep-alives.

    One task per response (a cancel scope per event would cost more than relaying the
    event): the stream loop only stamps the time after each event, and time spent relaying
    an event to the client is excluded, since a slow client is not a stalled provider.
    """

    def __init__(self, settings: TurnSettings, scope: anyio.CancelScope) -> None:
        self.settings = settings
        self.scope = scope
        self.last_life = self.last_progress = time.monotonic()
        self.relaying = False
        self.verdict: Verdict | None = None  # set once it fired

    async def run(self) -> None:
        stall_s, progress_s = self.settings.stall_timeout_s, self.settings.no_progress_timeout_s
        while True:
            if self.relaying:  # the provider's clock starts again when the client has read
                await anyio.sleep(min(1.0, stall_s / 4))
                continue
            now = time.monotonic()
            stall_left = self.last_life + stall_s - now
            progress_left = self.last_progress + progress_s - now
            if stall_left <= 0 or progress_left <= 0:
                self.verdict = "stall" if stall_left <= 0 else "no_progress"
                self.scope.cancel()
                return
            await anyio.sleep(min(stall_left, progress_left))


@asynccontextmanager
async def watching(settings: TurnSettings) -> AsyncIterator[Watchdog]:
    """Run the body (one streamed response) under a ``Watchdog``, from before it connects: waiting
    for headers counts as silence too. A verdict cancels the body and is left on the watchdog for
    the caller to word; a failure of the body is raised once the watchdog has stopped."""
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as scope:
            watchdog = Watchdog(settings, scope)
            tg.start_soon(watchdog.run)
            try:
                yield watchdog
            except Exception as exc:
                failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
