"""A catastrophic ``search`` inside a real ``ponder serve`` (issue #15): while the regex
backtracks, ``ping`` is answered at once, SIGTERM and end of input still end the daemon
within 2 s, and otherwise the search ends with a tool error at its time limit. The regex
runs in a child process; before, it held the daemon's GIL and froze everything.
"""

import json
import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.support.harness import process_of, subprocess_daemon

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIME_LIMIT_S = 3


def scan_children(parent: int) -> set[int]:
    """Live list_files/search scan processes whose parent is ``parent`` (Linux /proc). By parent,
    not machine-wide: other tests (other pytest workers) run scans of their own meanwhile."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            if int(ppid) == parent and state != "Z" and b"daemon.tools.child" in (proc / "cmdline").read_bytes():
                found.add(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="looks for leftover processes in /proc")
@pytest.mark.parametrize("ending", ["time_limit", "sigterm", "eof"])
async def test_catastrophic_search_never_freezes_ponder_serve(home, tmp_path, anyio_backend, ending):
    (home / "config.toml").write_text(f"[tools]\nscan_time_limit_s = {TIME_LIMIT_S}\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("a" * 35 + "!\n")  # (a+)+$ backtracks 2**35 ways: hours
    events: list[dict] = []
    children: set[int] = set()
    async with subprocess_daemon(
        home, backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "0", "SOME_TOKEN": "s3cret"}
    ) as client:
        process = process_of(client)
        started = await client.request(
            "session/start", {"model_id": "mock/tools", "cwd": str(work), "approval_policy": "auto"}
        )
        session_id = started["session"]["session_id"]
        prompt = "tool: search " + json.dumps({"pattern": "(a+)+$"})
        turn = await client.request("session/prompt", {"session_id": session_id, "text": prompt})
        searching, ended = anyio.Event(), anyio.Event()

        async def read_events() -> None:
            async for method, params in client.notifications:
                if method == "agent/event" and params["turn_id"] == turn["turn_id"]:
                    events.append(params)
                    if params["type"] == "tool_execution_start":
                        searching.set()
                    elif params["type"] == "turn_end":
                        ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_events)
            with anyio.fail_after(10):
                await searching.wait()
            await anyio.sleep(0.3)  # the child is deep in backtracking by now
            children = scan_children(process.pid)
            assert children, "the search is not running in a child process"
            for pid in children:  # no credential (nor anything else) of the daemon's environment reaches it
                assert Path(f"/proc/{pid}/environ").read_bytes() == b""
            slowest = 0.0
            for _ in range(5):
                sent = time.monotonic()
                with anyio.fail_after(5):
                    await client.request("ping", {})
                slowest = max(slowest, time.monotonic() - sent)
                await anyio.sleep(0.05)
            assert slowest < 0.5, f"ping took {slowest:.2f} s while the search ran"

            if ending == "time_limit":
                with anyio.fail_after(TIME_LIMIT_S + 10):
                    await ended.wait()
                tg.cancel_scope.cancel()
            else:
                began = time.monotonic()
                if ending == "eof":
                    await process.stdin.aclose()
                else:
                    process.send_signal(signal.SIGTERM)
                with anyio.fail_after(10):
                    code = await process.wait()
                took = time.monotonic() - began
                assert code == 0
                assert took < 2.0, f"exit took {took:.2f} s"

    if ending == "time_limit":
        [end] = [e for e in events if e["type"] == "tool_execution_end"]
        assert end["is_error"]
        assert f"stopped after its time limit of {TIME_LIMIT_S} s" in end["result"]
        assert events[-1]["type"] == "turn_end" and events[-1]["stop_reason"] == "end_turn"
    else:
        assert events[-1]["type"] == "turn_end" and events[-1]["stop_reason"] == "cancelled"
    with anyio.fail_after(5):
        while any(running(pid) for pid in children):  # a killed child is reaped by then, an orphan would linger
            await anyio.sleep(0.05)
