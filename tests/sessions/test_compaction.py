"""Compaction end to end: a small-window model on a local OpenAI-compatible server (real HTTP),
the daemon in process with a real SQLite store.

The done-when test of issue #19 runs 40 turns with tool output on an 8k window: no overflow
reaches the client, every message stays in the store, and the compaction records come back
in ``items`` in order. The others cover manual compaction (completed and skipped), overflow
then retry, ``auto = false``, and fork/delete with compactions.
"""

import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient
from tests.support.compaction_turns import compact, of_type, prompt
from tests.support.harness import in_memory_daemon, subprocess_env
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


def write_config(home: Path, url: str, **options: Any) -> None:
    (home / "config.toml").write_text(small_window_config(url, **options))


@asynccontextmanager
async def session_on(
    home: Path, cwd: Path, chat: SmallWindowChat, **options: Any
) -> AsyncIterator[tuple[RpcClient, str]]:
    """A daemon in process whose ``local/small`` model is ``chat`` on a local server, and a session in ``cwd``."""
    with ReplayServer() as server:
        chat.install(server)
        write_config(home, server.url, **options)
        async with in_memory_daemon(home) as (client, _daemon):
            yield client, await start(client, cwd)


async def test_forty_turns_on_an_8k_window_compact_automatically_and_lose_nothing(home, tmp_path, capsys):
    cwd = project(tmp_path, 40)
    chat = SmallWindowChat(window=8_000)
    async with session_on(home, cwd, chat) as (client, session_id):
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
    # What the server counted for the first request after each compaction (its JSON, 4 characters a token).
    served_after = [chat.answers[i + 1].prompt_tokens for i, a in enumerate(chat.answers) if a.kind == "summary"]
    assert all(served < record["tokens_before"] for served, record in zip(served_after, records, strict=True))
    summary_in = sum(a.prompt_tokens for a in summaries)
    summary_out = sum(a.completion_tokens for a in summaries)
    with capsys.disabled():
        print(
            f"\n40 turns, 8k window: {len(records)} compactions (trigger, tokens_before, tokens_after, first_kept_seq):"
        )
        for figure, served in zip(figures, served_after, strict=True):
            print("  ", figure, "next request as served:", served)
        print(f"summary calls: {len(summaries)}, {summary_in} input + {summary_out} output tokens; "
              f"all calls: {sum(a.prompt_tokens for a in chat.answers)} input tokens")  # fmt: skip


