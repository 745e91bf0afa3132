"""``session/continue`` against real ``ponder serve`` subprocesses and a provider replayed on
127.0.0.1: a turn cut off by a cancel, an error, the output limit or a kill -9 goes on without a
new prompt, and the request it sends is one the provider accepts (every tool call answered, no
unsigned thinking, no half-written tool arguments) (PROTOCOL.md "Steering, the queue and continuing")."""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import Any

import anyio
import pytest

from daemon.sessions.continuing import CONTINUE_TEXT, INTERRUPTED_RESULT
from tests.e2e.test_steering import SSE, daemon, rpc_error, slow_and_quick, start
from tests.support.harness import process_of, subprocess_env
from tests.support.replay import ReplayServer, ScriptedResponse
from tests.support.steer_streams import FAMILIES, anthropic_text, anthropic_tools, user_turn_after_results

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def check_anthropic_body(body: dict[str, Any]) -> None:
    """What the Messages API insists on: alternating roles starting with the user, every tool_use
    answered by a tool_result at the head of the next user message, thinking only when signed,
    no empty text."""
    messages = body["messages"]
    assert messages[0]["role"] == "user"
    for a, b in itertools.pairwise(messages):
        assert a["role"] != b["role"], "roles alternate"
    for i, message in enumerate(messages):
        blocks = (
            message["content"]
            if isinstance(message["content"], list)
            else [{"type": "text", "text": message["content"]}]
        )
        assert blocks, "no empty message"
        for block in blocks:
            if block["type"] == "text":
                assert block["text"], "no empty text block"
            if block["type"] == "thinking":
                assert block.get("signature"), "thinking is sent only with its signature"
        if message["role"] == "assistant":
            calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
            if calls:
                following = messages[i + 1]["content"]
                assert isinstance(following, list)
                results = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
                assert results == calls, "every call answered"
                kinds = [b["type"] for b in following]
                assert kinds[: len(results)] == ["tool_result"] * len(results), "results first"


def partial_stream(server: ReplayServer, body: bytes, cut: bytes) -> None:
    """Serve ``body`` up to ``cut`` then hang, as a provider still streaming."""
    head = body[: body.index(cut)]
    server.enqueue(ScriptedResponse(body=head, headers=SSE, content_length=len(body), hang_after_s=60))


async def test_continue_after_a_cancel_mid_tool_sends_the_results_and_goes_on(
    home, tmp_path, replay_server, anyio_backend
):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(30)), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Carrying on."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        nothing = await client.request("session/continue", {"session_id": session_id})
        assert nothing == {"turn_id": None, "action": "nothing_to_continue"}
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        await client.request("session/cancel", {"session_id": session_id})
        await log.turn_end(turn["turn_id"])
        continued = await client.request("session/continue", {"session_id": session_id})
        assert continued["action"] == "resumed"
        start_event = await log.wait_for(lambda e: e["type"] == "turn_start" and e["turn_id"] == continued["turn_id"])
        end = await log.turn_end(continued["turn_id"])
        done = await client.request("session/continue", {"session_id": session_id})
    assert start_event["continued_from"] == turn["turn_id"] and start_event["user_message_id"] is None
    assert end["stop_reason"] == "end_turn"
    assert done["action"] == "nothing_to_continue"  # a complete reply: nothing to go on with
    body = replay_server.requests[1].json()
    check_anthropic_body(body)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]  # no new user text


async def test_continue_while_a_turn_runs_is_busy(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(2)), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("ok"), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start")
        busy = await rpc_error(client.request("session/continue", {"session_id": session_id}))
        await log.turn_end(turn["turn_id"])
    assert busy.code == -32004 and busy.data["reason"] == "turn_running"


