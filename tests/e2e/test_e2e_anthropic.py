"""A session on an Anthropic model, end to end through the daemon against replayed fixtures:
thinking streams, the signed thinking block survives the tool loop and a restart unchanged."""

import pytest

from tests.support.harness import in_memory_daemon
from tests.support.replay import fixture_request

pytestmark = pytest.mark.anyio


async def test_tool_loop_and_restart_keep_the_signed_thinking(home, tmp_path, replay_server):
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-e2e-key", "ANTHROPIC_BASE_URL": replay_server.url}
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use", split_every=11)
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use-turn2", split_every=13)
    async with in_memory_daemon(home, env=env) as (client, _):
        started = await client.request(
            "session/start",
            {
                "model_id": "anthropic/claude-opus-4-6",
                "thinking_level": "medium",
                "cwd": str(tmp_path),
                "approval_policy": "auto",
            },
        )
        assert started["thinking"]["request_params"]["output_config"] == {"effort": "medium"}
        session_id = started["session"]["session_id"]
        turn = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Should I bring an umbrella in Lyon today?"}
        )
        events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    thinking = next(e for e in events if e["type"] == "thinking_end")["text"]
    assert thinking.startswith("The user asks whether to bring an umbrella")
    [call] = [e for e in events if e["type"] == "tool_call_end"]
    assert call["name"] == "get_weather" and call["arguments"] == {"city": "Lyon", "unit": "celsius"}
    [ran] = [e for e in events if e["type"] == "tool_execution_end"]
    assert ran["is_error"] and "unknown tool" in ran["result"]  # not one of ours: the model is told so

    first, second = replay_server.requests
    assert first.headers["x-api-key"] == "sk-ant-fake-e2e-key"
    assert first.json()["messages"] == [{"role": "user", "content": "Should I bring an umbrella in Lyon today?"}]
    expected_turn2 = fixture_request("anthropic", "adaptive-thinking-tool-use-turn2")
    sent = second.json()["messages"]
    assert sent[1] == expected_turn2["messages"][1], (
        "the assistant turn must be replayed byte for byte, signature included"
    )
    assert sent[2]["content"][0]["tool_use_id"] == expected_turn2["messages"][2]["content"][0]["tool_use_id"]
    assert sent[2]["content"][0]["is_error"] is True

    replay_server.enqueue_fixture("anthropic", "thinking-text")
    async with in_memory_daemon(home, env=env) as (client, _):
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "And tomorrow?"})
        events = await client.collect_turn(turn["turn_id"])
        resumed = await client.request("session/resume", {"session_id": session_id})
    assert events[-1]["stop_reason"] == "end_turn"
    third = replay_server.requests[2].json()["messages"]
    assert third[1] == expected_turn2["messages"][1], "after a restart the signed block is still sent back unchanged"
    assert third[-1] == {"role": "user", "content": "And tomorrow?"}
    roles = [m["role"] for m in resumed["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert resumed["messages"][1]["thinking"] == thinking
    # the key never reaches the store
    assert b"sk-ant-fake-e2e-key" not in (home / "sessions.db").read_bytes()
