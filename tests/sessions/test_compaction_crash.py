"""SIGKILL during a compaction (a real ``ponder serve`` subprocess, a real SQLite file): the history
is intact and the compaction is stored whole or not at all; the session stays usable."""

import sqlite3
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient
from tests.sessions.test_compaction import project
from tests.support.harness import process_of, subprocess_daemon
from tests.support.replay import ReplayServer
from tests.support.small_window import SmallWindowChat, small_window_config

pytestmark = pytest.mark.anyio


async def next_event(client: RpcClient, kind: str) -> dict[str, Any]:
    async with aclosing(client.events()) as stream:
        async for event in stream:
            if event["type"] == kind:
                return event
    raise AssertionError(f"the daemon ended before {kind}")


async def kill(client: RpcClient) -> None:
    process = process_of(client)
    process.kill()  # SIGKILL: nothing in flight is finished
    await process.wait()
    with anyio.fail_after(5):
        async for _ in client.notifications:
            pass


def stored(home: Path, session_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    db = sqlite3.connect(f"file:{home / 'sessions.db'}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        messages = db.execute("SELECT seq, role, status FROM messages WHERE session_id = ? ORDER BY seq", (session_id,))
        compactions = db.execute(
            "SELECT seq, trigger, summary, first_kept_seq, tokens_before, tokens_after, model_id FROM compactions "
            "WHERE session_id = ?",
            (session_id,),
        )
        return messages.fetchall(), compactions.fetchall()
    finally:
        db.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the client; the daemon runs each backend below
@pytest.mark.parametrize("daemon_backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kill_at", ["compaction_start", "compaction_end"])
async def test_sigkill_during_a_compaction_leaves_history_intact_and_the_record_whole_or_absent(
    home, tmp_path, anyio_backend, daemon_backend, kill_at
):
    cwd = project(tmp_path, 5)
    chat = SmallWindowChat(window=100_000, summary_delay_s=30.0 if kill_at == "compaction_start" else 0.0)
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(
            small_window_config(server.url, window=100_000, extra="keep_recent_tokens = 500")
        )
        async with subprocess_daemon(home, backend=daemon_backend) as client:
            result = await client.request(
                "session/start", {"model_id": "local/small", "cwd": str(cwd), "approval_policy": "auto"}
            )
            session_id = result["session"]["session_id"]
            for n in range(3):
                turn = await client.request(
                    "session/prompt", {"session_id": session_id, "text": f"Turn {n}: module {n}."}
                )
                assert (await client.collect_turn(turn["turn_id"]))[-1]["stop_reason"] == "end_turn"
            with anyio.fail_after(20):
                await client.request("session/compact", {"session_id": session_id})
                event = await next_event(client, kill_at)
            await kill(client)

        messages, compactions = stored(home, session_id)
        assert [seq for seq, _, _ in messages] == list(range(1, 13))
        assert all(status == "complete" for _, _, status in messages)
        if kill_at == "compaction_start":
            assert compactions == []  # the summary never came: nothing stored
        else:
            assert event["status"] == "completed"
            [(seq, trigger, summary, first_kept, before, after, model_id)] = compactions
            assert (seq, trigger, summary, after, model_id) == (
                12,
                "manual",
                event["summary"],
                event["tokens_after"],
                "local/small",
            )
            assert messages[first_kept - 1][1] == "user" and after < before

        chat.summary_delay_s = 0.0
        async with subprocess_daemon(home, backend=daemon_backend) as client:
            with anyio.fail_after(20):
                resumed = await client.request("session/resume", {"session_id": session_id})
                assert len(resumed["messages"]) == 12
                assert [i["kind"] for i in resumed["items"]].count("compaction") == len(compactions)
                turn = await client.request("session/prompt", {"session_id": session_id, "text": "Turn 3: module 3."})
                assert (await client.collect_turn(turn["turn_id"]))[-1]["stop_reason"] == "end_turn"
