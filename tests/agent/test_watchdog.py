"""The watchdogs of streamed responses (``daemon.agent.watchdog``): one task watches them all; each
response is aborted after its own timeouts (silence, or only keep-alives), never while it is relaying
to the client, and never once it has ended."""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from daemon.agent.context import TurnSettings
from daemon.agent.watchdog import Watchdogs

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def running() -> AsyncIterator[Watchdogs]:
    """Watchdogs with their task running, stopped at the end of the block."""
    watchdogs = Watchdogs()
    async with anyio.create_task_group() as tg:
        await tg.start(watchdogs.run)
        yield watchdogs
        tg.cancel_scope.cancel()


async def test_a_silent_response_is_aborted_stall_after_its_stall_timeout():
    async with running() as watchdogs:
        started = time.monotonic()
        with watchdogs.watching(TurnSettings(stall_timeout_s=0.2)) as watchdog:
            await anyio.sleep(5)
        waited = time.monotonic() - started
    assert watchdog.verdict == "stall"
    assert 0.2 <= waited < 2


async def test_keep_alives_keep_it_alive_until_the_no_progress_timeout():
    async with running() as watchdogs:
        started = time.monotonic()
        with watchdogs.watching(TurnSettings(stall_timeout_s=0.2, no_progress_timeout_s=0.5)) as watchdog:
            for _ in range(50):
                await anyio.sleep(0.05)
                watchdog.last_life = time.monotonic()  # a keep-alive: life, not progress
        waited = time.monotonic() - started
    assert watchdog.verdict == "no_progress"
    assert 0.5 <= waited < 2


async def test_time_spent_relaying_to_the_client_is_not_silence():
    async with running() as watchdogs:
        with watchdogs.watching(TurnSettings(stall_timeout_s=0.2)) as watchdog:
            watchdog.relaying = True
            await anyio.sleep(0.6)  # three stall timeouts waiting for a slow client
            watchdog.relaying = False
            watchdog.last_life = watchdog.last_progress = time.monotonic()
    assert watchdog.verdict is None


async def test_each_response_goes_by_its_own_timeouts_and_an_ended_one_is_never_aborted():
    async with running() as watchdogs:
        # A long-timeout response first: run sleeps until it is due, and a short one registered
        # after it must wake it.
        with watchdogs.watching(TurnSettings(stall_timeout_s=30)) as slow:
            with watchdogs.watching(TurnSettings(stall_timeout_s=0.1)) as fast:
                await anyio.sleep(0.2)
            assert fast.verdict == "stall"
            assert not slow.scope.cancel_called
        ended = time.monotonic()
        with watchdogs.watching(TurnSettings(stall_timeout_s=0.1)) as quick:
            pass  # ended at once
        await anyio.sleep(0.3)
    assert slow.verdict is None and quick.verdict is None and time.monotonic() - ended >= 0.3


async def test_watching_without_its_task_is_refused():
    with pytest.raises(RuntimeError):
        with Watchdogs().watching(TurnSettings()):
            pass
