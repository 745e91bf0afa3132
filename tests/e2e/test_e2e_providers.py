"""Sessions on each provider family, end to end through the daemon against replayed fixtures:
thinking streams, the provider's round-trip data (thought signatures, encrypted reasoning,
reasoning_content, Ollama thinking) is sent back through the tool loop and after a restart."""

import json

import pytest

from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse

pytestmark = pytest.mark.anyio


def gemini_check(body, meta):
    return body["contents"][1] == meta["expected"]["model_content_for_roundtrip"]


def responses_check(body, meta):
    reasoning = next(i for i in meta["expected"]["next_request_input"] if i.get("type") == "reasoning")
    sent = [i for i in body["input"] if i.get("type") == "reasoning"]
    return any(i["id"] == reasoning["id"] and i["encrypted_content"] == reasoning["encrypted_content"] for i in sent)


def chat_check(body, meta):
    expected = dict(meta["expected"]["assistant_message_for_roundtrip"])
    if meta["provider"] == "deepseek" and expected.get("tool_calls") and expected.get("content") == "":
        expected["content"] = None  # a turn of tool calls only goes back with content null, as DeepSeek sends it
    return expected in body["messages"]


CASES = {
    "gemini": (
        "gemini/gemini-3.1-pro-preview",
        {"GEMINI_API_KEY": "AIza-fake"},
        "GEMINI_BASE_URL",
        ("gemini", "function-call-signature"),
        ("gemini", "thoughts-text-signature"),
        gemini_check,
    ),
    "openai-responses": (
        "openai/gpt-5.1",
        {"OPENAI_API_KEY": "sk-fake"},
        "OPENAI_BASE_URL",
        ("openai-responses", "reasoning-function-call"),
        ("openai-responses", "reasoning-summary-text"),
        responses_check,
    ),
    "deepseek": (
        "deepseek/deepseek-v4-pro",
        {"DEEPSEEK_API_KEY": "sk-fake"},
        "DEEPSEEK_BASE_URL",
        ("openai-chat", "deepseek-tool-call"),
        ("openai-chat", "deepseek-reasoning-content"),
        chat_check,
    ),
    "ollama": (
        "ollama/gpt-oss:20b",
        {},
        "OLLAMA_HOST",
        ("ollama", "tool-calls"),
        ("ollama", "thinking-content"),
        chat_check,
    ),
}


def enqueue_ollama_discovery(server):
    tags = {"models": [{"name": "gpt-oss:20b", "model": "gpt-oss:20b"}]}
    show = {"capabilities": ["completion", "tools", "thinking"], "details": {"family": "gptoss"}}
    for payload in (tags, show):
        server.enqueue(
            ScriptedResponse(body=json.dumps(payload).encode(), headers={"content-type": "application/json"})
        )


@pytest.mark.parametrize("case", sorted(CASES))
async def test_round_trip_through_tool_loop_and_restart(case, home, tmp_path, replay_server):
    model_id, env, url_var, tool_fixture, text_fixture, check = CASES[case]
    env = {**env, url_var: replay_server.url}
    discovery = 0
    if case == "ollama":
        from daemon.providers.ollama import clear_discovery_cache

        clear_discovery_cache()
        enqueue_ollama_discovery(replay_server)
        discovery = 2
    meta = replay_server.enqueue_fixture(*tool_fixture, split_every=9)
    replay_server.enqueue_fixture(*text_fixture, split_every=7)
    async with in_memory_daemon(home, env=env) as (client, _):
        started = await client.request(
            "session/start", {"model_id": model_id, "cwd": str(tmp_path), "approval_policy": "auto"}
        )
        session_id = started["session"]["session_id"]
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "What is the weather?"})
        events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert [e for e in events if e["type"] == "tool_call_end"], "the first reply asked for a tool"
    assert any(e["type"] == "thinking_delta" for e in events)
    second = replay_server.requests[discovery + 1].json()
    assert check(second, meta), f"round-trip data missing from the follow-up request: {json.dumps(second)[:600]}"

    replay_server.enqueue_fixture(*text_fixture)
    async with in_memory_daemon(home, env=env) as (client, _):
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "And tomorrow?"})
        events = await client.collect_turn(turn["turn_id"])
    if case == "ollama":
        clear_discovery_cache()
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    third = replay_server.requests[-1].json()
    assert check(third, meta), "after a restart the round-trip data is still sent back"
