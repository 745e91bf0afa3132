"""Shutdown under load: end of input or SIGTERM while 20 sessions stream.

Every running turn ends ``cancelled``, every partial message is persisted as
``interrupted``, and ``ponder serve`` exits with status 0 within 2 s.
"""

import signal
import time

import anyio
import pytest

from tests.support.harness import in_memory_daemon, process_of, subprocess_daemon

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SESSIONS = 20


@pytest.mark.parametrize("trigger", ["eof", "sigterm"])
async def test_shutdown_while_twenty_sessions_stream(home, tmp_path, anyio_backend, trigger):
    streamed: dict[str, list[str]] = {}  # turn id -> thinking deltas seen
    ends: dict[str, dict] = {}
    async with subprocess_daemon(home, backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "20"}) as client:
        process = process_of(client)
        turns: dict[str, str] = {}  # turn id -> session id
        for n in range(SESSIONS):
            started = await client.request(
                "session/start", {"model_id": "mock/thinker", "thinking_level": "max", "cwd": str(tmp_path), "title": f"s{n}"}
            )
            session_id = started["session"]["session_id"]
            turn = await client.request("session/prompt", {"session_id": session_id, "text": f"Think hard about case {n}"})
            turns[turn["turn_id"]] = session_id
            streamed[turn["turn_id"]] = []

        async def read_until_eof() -> None:
            async for method, params in client.notifications:
                if method == "agent/event" and params["turn_id"] in turns:
                    if params["type"] == "thinking_delta":
                        streamed[params["turn_id"]].append(params["delta"])
                    elif params["type"] == "turn_end":
                        ends[params["turn_id"]] = params

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_until_eof)
            with anyio.fail_after(10):  # every session is streaming, some for a while
                while not all(len(deltas) >= 5 for deltas in streamed.values()):
                    await anyio.sleep(0.02)
            assert not ends, "the turns were still running when shutdown began"
            began = time.monotonic()
            if trigger == "eof":
                await process.stdin.aclose()
            else:
                process.send_signal(signal.SIGTERM)
            with anyio.fail_after(5):
                code = await process.wait()
            took = time.monotonic() - began
            # the reader ends at the end of the daemon's stdout
    assert code == 0
    assert took < 2.0, f"exit took {took:.2f} s"
    assert set(ends) == set(turns), "every turn was bracketed by a turn_end"
    assert {e["stop_reason"] for e in ends.values()} == {"cancelled"}

    async with in_memory_daemon(home) as (client, _):
        for turn_id, session_id in turns.items():
            resumed = await client.request("session/resume", {"session_id": session_id})
            user, assistant = resumed["messages"]
            assert user["status"] == "complete" and user["content"][0]["text"].startswith("Think hard")
            assert assistant["status"] == "interrupted" and assistant["stop_reason"] == "interrupted"
            assert resumed["session"]["status"] == "idle"
            seen = "".join(streamed[turn_id])
            stored = assistant["thinking"] or ""
            # everything streamed was persisted (a delta is stored before it is sent)
            assert stored and stored.startswith(seen), (stored, seen)
