"""Every model call's thinking is reported (PROTOCOL.md "Thinking controls", ``thinking_update``).

When one call of a turn sends other thinking than the turn last reported, a ``thinking_update``
comes before that call with the reason, its ``request_params`` are exactly what the call sends,
and the assistant message it produces stores that call's level. Against a real HTTP server on
127.0.0.1 replaying Anthropic streams, in memory and through a real ``ponder serve``
subprocess; the level retry's update is tested per provider in ``test_thinking_retry.py``.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.providers.test_provider_anthropic import (
    MESSAGE_STOP,
    SSE_HEADERS,
    block_delta,
    block_start,
    message_delta,
    message_start,
    sse,
)
from tests.support.harness import in_memory_daemon, subprocess_daemon
from tests.support.replay import ReplayServer, ScriptedResponse

pytestmark = pytest.mark.anyio

CONFIG = """
[providers.claude]
api = "anthropic"
base_url = "{url}"

[[providers.claude.models]]
model = "claude-budget"
context_window = {window}
max_output_tokens = 32000
thinking_levels = ["off", "low", "high"]

[compaction]
auto = false
"""
ENV = {"PONDER_MOCK_DELAY_MS": "0"}


def tool_call_stream(*, signed: bool, path: str) -> ScriptedResponse:
    """A budget-mode reply that calls ``read_file``: with a signed thinking block first, or
    (``signed=False``, as after an interrupted stream or from a model that skipped it) without."""
    # Input tokens near the request's estimate: the daemon calibrates its estimates by them.
    events: list[dict[str, Any]] = [message_start(input_tokens=2000)]
    index = 0
    if signed:
        events += [
            block_start(0, type="thinking", thinking="", signature=""),
            block_delta(0, type="thinking_delta", thinking="I should read the file."),
            block_delta(0, type="signature_delta", signature="sig-step-1"),
            {"type": "content_block_stop", "index": 0},
        ]
        index = 1
    arguments = json.dumps({"path": path})
    events += [
        block_start(index, type="tool_use", id="toolu_1", name="read_file", input={}),
        block_delta(index, type="input_json_delta", partial_json=arguments[:5]),
        block_delta(index, type="input_json_delta", partial_json=arguments[5:]),
        {"type": "content_block_stop", "index": index},
        message_delta("tool_use", output_tokens=20),
        MESSAGE_STOP,
    ]
    return ScriptedResponse(headers=SSE_HEADERS, body=sse(*events))


async def start_session(client: Any, cwd: Path) -> str:
    started = await client.request(
        "session/start",
        {"model_id": "claude/claude-budget", "thinking_level": "high", "cwd": str(cwd), "approval_policy": "auto"},
    )
    assert started["thinking"]["effective"] == "high"
    return str(started["session"]["session_id"])


def assistant_levels(resumed: dict[str, Any]) -> list[str]:
    return [m["thinking_level"] for m in resumed["messages"] if m["role"] == "assistant"]


def check_switched_off(events: list[dict[str, Any]], server: ReplayServer) -> None:
    """The second call of the tool loop went without thinking, and the client was told before it."""
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    kinds = [e["type"] for e in events]
    assert events[0]["type"] == "turn_start" and events[0]["thinking"]["effective"] == "high"
    assert kinds.count("thinking_update") == 1, kinds
    at = kinds.index("thinking_update")
    assert kinds[at + 1] == "message_start", kinds  # right before the call it describes
    assert "tool_execution_end" in kinds[:at]  # ... which is the tool loop's second call
    update = events[at]["thinking"]
    assert update["effective"] == "off" and update["budget_tokens"] is None
    assert update["requested"] == "high" and update["source"] == "session"
    assert "signed thinking block" in update["reason"], update
    first, second = (r.json() for r in server.requests if r.path == "/v1/messages")
    assert first["thinking"]["type"] == "enabled" and first["thinking"]["budget_tokens"] > 10_000
    assert "thinking" not in second  # exactly what the update said: no fragment
    assert update["request_params"] == {}


async def tool_loop_turn(
    home: Path, tmp_path: Path, server: ReplayServer, *, signed: bool
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """One prompt whose reply reads a file, then answers (``thinking-text``): the turn's events,
    then ``session/resume`` and ``session/get`` after it."""
    (tmp_path / "notes.txt").write_text("rain at noon\n")
    (home / "config.toml").write_text(CONFIG.format(url=server.url, window=200_000))
    server.enqueue(tool_call_stream(signed=signed, path="notes.txt"))
    server.enqueue_fixture("anthropic", "thinking-text")
    async with in_memory_daemon(home) as (client, _daemon):
        session_id = await start_session(client, tmp_path)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "Umbrella?"})
        events = await client.collect_turn(turn["turn_id"])
        resumed = await client.request("session/resume", {"session_id": session_id})
        got = await client.request("session/get", {"session_id": session_id})
    return events, resumed, got


async def test_a_tool_loop_step_without_a_signed_block_reports_thinking_off(home: Path, tmp_path: Path) -> None:
    with ReplayServer() as server:
        events, resumed, got = await tool_loop_turn(home, tmp_path, server, signed=False)
    check_switched_off(events, server)
    replies = [e["message"] for e in events if e["type"] == "message_end"]
    ends = [m["thinking_level"] for m in replies if m["role"] == "assistant"]
    assert ends == ["high", "off"]  # each reply records the thinking its call sent
    assert assistant_levels(resumed) == ["high", "off"]
    # The session's own thinking is untouched: one step went without, not the session.
    assert got["thinking"]["effective"] == "high"


async def test_a_signed_tool_loop_keeps_its_thinking_and_sends_no_update(home: Path, tmp_path: Path) -> None:
    with ReplayServer() as server:
        events, resumed, _got = await tool_loop_turn(home, tmp_path, server, signed=True)
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert not [e for e in events if e["type"] == "thinking_update"]
    bodies = [r.json() for r in server.requests if r.path == "/v1/messages"]
    assert [b["thinking"] for b in bodies] == [bodies[0]["thinking"]] * 2  # the same fragment, twice
    assert bodies[1]["messages"][1]["content"][0]["signature"] == "sig-step-1"
    assert assistant_levels(resumed) == ["high", "high"]


async def test_a_budget_shrunk_near_the_window_mid_turn_is_reported(home: Path, tmp_path: Path) -> None:
    # The tool result fills most of a 40,000-token window: the second call's budget shrinks.
    (tmp_path / "big.txt").write_text(("y" * 99 + "\n") * 1200)  # 120,000 characters, about 30,000 tokens
    with ReplayServer() as server:
        (home / "config.toml").write_text(CONFIG.format(url=server.url, window=40_000))
        server.enqueue(tool_call_stream(signed=True, path="big.txt"))
        server.enqueue_fixture("anthropic", "thinking-text")
        async with in_memory_daemon(home) as (client, _daemon):
            session_id = await start_session(client, tmp_path)
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "Summarize it."})
            events = await client.collect_turn(turn["turn_id"])
            resumed = await client.request("session/resume", {"session_id": session_id})
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    start = events[0]["thinking"]
    assert start["reason"] is None and start["budget_tokens"] > 10_000  # far from the window at first
    kinds = [e["type"] for e in events]
    assert kinds.count("thinking_update") == 1, kinds
    at = kinds.index("thinking_update")
    assert kinds[at + 1] == "message_start" and "tool_execution_end" in kinds[:at]
    update = events[at]["thinking"]
    assert update["effective"] == "high" and "lowered" in update["reason"], update
    assert 1024 <= update["budget_tokens"] < start["budget_tokens"]
    first, second = (r.json() for r in server.requests if r.path == "/v1/messages")
    assert first["thinking"]["budget_tokens"] == start["budget_tokens"]
    assert second["thinking"] == update["request_params"]["thinking"]  # what the update said is what was sent
    assert second["max_tokens"] == update["request_params"]["max_tokens"]
    assert assistant_levels(resumed) == ["high", "high"]


@pytest.mark.slow
async def test_thinking_update_through_a_real_ponder_serve(home: Path, tmp_path: Path, anyio_backend: str) -> None:
    (tmp_path / "notes.txt").write_text("rain at noon\n")
    with ReplayServer() as server:
        (home / "config.toml").write_text(CONFIG.format(url=server.url, window=200_000))
        server.enqueue(tool_call_stream(signed=False, path="notes.txt"))
        server.enqueue_fixture("anthropic", "thinking-text")
        async with subprocess_daemon(home, env=ENV, backend=anyio_backend) as client:
            session_id = await start_session(client, tmp_path)
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "Umbrella?"})
            events = await client.collect_turn(turn["turn_id"])
            check_switched_off(events, server)
            resumed = await client.request("session/resume", {"session_id": session_id})
            assert assistant_levels(resumed) == ["high", "off"]