async def test_continue_after_the_output_limit_adds_a_continue_message(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("The first half of", stop="max_tokens"), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text(" the answer."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Answer."})
        assert (await log.turn_end(turn["turn_id"]))["stop_reason"] == "max_tokens"
        continued = await client.request("session/continue", {"session_id": session_id})
        start_event = await log.wait_for(lambda e: e["type"] == "turn_start" and e["turn_id"] == continued["turn_id"])
        await log.turn_end(continued["turn_id"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    added = messages[2]
    assert added["role"] == "user" and added["origin"] == "continue" and added["content"][0]["text"] == CONTINUE_TEXT
    assert start_event["user_message_id"] == added["message_id"] and start_event["continued_from"] == turn["turn_id"]
    body = replay_server.requests[1].json()
    check_anthropic_body(body)
    assert body["messages"][-1] == {"role": "user", "content": CONTINUE_TEXT}
    assert body["messages"][-2]["content"] == [{"type": "text", "text": "The first half of"}]


async def test_unsigned_thinking_and_unfinished_arguments_are_not_sent(home, tmp_path, replay_server, anyio_backend):
    # Thinking without its signature, a whole call, then a call cut mid-arguments; then cancel.
    def block(kind: str, index: int, **payload: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "index": index, **payload}

    def call(index: int, call_id: str) -> tuple[str, dict[str, Any]]:
        return block("content_block_start", index, content_block={"type": "tool_use", "id": call_id,
                                                                  "name": "run_command", "input": {}})  # fmt: skip

    def args(index: int, partial: str) -> tuple[str, dict[str, Any]]:
        return block("content_block_delta", index, delta={"type": "input_json_delta", "partial_json": partial})

    message = {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
               "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip
    events = [
        ("message_start", {"type": "message_start", "message": message}),
        block("content_block_start", 0, content_block={"type": "thinking", "thinking": ""}),
        block("content_block_delta", 0, delta={"type": "thinking_delta", "thinking": "Let me"}),
        block("content_block_stop", 0),
        call(1, "call_done"),
        args(1, '{"command": "echo hi"}'),
        block("content_block_stop", 1),
        call(2, "call_half"),
        args(2, '{"command": "rm -'),
    ]
    body = "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events).encode()
    replay_server.enqueue(ScriptedResponse(body=body, headers=SSE, content_length=len(body) + 500, hang_after_s=60))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Going on."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_call_delta" and e["call_id"] == "call_half")
        await client.request("session/cancel", {"session_id": session_id})
        await log.turn_end(turn["turn_id"])
        continued = await client.request("session/continue", {"session_id": session_id})
        await log.turn_end(continued["turn_id"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert messages[1]["status"] == "interrupted"
    assert [b.get("call_id") for b in messages[1]["content"] if b["type"] == "tool_call"] == ["call_done", "call_half"]
    sent = replay_server.requests[1].json()
    check_anthropic_body(sent)
    text = json.dumps(sent)
    assert "call_half" not in text and "rm -" not in text and "Let me" not in text
    assert "call_done" in text


async def test_continue_after_kill_9_mid_tool_and_a_restart(home, tmp_path, replay_server, anyio_backend):
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(slow_and_quick(30)), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start" and e["call_id"] == "call_slow")
        await anyio.sleep(0.3)
        process_of(client).kill()
        await process_of(client).wait()
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Checked and carried on."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        continued = await client.request("session/continue", {"session_id": session_id})
        assert continued["action"] == "resumed"
        start_event = await log.wait_for(lambda e: e["type"] == "turn_start" and e["turn_id"] == continued["turn_id"])
        end = await log.turn_end(continued["turn_id"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert start_event["continued_from"] == turn["turn_id"]
    assert end["stop_reason"] == "end_turn"
    results = messages[2]
    assert results["role"] == "tool"
    assert [(b["call_id"], b["is_error"], b["text"]) for b in results["content"]] == [
        ("call_slow", True, INTERRUPTED_RESULT),
        ("call_quick", True, INTERRUPTED_RESULT),
    ]
    body = replay_server.requests[-1].json()
    check_anthropic_body(body)
    answered = body["messages"][2]["content"]
    assert [(b["tool_use_id"], b.get("is_error"), b["content"]) for b in answered] == [
        ("call_slow", True, INTERRUPTED_RESULT),
        ("call_quick", True, INTERRUPTED_RESULT),
    ]


async def test_continue_after_kill_9_mid_stream(home, tmp_path, replay_server, anyio_backend):
    long = anthropic_text("Part of an answer. " * 200, pieces=40)
    replay_server.enqueue(
        ScriptedResponse(body=long, headers=SSE, split_at=list(range(300, len(long), 300)), chunk_delay_s=0.15)
    )
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Write."})
        await log.wait_for(lambda e: e["type"] == "text_delta")
        await anyio.sleep(1.5)  # at least one checkpoint of the partial reply
        process_of(client).kill()
        await process_of(client).wait()
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("The rest."), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        continued = await client.request("session/continue", {"session_id": session_id})
        start_event = await log.wait_for(lambda e: e["type"] == "turn_start" and e["turn_id"] == continued["turn_id"])
        await log.turn_end(continued["turn_id"])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert messages[1]["status"] == "interrupted" and messages[1]["content"][0]["text"].startswith("Part of an answer.")
    assert messages[2]["origin"] == "continue"
    assert (
        start_event["continued_from"] == turn["turn_id"] and start_event["user_message_id"] == messages[2]["message_id"]
    )
    body = replay_server.requests[-1].json()
    check_anthropic_body(body)
    assert body["messages"][-1] == {"role": "user", "content": CONTINUE_TEXT}


async def cut_off_for_the_command_line(home, tmp_path, replay_server, anyio_backend) -> tuple[str, dict[str, str]]:
    """A session whose reply was cut off at the output limit, the rest queued on the server; its
    id and the environment a ``ponder`` command needs to reach that server."""
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("The first half", stop="max_tokens"), headers=SSE))
    async with daemon(home, anyio_backend, replay_server) as (client, log):
        session_id = await start(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Answer."})
        await log.turn_end(turn["turn_id"])
    replay_server.enqueue(ScriptedResponse(body=anthropic_text(" and the rest."), headers=SSE))
    env = {
        **os.environ,
        **subprocess_env(home, {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": replay_server.url}),
    }
    return session_id, env


async def test_ponder_continue_session_on_the_command_line(home, tmp_path, replay_server, anyio_backend):
    session_id, env = await cut_off_for_the_command_line(home, tmp_path, replay_server, anyio_backend)
    command = [sys.executable, "-m", "daemon", "continue", session_id]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, check=False)
        again = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "and the rest."
    assert again.returncode == 0 and b"nothing to continue" in again.stderr
    body = replay_server.requests[-1].json()
    assert body["messages"][-1] == {"role": "user", "content": CONTINUE_TEXT}


async def test_ponder_continue_json_is_framed_like_ask_json(home, tmp_path, replay_server, anyio_backend):
    session_id, env = await cut_off_for_the_command_line(home, tmp_path, replay_server, anyio_backend)
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-m", "daemon", "continue", "--json", session_id], env=env, check=False
        )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["session_id"] == session_id
    assert lines[0]["protocol_version"] == 1
    assert lines[1]["type"] == "turn_start" and lines[-2]["type"] == "turn_end"
    assert lines[-1]["type"] == "result" and lines[-1]["status"] == "success" and lines[-1]["exit_code"] == 0
    assert lines[-1]["result"] == " and the rest." and lines[-1]["session_id"] == session_id


@pytest.mark.parametrize("family_name", sorted(FAMILIES))
async def test_every_provider_gets_an_answer_for_each_interrupted_call(
    family_name, home, tmp_path, replay_server, anyio_backend
):
    family = FAMILIES[family_name]
    family.enqueue_tools(replay_server, slow_and_quick(30))
    async with daemon(home, anyio_backend, replay_server, family) as (client, log):
        session_id = await start(client, tmp_path, family)
        await client.request("session/prompt", {"session_id": session_id, "text": "Go."})
        await log.wait_for(lambda e: e["type"] == "tool_execution_start" and e["call_id"] == "call_slow")
        process_of(client).kill()
        await process_of(client).wait()
    family.enqueue_text(replay_server, "Checked.")
    async with daemon(home, anyio_backend, replay_server, family) as (client, log):
        continued = await client.request("session/continue", {"session_id": session_id})
        end = await log.turn_end(continued["turn_id"])
    assert end["stop_reason"] == "end_turn", end
    shape = user_turn_after_results(family_name, replay_server.requests[-1].json())
    assert [item for item in shape if item != "|"] == [("result", "call_slow"), ("result", "call_quick")]
    assert INTERRUPTED_RESULT in json.dumps(replay_server.requests[-1].json())
