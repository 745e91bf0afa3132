"""Tool-call ids stay unique within a session even when the provider repeats one.

An Anthropic-compatible server (the replay server on 127.0.0.1) answers two prompts with
a tool call under the same id, as buggy proxies and some local servers do. The ACP client
must see two cards, ``session/load`` after a restart must show each with its own result,
and the provider must get its own ids back when the conversation goes on.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.agent.call_ids import PROVIDER_CALL_ID, ReplyCallIds, for_provider
from daemon.conversation import ChatMessage, Part
from tests.support.acp_harness import acp_daemon, drain, updates
from tests.support.faults import MESSAGE_START, MODEL, anthropic_env, block_stop, message_end, sse, streamed, text_reply
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio

REPEATED = "toolu_01SameIdEveryTime"


def tool_use_reply(call_id: str, name: str, arguments: dict[str, Any]) -> bytes:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)},
    }
    return sse(MESSAGE_START, start, delta, block_stop(), *message_end("tool_use"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    (path / "a.txt").write_text("alpha\n")
    (path / "b.txt").write_text("beta\n")
    return path


async def test_a_provider_repeating_a_call_id_gets_unique_ids_on_the_wire_and_its_own_back(
    home: Path, work: Path, replay_server: Any
) -> None:
    for name in ("a.txt", "b.txt"):
        replay_server.enqueue(streamed(tool_use_reply(REPEATED, "read_file", {"path": name})))
        replay_server.enqueue(streamed(text_reply(f"read {name}")))
    env = anthropic_env(replay_server)
    async with acp_daemon(home, env=env) as (client, _daemon):
        session_id = (await client.request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
        await client.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "model", "value": MODEL}
        )
        for name in ("a.txt", "b.txt"):
            answer = await client.request(
                "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": f"read {name}"}]}
            )
            assert answer == {"stopReason": "end_turn"}
        live = drain(client)
    cards = updates(live, "tool_call")
    assert len({c["toolCallId"] for c in cards}) == 2
    assert cards[0]["toolCallId"] == REPEATED  # the first use of an id is kept as the provider sent it
    finished = [u for u in updates(live, "tool_call_update") if u["status"] == "completed"]
    assert [u["toolCallId"] for u in finished] == [c["toolCallId"] for c in cards]

    # The provider saw the conversation it produced: its own id on both calls and results.
    last = replay_server.requests[-1].json()
    calls = [
        b["id"] for m in last["messages"] if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"
    ]
    results = [
        b["tool_use_id"]
        for m in last["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_result"
    ]
    assert calls == results == [REPEATED, REPEATED]

    # After a restart, session/load shows both cards with their own results.
    async with acp_daemon(home, env=env) as (client, _daemon):
        await client.request("session/load", {"sessionId": session_id, "cwd": str(work), "mcpServers": []})
        replayed = updates(drain(client), "tool_call")
    assert [c["toolCallId"] for c in replayed] == [c["toolCallId"] for c in cards]
    assert [c["status"] for c in replayed] == ["completed", "completed"]
    assert ["alpha" in c["content"][0]["content"]["text"] for c in replayed] == [True, False]
    assert ["beta" in c["content"][0]["content"]["text"] for c in replayed] == [False, True]


async def test_the_mock_provider_never_repeats_a_call_id_in_a_session(home: Path, work: Path) -> None:
    async with in_memory_daemon(home) as (client, daemon):
        started = await client.request("session/start", {"model_id": "mock/tools", "cwd": str(work)})
        session_id = started["session"]["session_id"]
        for _ in range(2):
            turn = await client.request(
                "session/prompt",
                {"session_id": session_id, "text": 'tool: read_file {"path": "a.txt"}\ntool: list_files {}'},
            )
            await client.collect_turn(turn["turn_id"])
        stored = await daemon.store.get_messages(session_id)
    calls = [p for m in stored for p in m.parts if p.type == "tool_call"]
    assert len(calls) == 4 and len({p.call_id for p in calls}) == 4
    assert not any(PROVIDER_CALL_ID in (p.provider_data or {}) for p in calls)  # none had to be rewritten


def test_calls_without_an_id_get_one_and_only_their_own_provider_sees_the_original() -> None:
    def message(n: int, role: Any, model_id: str | None, *parts: Part) -> ChatMessage:
        return ChatMessage(message_id=f"m{n}", session_id="s", seq=n, role=role, parts=list(parts), model_id=model_id)

    history = [message(1, "assistant", "ollama/qwen3", Part(type="tool_call", call_id="call_0", name="list_files"))]
    ids = ReplyCallIds(history)
    repeated, missing = ids.start(0, "call_0"), ids.start(1, None)
    assert len({"call_0", repeated, missing}) == 3
    call = ids.finish(0, Part(type="tool_call", call_id="call_0", name="list_files"))
    assert (call.call_id, call.provider_data) == (repeated, {PROVIDER_CALL_ID: "call_0"})
    nameless = ids.finish(1, Part(type="tool_call", call_id=None, name="list_files"))
    assert (nameless.call_id, nameless.provider_data) == (missing, None)

    result = Part(type="tool_result", call_id=repeated, text="ok")
    history += [message(2, "assistant", "ollama/qwen3", call), message(3, "tool", None, result)]
    own = for_provider(history, "ollama")
    assert [p.call_id for m in own for p in m.parts] == ["call_0", "call_0", "call_0"]
    assert for_provider(history, "anthropic") is history  # another provider gets the unique ids
    assert history[1].parts[0].call_id == repeated  # the stored history is left as it is
