"""Shutdown under load: end of input or SIGTERM while 20 sessions stream (5 of them are
inside a 5 s ``run_command``).

Every running turn ends ``cancelled``, every partial message is persisted as
``interrupted`` (a tool run as a cancelled result), and ``ponder serve`` exits with
status 0 within 2 s.
"""

import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.support.harness import in_memory_daemon, process_of, subprocess_daemon

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SESSIONS = 20
TOOL_SESSIONS = 5  # the first ones: their turn sits in `sleep 5` when shutdown begins


def children_in(cwd: Path) -> list[str]:
    """``sleep`` processes still running in ``cwd`` (Linux /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and Path(os.readlink(proc / "cwd")) == cwd
                and b"sleep" in (proc / "cmdline").read_bytes()
            ):
                found.append(proc.name)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("trigger", ["eof", "sigterm"])
async def test_shutdown_while_twenty_sessions_stream(home, tmp_path, anyio_backend, trigger):
    streamed: dict[str, list[str]] = {}  # turn id -> thinking deltas seen
    ends: dict[str, dict] = {}
    # 100 ms a delta: a thinker's turn lasts about ten seconds, so on a loaded machine none ends
    # while the twenty sessions are still being started (at 20 ms the first ones could).
    async with subprocess_daemon(home, backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "100"}) as client:
        process = process_of(client)
        turns: dict[str, str] = {}  # turn id -> session id
        tool_turns: set[str] = set()
        running_tools: set[str] = set()
        for n in range(SESSIONS):
            tools = n < TOOL_SESSIONS
            started = await client.request(
                "session/start",
                {
                    "model_id": "mock/tools" if tools else "mock/thinker",
                    "thinking_level": "off" if tools else "max",
                    "cwd": str(tmp_path),
                    "title": f"s{n}",
                    "approval_policy": "auto",
                },
            )
            session_id = started["session"]["session_id"]
            text = 'tool: run_command {"command": "sleep 30"}' if tools else f"Think hard about case {n}"
            turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
            turns[turn["turn_id"]] = session_id
            streamed[turn["turn_id"]] = []
            if tools:
                tool_turns.add(turn["turn_id"])

        async def read_until_eof() -> None:
            async for method, params in client.notifications:
                if method == "agent/event" and params["turn_id"] in turns:
                    if params["type"] == "thinking_delta":
                        streamed[params["turn_id"]].append(params["delta"])
                    elif params["type"] == "tool_execution_start":
                        running_tools.add(params["turn_id"])
                    elif params["type"] == "turn_end":
                        ends[params["turn_id"]] = params

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_until_eof)
            with anyio.fail_after(20):  # every session is streaming, some for a while
                while not all(t in running_tools if t in tool_turns else len(streamed[t]) >= 5 for t in turns):
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
    assert not children_in(tmp_path), "the cancelled tool runs left no process behind"
    assert {e["stop_reason"] for e in ends.values()} == {"cancelled"}

    async with in_memory_daemon(home) as (client, _):
        for turn_id, session_id in turns.items():
            resumed = await client.request("session/resume", {"session_id": session_id})
            if turn_id in tool_turns:
                user, asked, ran = resumed["messages"]
                assert asked["status"] == "complete" and asked["content"][0]["name"] == "run_command"
                assert ran["role"] == "tool" and ran["status"] == "interrupted"
                assert ran["content"][0]["text"].startswith("Cancelled") and ran["content"][0]["is_error"]
                continue
            user, assistant = resumed["messages"]
            assert user["status"] == "complete" and user["content"][0]["text"].startswith("Think hard")
            assert assistant["status"] == "interrupted" and assistant["stop_reason"] == "interrupted"
            assert resumed["session"]["status"] == "idle"
            seen = "".join(streamed[turn_id])
            stored = assistant["thinking"] or ""
            # everything streamed was persisted (a delta is stored before it is sent)
            assert stored and stored.startswith(seen), (stored, seen)