async def test_the_store_keeps_every_message_and_one_row_per_compaction(home, tmp_path):
    cwd = project(tmp_path, 12)
    chat = SmallWindowChat(window=8_000)
    async with session_on(home, cwd, chat) as (client, session_id):
        for n in range(12):
            await prompt(client, session_id, f"Turn {n}: look at module {n}.")
    db = sqlite3.connect(home / "sessions.db")
    assert db.execute("SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()[0] == 48
    rows = db.execute("SELECT seq, first_kept_seq FROM compactions WHERE session_id = ? ORDER BY seq", (session_id,))
    assert len(rows.fetchall()) >= 2


BIG_WINDOW = {"window": 100_000, "extra": "keep_recent_tokens = 500"}


async def three_turns(client: RpcClient, session_id: str) -> None:
    for n in range(3):
        events = await prompt(client, session_id, f"Turn {n}: look at module {n}.")
        assert of_type(events, "compaction_start") == []  # far from the window: nothing automatic


async def test_manual_compaction_completes_in_its_own_turn_and_later_requests_send_the_summary(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        events = await compact(client, session_id, "Keep the file names.")
        after = await prompt(client, session_id, "Turn 3: look at module 3.")
        resumed = await client.request("session/resume", {"session_id": session_id})

    turn_start, start_event, end_event, turn_end = (
        of_type(events, kind)[0] for kind in ("turn_start", "compaction_start", "compaction_end", "turn_end")
    )
    assert (turn_start["kind"], turn_start["user_message_id"]) == ("compaction", None)
    assert start_event["trigger"] == "manual" and start_event["tokens_before"] > 0
    assert end_event["status"] == "completed" and "## Goal" in end_event["summary"]
    assert end_event["tokens_after"] < start_event["tokens_before"]
    assert end_event["usage"]["input_tokens"] == chat.of_kind("summary")[0].prompt_tokens
    assert turn_end["stop_reason"] == "end_turn" and turn_end["usage"]["input_tokens"] > 0
    assert {e["turn_id"] for e in events} == {turn_start["turn_id"]}
    assert of_type(after, "compaction_start") == []
    # The summarizer got the instructions; the next request starts with the summary, not the first prompt.
    summary_body = json.dumps(chat.of_kind("summary")[0].body)
    assert "Keep the file names." in summary_body and "Turn 0: look at module 0." in summary_body
    next_body = json.dumps(chat.answers[-2].body["messages"])
    assert "<summary>" in next_body and "Turn 0: look at module 0." not in next_body
    assert "Turn 3: look at module 3." in next_body
    # Nothing is deleted: all 16 messages, and the record between them.
    kinds = [item["kind"] for item in resumed["items"]]
    assert len(resumed["messages"]) == 16 and kinds.count("compaction") == 1
    record = resumed["items"][kinds.index("compaction")]
    assert record["seq"] == 12 and record["compaction_id"] == end_event["compaction_id"]
    assert record["trigger"] == "manual" and record["model_id"] == "local/small"
    # The summary call counts in the session's totals like every model call (budgets see it).
    assert chat.of_kind("summary")[0] in chat.answers
    assert resumed["session"]["totals"]["input_tokens"] == sum(call.prompt_tokens for call in chat.answers)


async def test_manual_compaction_with_nothing_old_enough_is_skipped_and_stores_nothing(home, tmp_path):
    cwd = project(tmp_path, 1)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await prompt(client, session_id, "Turn 0: look at module 0.")
        events = await compact(client, session_id)
        resumed = await client.request("session/resume", {"session_id": session_id})
    assert [e["status"] for e in of_type(events, "compaction_end")] == ["skipped"]
    assert of_type(events, "turn_end")[0]["stop_reason"] == "end_turn"
    assert chat.of_kind("summary") == []  # no summarizer call for nothing to fold
    assert [item["kind"] for item in resumed["items"]] == ["message"] * 4


async def test_an_overflow_compacts_and_retries_the_request_once_inside_the_turn(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        chat.overflow_next = 1  # the provider refuses the next request as too long
        events = await prompt(client, session_id, "Turn 3: look at module 3.")
    turn_ids = {e["turn_id"] for e in events}
    assert len(turn_ids) == 1  # inside the prompt's own turn
    starts, ends = of_type(events, "compaction_start"), of_type(events, "compaction_end")
    assert [s["trigger"] for s in starts] == ["overflow"] and [e["status"] for e in ends] == ["completed"]
    assert of_type(events, "turn_end")[0] == {
        **of_type(events, "turn_end")[0],
        "stop_reason": "end_turn",
        "error": None,
    }
    assert [a.kind for a in chat.answers[-5:]] == ["text", "overflow", "summary", "tool_call", "text"]
    retried = chat.answers[-2].body["messages"]
    assert "<summary>" in json.dumps(retried)


async def test_auto_off_an_overflow_ends_the_turn_with_an_error_that_says_to_compact(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, auto=False, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        chat.overflow_next = 1
        events = await prompt(client, session_id, "Turn 3: look at module 3.")
        resumed = await client.request("session/resume", {"session_id": session_id})
    assert of_type(events, "compaction_start") == [] and chat.of_kind("summary") == []
    end = of_type(events, "turn_end")[0]
    assert end["stop_reason"] == "error" and end["error"]["provider_status"] == 400
    assert "session/compact" in end["error"]["message"] and "/compact" in end["error"]["message"]
    assert len(resumed["messages"]) == 13 and all(i["kind"] == "message" for i in resumed["items"])


async def test_auto_off_never_compacts_on_the_threshold(home, tmp_path):
    cwd = project(tmp_path, 10)
    chat = SmallWindowChat(window=8_000)
    async with session_on(home, cwd, chat, auto=False) as (client, session_id):
        ends = []
        for n in range(10):
            events = await prompt(client, session_id, f"Turn {n}: look at module {n}.")
            assert of_type(events, "compaction_start") == []
            ends.append(of_type(events, "turn_end")[-1])
    # Past the window the provider's overflow ends the turn with the error that says how to compact.
    assert ends[0]["stop_reason"] == "end_turn"
    assert ends[-1]["stop_reason"] == "error" and "compact" in ends[-1]["error"]["message"]
    assert chat.of_kind("summary") == []


async def test_fork_copies_the_compactions_in_range_and_delete_removes_them(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        await compact(client, session_id)
        await prompt(client, session_id, "Turn 3: look at module 3.")
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        whole = (await client.request("session/fork", {"session_id": session_id}))["session"]["session_id"]
        early_id = messages[11]["message_id"]  # seq 12: the compaction's own seq
        before_id = messages[10]["message_id"]
        at = await client.request("session/fork", {"session_id": session_id, "message_id": early_id})
        before = await client.request("session/fork", {"session_id": session_id, "message_id": before_id})

        async def records(sid: str) -> list[dict[str, Any]]:
            items = (await client.request("session/messages", {"session_id": sid}))["items"]
            return [i for i in items if i["kind"] == "compaction"]

        original = await records(session_id)
        assert len(original) == 1
        forked = await records(whole)
        assert [(r["seq"], r["summary"]) for r in forked] == [(r["seq"], r["summary"]) for r in original]
        assert forked[0]["compaction_id"] != original[0]["compaction_id"]
        assert len(await records(at["session"]["session_id"])) == 1
        assert await records(before["session"]["session_id"]) == []
        # The fork's next request is folded at its copy of the compaction.
        await prompt(client, whole, "Turn 4: look at module 3.")
        assert "<summary>" in json.dumps(chat.answers[-2].body["messages"])
        await client.request("session/delete", {"session_id": session_id})
    db = sqlite3.connect(home / "sessions.db")
    assert db.execute("SELECT count(*) FROM compactions WHERE session_id = ?", (session_id,)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM compactions WHERE session_id = ?", (whole,)).fetchone()[0] == 1


async def test_session_messages_pages_carry_the_compactions_of_their_range(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        await compact(client, session_id)
        await prompt(client, session_id, "Turn 3: look at module 3.")
        first = await client.request("session/messages", {"session_id": session_id, "limit": 8})
        second = await client.request(
            "session/messages", {"session_id": session_id, "after_seq": first["next_seq"], "limit": 8}
        )
    assert [i["kind"] for i in first["items"]] == ["message"] * 8
    assert [i["kind"] for i in second["items"]] == ["message"] * 4 + ["compaction"] + ["message"] * 4


async def test_ponder_compact_on_the_command_line(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    with ReplayServer() as server:
        chat.install(server)
        write_config(home, server.url, **BIG_WINDOW)
        async with in_memory_daemon(home) as (client, _daemon):
            session_id = await start(client, cwd)
            await three_turns(client, session_id)
        command = [sys.executable, "-m", "daemon", "--home", str(home)]
        env = subprocess_env(home)
        compacted = await anyio.run_process([*command, "compact", session_id, "keep", "the", "paths"], env=env,
                                            check=False)  # fmt: skip
        again = await anyio.run_process([*command, "compact", session_id], env=env, check=False)
        shown = await anyio.run_process([*command, "sessions", session_id], env=env, check=False)
        unknown = await anyio.run_process([*command, "compact", "ses_nope"], env=env, check=False)
    assert compacted.returncode == 0, compacted.stderr
    assert compacted.stdout.decode().startswith("Compacted cmp_") and "→" in compacted.stdout.decode()
    assert "keep the paths" in json.dumps(chat.of_kind("summary")[0].body)
    assert (again.returncode, again.stdout.decode().strip()) == (
        0,
        "Nothing to compact yet: the conversation is all recent.",
    )
    assert "[12] compaction (manual, about " in shown.stdout.decode()
    assert unknown.returncode != 0 and b"ses_nope" in unknown.stderr


async def test_a_tool_batch_past_the_threshold_compacts_inside_its_turn(home, tmp_path):
    cwd = project(tmp_path, 3)
    big = "".join(f"    value_{i} = compute_{i}(value_{i - 1})  # step {i} of the big module\n" for i in range(200))
    (cwd / "src" / "m2.py").write_text(f"def big():\n{big}")
    chat = SmallWindowChat(window=8_000)
    async with session_on(home, cwd, chat) as (client, session_id):
        for n in range(2):
            assert of_type(await prompt(client, session_id, f"Turn {n}: look at module {n}."), "compaction_start") == []
        events = await prompt(client, session_id, "Turn 2: look at module 2.")
        resumed = await client.request("session/resume", {"session_id": session_id})
    assert len({e["turn_id"] for e in events}) == 1  # inside the prompt's own brackets
    types = [e["type"] for e in events]
    assert types.index("tool_execution_end") < types.index("compaction_start") < types.index("compaction_end")
    assert types.index("compaction_end") < types.index("turn_end")
    [start_event], [end_event] = of_type(events, "compaction_start"), of_type(events, "compaction_end")
    assert start_event["trigger"] == "threshold" and end_event["status"] == "completed"
    assert of_type(events, "turn_end")[0]["stop_reason"] == "end_turn"
    [record] = [i for i in resumed["items"] if i["kind"] == "compaction"]
    assert record["seq"] == 11 and record["first_kept_seq"] == 9  # after the tool result; turn 2 is kept whole
    # The answer after the tool batch was asked with the summary and turn 2 only.
    after = json.dumps(chat.answers[-1].body["messages"])
    assert "<summary>" in after and "Turn 0: look at module 0." not in after and "Turn 2: look at module 2." in after


async def test_a_compaction_asked_for_during_a_turn_is_queued_and_runs_after_it(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Turn 3: module 3."})
        queued = await client.request("session/compact", {"session_id": session_id})
        events = []
        async with aclosing(client.events()) as stream:
            async for event in stream:
                events.append(event)
                if event["type"] == "turn_end" and event["turn_id"] != turn["turn_id"]:
                    break
    assert queued["queued"] is True
    events = [e for e in events if e["type"] != "queue_update"]  # the queue's changes belong to no turn
    prompt_end = next(i for i, e in enumerate(events) if e["type"] == "turn_end")
    assert events[prompt_end]["turn_id"] == turn["turn_id"]
    compaction_events = events[prompt_end + 1 :]
    # The summary call is a model call: its usage event comes before the compaction ends.
    assert [e["type"] for e in compaction_events] == [
        "turn_start",
        "compaction_start",
        "usage",
        "compaction_end",
        "turn_end",
    ]
    assert compaction_events[1]["compaction_id"] == queued["compaction_id"]
    assert compaction_events[3]["status"] == "completed"
    assert compaction_events[2]["usage"] == compaction_events[3]["usage"]


async def test_cancelling_a_compaction_ends_it_cancelled_and_stores_nothing(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000, summary_delay_s=5.0)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        await client.request("session/compact", {"session_id": session_id})
        events = []
        async with aclosing(client.events()) as stream:
            async for event in stream:
                events.append(event)
                if event["type"] == "compaction_start":
                    # Cancel while the summarizer thinks (its request sent, its answer held back).
                    assert await anyio.to_thread.run_sync(chat.summary_requested.wait, 5)
                    cancelled = await client.request("session/cancel", {"session_id": session_id})
                if event["type"] == "turn_end":
                    break
        resumed = await client.request("session/resume", {"session_id": session_id})
    assert cancelled["cancelled"] is True
    assert [e["status"] for e in of_type(events, "compaction_end")] == ["cancelled"]
    assert of_type(events, "turn_end")[0]["stop_reason"] == "cancelled"
    assert [i["kind"] for i in resumed["items"]] == ["message"] * 12


async def test_a_rate_limited_summarizer_is_retried_like_a_reply(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000, summary_rate_limited=2)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        events = await compact(client, session_id)
    retries = of_type(events, "retry")
    assert [r["attempt"] for r in retries] == [2, 3] and retries[0]["error"]["provider_status"] == 429
    assert [e["status"] for e in of_type(events, "compaction_end")] == ["completed"]
    assert [a.kind for a in chat.answers[-3:]] == ["rate_limited", "rate_limited", "summary"]


async def test_a_queued_compaction_dropped_by_a_cancel_still_ends_once(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    async with session_on(home, cwd, chat, **BIG_WINDOW) as (client, session_id):
        await three_turns(client, session_id)
        chat.reply_delay_s = 2.0
        chat.reply_requested.clear()
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Turn 3: module 3."})
        queued = await client.request("session/compact", {"session_id": session_id})
        assert await anyio.to_thread.run_sync(chat.reply_requested.wait, 5)  # the turn waits for its answer
        cancelled = await client.request("session/cancel", {"session_id": session_id})
        events = []
        async with aclosing(client.events()) as stream:
            async for event in stream:
                events.append(event)
                if len(of_type(events, "turn_end")) == 2:
                    break
    assert queued["queued"] is True and cancelled == {"cancelled": True, "dropped_queued": 1, "dropped_steers": []}
    dropped = [e for e in events if e["turn_id"] not in (turn["turn_id"], None)]
    assert [e["type"] for e in dropped] == ["turn_start", "compaction_end", "turn_end"]
    assert dropped[0]["kind"] == "compaction" and dropped[0]["user_message_id"] is None
    assert dropped[1]["compaction_id"] == queued["compaction_id"] and dropped[1]["status"] == "cancelled"
    assert dropped[2]["stop_reason"] == "cancelled"
    assert chat.of_kind("summary") == []


async def test_a_spent_budget_stops_summary_calls_manual_and_automatic(home, tmp_path):
    # A summary is a model call: with the session's token budget spent, a manual compaction ends
    # "budget" (its one compaction_end failed, saying which budget) and the automatic one before
    # the next prompt is not made; that prompt ends "budget" too, with no request at all.
    cwd = project(tmp_path, 8)
    chat = SmallWindowChat(window=8_000)
    async with session_on(home, cwd, chat) as (client, session_id):
        for n in range(5):  # past the threshold: each prompt from the fourth on compacts first
            await prompt(client, session_id, f"Turn {n}: look at module {n} and fix what is wrong.")
        await client.request("session/budget", {"session_id": session_id, "budget": {"max_tokens": 1}})
        requests_before = len(chat.answers)
        later = await prompt(client, session_id, "Turn 5: look at module 5 and fix what is wrong.")
        manual = await compact(client, session_id)
    (end,) = of_type(manual, "compaction_end")
    assert end["status"] == "failed" and "token budget" in end["error"]["message"]
    assert of_type(manual, "compaction_start") == [] and of_type(manual, "turn_end")[0]["stop_reason"] == "budget"
    assert of_type(later, "compaction_end") == [] and len(of_type(later, "turn_start")) == 1  # no compaction turn
    assert of_type(later, "turn_end")[-1]["stop_reason"] == "budget"
    assert len(chat.answers) == requests_before  # no summary call, no reply
