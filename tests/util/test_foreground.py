"""The foreground: what a client waits on goes before the replies already streaming."""

import anyio
import pytest

from daemon.util import foreground
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


def test_holds_and_handoffs_say_whether_the_foreground_is_held() -> None:
    assert not foreground.held()
    first, second = foreground.Hold(), foreground.Hold()
    first.release()
    first.release()  # released once, however often it is called
    assert foreground.held()
    second.release()
    assert not foreground.held()
    lines = foreground.Handoffs()
    try:
        lines.offer()
        assert foreground.held()  # a line on its way
        lines.took()
        assert not foreground.held()
        lines.offer()
    finally:
        lines.close()
    assert not foreground.held()  # a closed reader's lines hold nothing


async def _race(hold: bool, marked: bool = True) -> list[str]:
    """A streaming reply steps back once while a starting turn needs two rounds of the loop."""
    order: list[str] = []
    starting = foreground.Hold() if hold else None

    async def stream() -> None:
        if marked:
            with foreground.streaming():
                await foreground.step_back()
        else:
            await foreground.step_back()
        order.append("stream")

    async def start() -> None:
        for _ in range(2):
            await anyio.lowlevel.checkpoint()
        order.append("start")
        if starting is not None:
            starting.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream)
        tg.start_soon(start)
    return order


async def test_a_streaming_reply_gives_way_while_the_foreground_is_held() -> None:
    assert foreground.STEP_BACK_ROUNDS > 2
    assert await _race(hold=True) == ["start", "stream"]
    assert await _race(hold=False) == ["stream", "start"]  # nothing held: no round lost
    assert await _race(hold=True, marked=False) == ["stream", "start"]  # not a streaming reply's task
    assert not foreground.held()


def slow_mock(config):
    config.mock_delay_ms = 150  # the first delta comes this long after the block starts


async def test_a_turn_holds_the_foreground_until_its_first_delta_and_lets_go_at_its_end(home):
    async with in_memory_daemon(home, configure=slow_mock) as (client, _):
        started = await client.request("session/start", {"model_id": "mock/echo"})
        session_id = started["session"]["session_id"]
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "one two three"})
        seen: dict[str, bool] = {}
        deltas = 0
        async for event in client.events(turn["turn_id"]):
            if event["type"] == "text_delta":
                deltas += 1
                if deltas == 2:  # the first went out a mock delay ago
                    seen["second delta"] = foreground.held()
            else:
                seen.setdefault(event["type"], foreground.held())
        assert seen["turn_start"] and seen["message_start"]  # before the first delta
        assert not seen["second delta"] and not seen["turn_end"]
        # A turn cancelled before its first delta lets go too.
        cancelled = await client.request("session/prompt", {"session_id": session_id, "text": "four five"})
        async for event in client.events(cancelled["turn_id"]):
            if event["type"] == "turn_start":
                assert foreground.held()
                await client.request("session/cancel", {"session_id": session_id})
            assert event["type"] != "text_delta"
            if event["type"] == "turn_end":
                assert event["stop_reason"] == "cancelled"
                assert not foreground.held()
    with anyio.fail_after(5):
        while foreground.held():  # the daemon has stopped: nothing of it holds the foreground
            await anyio.sleep(0.01)
