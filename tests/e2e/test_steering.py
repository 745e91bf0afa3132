"""Steering a running turn, the visible queue and ``client_message_id``, against real ``ponder
serve`` subprocesses (on the test's own anyio backend) whose providers are replayed on 127.0.0.1
(PROTOCOL.md "Steering, the queue and continuing").

Each provider family gets the full sequence: a reply that calls two tools (one slow), two steers
sent while the slow one runs, and the request that follows, which must carry the tool results
first and the steers after them in that provider's valid shape."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient, RpcError
from tests.support.harness import subprocess_daemon
from tests.support.replay import ReplayServer, ScriptedResponse
from tests.support.steer_streams import FAMILIES, Family, anthropic_text, anthropic_tools, user_turn_after_results

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ANTHROPIC = FAMILIES["anthropic"]
SSE = {"content-type": "text/event-stream"}


class EventLog:
    """Every ``agent/event`` of a client, read in the background, with waits on what arrived."""

    def __init__(self, client: RpcClient) -> None:
        self.client = client
        self.events: list[dict[str, Any]] = []

    async def run(self) -> None:
        async for event in self.client.events():
            self.events.append(event)

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        with anyio.move_on_after(timeout):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                await anyio.sleep(0.01)
        seen = [(e["type"], e.get("turn_id"), e.get("stop_reason"), e.get("error")) for e in self.events]
        raise AssertionError(f"no such event in {timeout} s; the events so far: {seen}"[:4000])

    async def turn_end(self, turn_id: str, timeout: float = 20) -> dict[str, Any]:
        return await self.wait_for(lambda e: e["type"] == "turn_end" and e["turn_id"] == turn_id, timeout)

    def of_turn(self, turn_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("turn_id") == turn_id]

    def queue_updates(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "queue_update"]


@asynccontextmanager
async def daemon(
    home: Any, backend: str, server: ReplayServer, family: Family = ANTHROPIC, **options: Any
) -> AsyncIterator[tuple[RpcClient, EventLog]]:
    async with subprocess_daemon(home, env=family.daemon_env(server), backend=backend, **options) as client:
        log = EventLog(client)
        async with anyio.create_task_group() as tg:
            tg.start_soon(log.run)
            yield client, log
            tg.cancel_scope.cancel()


async def start(client: RpcClient, cwd: Any, family: Family = ANTHROPIC, **extra: Any) -> str:
    started = await client.request(
        "session/start",
        {"model_id": family.model_id, "thinking_level": "off", "cwd": str(cwd), "approval_policy": "auto", **extra},
    )
    return started["session"]["session_id"]


def slow_and_quick(seconds: float = 1.5) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("call_slow", "run_command", {"command": f"sleep {seconds}; echo slow-done"}),
        ("call_quick", "run_command", {"command": "echo quick-done"}),
    ]


async def rpc_error(awaitable: Any) -> RpcError:
    with pytest.raises(RpcError) as caught:
        await awaitable
    return caught.value


# --- the steer joins after the tools, in each provider's shape --------------------------------------


@pytest.mark.parametrize("family_name", sorted(FAMILIES))
async def test_steers_join_after_every_tool_in_the_providers_shape(
    family_name, home, tmp_path, replay_server, anyio_backend
):
    family = FAMILIES[family_name]
    family.enqueue_tools(replay_server, slow_and_quick())
    family.enqueue_text(replay_server, "Using the other file now.")
    async with daemon(home, anyio_backend, replay_server, family) as (client, log):
        session_id = await start(client, tmp_path, family)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Fix the bug."})
        assert turn["delivery"] == "started" and turn["queued"] is False
        await log.wait_for(lambda e: e["type"] == "tool_execution_start" and e["call_id"] == "call_slow")
        first = await client.request(
            "session/prompt",
            {"session_id": session_id, "text": "No, use the other file.", "delivery": "steer",
             "expected_turn_id": turn["turn_id"]},
        )  # fmt: skip
        second = await client.request(
            "session/prompt", {"session_id": session_id, "text": "And keep it short.", "delivery": "steer"}
        )
        for answer in (first, second):
            assert answer["turn_id"] == turn["turn_id"]
            assert answer["delivery"] == "steer_pending" and answer["queued"] is False
        waiting = await client.request("session/get", {"session_id": session_id})
        assert [s["text"] for s in waiting["session"]["queue"]["steers"]] == [
            "No, use the other file.",
            "And keep it short.",
        ]
        end = await log.turn_end(turn["turn_id"])
        session = await client.request("session/get", {"session_id": session_id})
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert end["stop_reason"] == "end_turn", end
    events = log.of_turn(turn["turn_id"])
    kinds = [e["type"] for e in events]
    assert kinds.count("turn_start") == 1  # the steers joined this turn: no turn of their own
    # Both tools ran to their end (the slow one was not skipped) before any steer joined.
    ends = [i for i, e in enumerate(events) if e["type"] == "tool_execution_end"]
    user_starts = [i for i, e in enumerate(events) if e["type"] == "message_start" and e["role"] == "user"]
    assert len(ends) == 2 and len(user_starts) == 2 and max(ends) < min(user_starts)
    results_text = " ".join(e["result"] for e in events if e["type"] == "tool_execution_end")
    assert "slow-done" in results_text and "quick-done" in results_text
    joined = [e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "user"]
    assert [(m["message_id"], m["origin"]) for m in joined] == [
        (first["message_id"], "steer"),
        (second["message_id"], "steer"),
    ]
    # The queue was shown as it changed: one steer, two, then none once they joined.
    shown = [[s["message_id"] for s in e["steers"]] for e in log.queue_updates()]
    assert shown == [[first["message_id"]], [first["message_id"], second["message_id"]], []]
    assert all(e["turn_id"] is None for e in log.queue_updates())
    assert session["session"]["queue"] == {"steers": [], "queued": []}
    # Stored after the tool results, in arrival order, as user messages with origin "steer".
    roles = [(m["role"], m.get("origin")) for m in messages]
    assert roles == [
        ("user", "prompt"),
        ("assistant", None),
        ("tool", None),
        ("user", "steer"),
        ("user", "steer"),
        ("assistant", None),
    ]
    # The request after the tools: every result first, then the steers, in the provider's shape.
    body = replay_server.requests[-1].json()
    shape = user_turn_after_results(family_name, body)
    steer_texts = [("text", "No, use the other file."), ("text", "And keep it short.")]
    results = [("result", "call_slow"), ("result", "call_quick")]
    if family_name in ("anthropic", "gemini"):  # one user message (turn): results, then the text
        assert shape == [*results, *steer_texts], shape
    else:  # OpenAI: the tool outputs, then user messages after them
        flat = [item for item in shape if item != "|"]
        assert flat == [*results, *steer_texts], shape
        assert (
            shape.index("|") > 0
            and ("result", "call_quick") in shape[: shape.index(("text", "No, use the other file."))]
        )
    assert len(replay_server.requests) == 2


async def test_a_steer_during_a_reply_without_tools_adds_one_more_model_call(
    home, tmp_path, replay_server, anyio_backend
):
    body = anthropic_text("A long answer that goes the wrong way. " * 20, pieces=20)
    replay_server.enqueue(
        ScriptedResponse(body=body, headers=SSE, split_at=list(range(200, len(body), 200)), chunk_delay_s=0.1)
    )
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Right, the other way."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Explain."})
        await log.wait_for(lambda e: e["type"] == "text_delta")
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Go the other way.", "delivery": "steer"}
        )
        end = await log.turn_end(turn["turn_id"])
    assert steer["delivery"] == "steer_pending" and end["stop_reason"] == "end_turn"
    assert len(replay_server.requests) == 2
    messages = replay_server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[-1]["content"] == "Go the other way."


async def test_a_steer_waits_for_a_pending_permission_and_does_not_answer_it(
    home, tmp_path, replay_server, anyio_backend
):
    replay_server.enqueue(
        ScriptedResponse(
            body=anthropic_tools([("call_w", "write_file", {"path": "a.txt", "content": "x"})]), headers=SSE
        )
    )
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Done."), headers=SSE))
    asked = anyio.Event()
    release = anyio.Event()

    async def on_request(method: str, params: Any) -> Any:
        asked.set()
        await release.wait()
        return {"decision": "allow_once"}

    async with daemon(home, anyio_backend, replay_server, permission_requests=True, on_request=on_request) as (
        client,
        log,
    ):
        session_id = await start(client, tmp_path, approval_policy="ask")
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Write it."})
        with anyio.fail_after(20):
            await asked.wait()
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Name it b.txt next time.", "delivery": "steer"}
        )
        await anyio.sleep(0.3)
        assert len(replay_server.requests) == 1  # held while the permission waits
        release.set()
        end = await log.turn_end(turn["turn_id"])
    assert end["stop_reason"] == "end_turn"
    assert (tmp_path / "a.txt").read_text() == "x"  # the person's answer, not the steer, decided the tool
    shape = user_turn_after_results("anthropic", replay_server.requests[1].json())
    assert shape == [("result", "call_w"), ("text", "Name it b.txt next time.")]
    assert steer["turn_id"] == turn["turn_id"]


# --- the races ------------------------------------------------------------------------------------


async def test_a_steer_whose_turn_ends_first_starts_the_next_turn_ahead_of_queued_prompts(
    home, tmp_path, replay_server, anyio_backend
):
    # The reply streams slowly, then fails mid-stream: the turn ends "error" and the steer never joined it.
    head = anthropic_text("Working on it " * 30, pieces=30).split(b"event: message_delta")[0]
    failing = (
        head + b'event: error\ndata: {"type":"error","error":{"type":"invalid_request_error","message":"bad"}}\n\n'
    )
    replay_server.enqueue(
        ScriptedResponse(body=failing, headers=SSE, split_at=list(range(100, len(failing), 100)), chunk_delay_s=0.08)
    )
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Steered."), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Queued answered."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Start."})
        await log.wait_for(lambda e: e["type"] == "text_delta")
        queued = await client.request("session/prompt", {"session_id": session_id, "text": "Then this."})
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Actually, this first.", "delivery": "steer"}
        )
        assert queued["delivery"] == "queued" and steer["delivery"] == "steer_pending"
        first_end = await log.turn_end(turn["turn_id"])
        steer_start = await log.wait_for(
            lambda e: e["type"] == "turn_start" and e["user_message_id"] == steer["message_id"]
        )
        await log.turn_end(steer_start["turn_id"])
        await log.turn_end(queued["turn_id"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert first_end["stop_reason"] == "error"
    starts = [e for e in log.events if e["type"] == "turn_start"]
    assert [s["turn_id"] for s in starts] == [turn["turn_id"], steer_start["turn_id"], queued["turn_id"]]
    assert replay_server.requests[1].json()["messages"][-1]["content"] == "Actually, this first."
    steer_stored = next(m for m in messages if m["message_id"] == steer["message_id"])
    assert steer_stored["origin"] == "steer"


async def test_steers_naming_a_turn_that_is_not_running(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(1.0)), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("ok"), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("started by a steer"), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        idle = await rpc_error(
            client.request(
                "session/prompt",
                {"session_id": session_id, "text": "x", "delivery": "steer", "expected_turn_id": "turn_gone"},
            )
        )
        assert idle.code == -32007 and idle.data == {"active_turn_id": None, "reason": "no_active_turn"}
        queue_with_turn = await rpc_error(
            client.request("session/prompt", {"session_id": session_id, "text": "x", "expected_turn_id": "turn_gone"})
        )
        assert queue_with_turn.code == -32602
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        mismatch = await rpc_error(
            client.request(
                "session/prompt",
                {"session_id": session_id, "text": "x", "delivery": "steer", "expected_turn_id": "turn_other"},
            )
        )
        assert mismatch.code == -32007 and mismatch.data == {
            "active_turn_id": turn["turn_id"],
            "reason": "turn_mismatch",
        }
        with_level = await rpc_error(
            client.request(
                "session/prompt", {"session_id": session_id, "text": "x", "delivery": "steer", "thinking_level": "high"}
            )
        )
        assert with_level.code == -32602
        await log.turn_end(turn["turn_id"])
        # No turn running and no expected_turn_id: the steer starts a turn like a prompt, keeping its origin.
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Now this.", "delivery": "steer"}
        )
        assert steer["delivery"] == "started"
        start_event = await log.wait_for(lambda e: e["type"] == "turn_start" and e["turn_id"] == steer["turn_id"])
        await log.turn_end(steer["turn_id"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert start_event["user_message_id"] == steer["message_id"]
    assert next(m for m in messages if m["message_id"] == steer["message_id"])["origin"] == "steer"
    stored_texts = [b.get("text") for m in messages for b in m["content"] if m["role"] == "user"]
    assert "x" not in stored_texts  # refused steers stored nothing


async def test_a_steer_during_a_compaction_turn_is_refused(home, tmp_path, replay_server, anyio_backend):
    (home / "config.toml").write_text("[compaction]\nkeep_recent_tokens = 1\n")
    for i in range(3):
        replay_server.enqueue(ScriptedResponse(body=anthropic_text(f"Answer {i}: " + "words " * 300), headers=SSE))
    summary = anthropic_text("The summary.")
    replay_server.enqueue(ScriptedResponse(body=summary, headers=SSE, headers_delay_s=2.0))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        for i in range(3):
            turn = await client.request("session/prompt", {"session_id": session_id, "text": f"Question {i}"})
            await log.turn_end(turn["turn_id"])
        await client.request("session/compact", {"session_id": session_id})
        started = await log.wait_for(lambda e: e["type"] == "compaction_start")
        refused = await rpc_error(
            client.request("session/prompt", {"session_id": session_id, "text": "x", "delivery": "steer"})
        )
        named = await rpc_error(
            client.request(
                "session/prompt",
                {"session_id": session_id, "text": "x", "delivery": "steer", "expected_turn_id": started["turn_id"]},
            )
        )
        await log.turn_end(started["turn_id"])
    for error in (refused, named):
        assert error.code == -32007
        assert error.data == {"active_turn_id": started["turn_id"], "reason": "not_steerable"}


async def test_cancel_gives_pending_steers_back_and_stores_them_nowhere(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(30)), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Not that.", "delivery": "steer"}
        )
        queued = await client.request("session/prompt", {"session_id": session_id, "text": "Later."})
        cancelled = await client.request("session/cancel", {"session_id": session_id})
        end = await log.turn_end(turn["turn_id"])
        await log.turn_end(queued["turn_id"])
        await log.wait_for(lambda e: e["type"] == "queue_update" and not e["steers"] and not e["queued"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        session = await client.request("session/get", {"session_id": session_id})
    assert cancelled == {
        "cancelled": True,
        "dropped_queued": 1,
        "dropped_steers": [{"message_id": steer["message_id"], "text": "Not that.", "content": None}],
    }
    assert end["stop_reason"] == "cancelled"
    assert steer["message_id"] not in {m["message_id"] for m in messages}
    assert all(b.get("text") != "Not that." for m in messages for b in m["content"])
    assert session["session"]["queue"] == {"steers": [], "queued": []}
    assert len(replay_server.requests) == 1  # the steer reached no provider


# --- client_message_id and the editable queue ------------------------------------------------------


async def test_a_prompt_sent_twice_is_admitted_once(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(1.0)), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("one"), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("two"), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        params = {"session_id": session_id, "text": "Hello.", "client_message_id": "6f1c8a52-0001"}
        first = await client.request("session/prompt", params)
        again = await client.request("session/prompt", params)
        assert again == first
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        steer_params = {
            "session_id": session_id,
            "text": "Steer once.",
            "delivery": "steer",
            "client_message_id": "6f1c8a52-0002",
        }
        steer = await client.request("session/prompt", steer_params)
        assert await client.request("session/prompt", steer_params) == steer
        reused = await rpc_error(client.request("session/prompt", {**params, "text": "Something else."}))
        assert reused.code == -32602 and reused.data == {"reason": "client_message_id_reused"}
        await log.turn_end(first["turn_id"])
        assert await client.request("session/prompt", steer_params) == steer  # kept while its message is stored
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    users = [m for m in messages if m["role"] == "user"]
    assert [(m["content"][0]["text"], m["origin"]) for m in users] == [("Hello.", "prompt"), ("Steer once.", "steer")]
    assert len([e for e in log.events if e["type"] == "turn_start"]) == 1
    assert len(replay_server.requests) == 2


async def test_the_queue_can_be_seen_and_edited(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(2.0)), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("done"), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("kept"), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        dropped = await client.request("session/prompt", {"session_id": session_id, "text": "Drop me."})
        kept = await client.request("session/prompt", {"session_id": session_id, "text": "Keep me."})
        compaction = await client.request("session/compact", {"session_id": session_id})
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Steer to drop.", "delivery": "steer"}
        )
        queue = (await client.request("session/get", {"session_id": session_id}))["session"]["queue"]
        assert queue["steers"] == [{"message_id": steer["message_id"], "text": "Steer to drop."}]
        assert [(q["message_id"], q["text"], q["kind"]) for q in queue["queued"]] == [
            (dropped["message_id"], "Drop me.", "prompt"),
            (kept["message_id"], "Keep me.", "prompt"),
            (None, None, "compaction"),
        ]
        assert queue["queued"][0]["turn_id"] == dropped["turn_id"]
        assert await client.request(
            "session/queue/remove", {"session_id": session_id, "message_id": dropped["message_id"]}
        ) == {"removed": True}
        assert await client.request(
            "session/queue/remove", {"session_id": session_id, "message_id": steer["message_id"]}
        ) == {"removed": True}
        removed_end = await log.turn_end(dropped["turn_id"])
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert dropped["message_id"] not in {m["message_id"] for m in stored}
        delivered = await rpc_error(
            client.request("session/queue/remove", {"session_id": session_id, "message_id": turn["message_id"]})
        )
        unknown = await rpc_error(
            client.request("session/queue/remove", {"session_id": session_id, "message_id": "msg_nope"})
        )
        again = await rpc_error(
            client.request("session/queue/remove", {"session_id": session_id, "message_id": dropped["message_id"]})
        )
        await log.turn_end(turn["turn_id"])
        await log.turn_end(kept["turn_id"])
        compaction_turn = queue["queued"][2]["turn_id"]
        await log.turn_end(compaction_turn)
    assert removed_end["stop_reason"] == "cancelled"
    assert [e["type"] for e in log.of_turn(dropped["turn_id"])] == ["turn_start", "turn_end"]
    assert delivered.code == -32602 and delivered.data == {"reason": "already_delivered"}
    assert unknown.data == {"reason": "unknown_message_id"} and again.data == {"reason": "unknown_message_id"}
    last_update = [e for e in log.queue_updates()][-1]
    assert last_update["steers"] == [] and last_update["queued"] == []
    # The removed steer reached no provider; the kept prompt ran after the turn.
    bodies = [json.dumps(r.json()) for r in replay_server.requests]
    assert not any("Steer to drop." in b or "Drop me." in b for b in bodies)
    assert "Keep me." in bodies[2]
    assert compaction["queued"] is True


async def test_a_steer_with_an_image_joins_after_the_results_or_comes_back_whole(
    home, tmp_path, replay_server, anyio_backend
):
    from tests.sessions.test_prompt_content import png

    image = png()
    content = [
        {"type": "text", "text": "Like this one."},
        {"type": "image", "data": base64.b64encode(image).decode(), "mime_type": "image/png"},
    ]
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(1.0)), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Seen."), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(30)), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Draw."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        await client.request("session/prompt", {"session_id": session_id, "content": content, "delivery": "steer"})
        await log.turn_end(turn["turn_id"])
        second = await client.request("session/prompt", {"session_id": session_id, "text": "Again."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start" and e["turn_id"] == second["turn_id"])
        steer = await client.request(
            "session/prompt", {"session_id": session_id, "content": content, "delivery": "steer"}
        )
        cancelled = await client.request("session/cancel", {"session_id": session_id})
        await log.turn_end(second["turn_id"])
    joined = replay_server.requests[1].json()["messages"][-1]["content"]
    assert [b["type"] for b in joined] == ["tool_result", "tool_result", "text", "image"]
    assert base64.b64decode(joined[3]["source"]["data"]) == image
    [back] = cancelled["dropped_steers"]
    assert back["message_id"] == steer["message_id"] and back["text"] == "Like this one."
    assert back["content"][0] == {"type": "text", "text": "Like this one."}
    assert back["content"][1]["type"] == "image" and base64.b64decode(back["content"][1]["data"]) == image
