"""Steering and ``/continue`` in ACP mode (in-process ``ponder acp``, every message validated
against ACP's schema, the provider replayed on 127.0.0.1): steering is advertised in
``_meta`` and asked for with ``_meta.ponder.delivery``; a plain prompt while a turn runs keeps
ACP's queue semantics."""

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.acp.test_acp_server import new_session, prompt, text
from tests.support.acp_harness import acp_daemon, drain
from tests.support.replay import ScriptedResponse
from tests.support.steer_streams import anthropic_text, anthropic_tools, user_turn_after_results

pytestmark = pytest.mark.anyio
SSE = {"content-type": "text/event-stream"}
ENV_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-fake"}


async def until(predicate: Any) -> None:
    with anyio.fail_after(20):
        while not predicate():
            await anyio.sleep(0.01)


async def test_steer_through_meta_joins_and_a_plain_prompt_waits(home: Path, tmp_path: Path, replay_server) -> None:
    calls = [("call_slow", "run_command", {"command": "sleep 1.5; echo slow"})]
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(calls), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Steered answer."), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Queued answer."), headers=SSE))
    env = {**ENV_KEYS, "ANTHROPIC_BASE_URL": replay_server.url}
    (home / "config.toml").write_text('[defaults]\napproval_policy = "auto"\n')  # tools run without asking
    async with acp_daemon(home, env=env) as (client, daemon):
        init = await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["agentCapabilities"]["_meta"]["ponder"]["steering"]["prompt_meta"]["ponder"]["delivery"] == "steer"
        session_id = await new_session(client, tmp_path, "anthropic/claude-sonnet-4-5")
        answers: dict[str, Any] = {}

        async def run(name: str, blocks: list[Any], meta: Any = None) -> None:
            params: dict[str, Any] = {"sessionId": session_id, "prompt": blocks}
            if meta is not None:
                params["_meta"] = meta
            answers[name] = await client.request("session/prompt", params)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first", [text("Fix it.")])
            live = await daemon.sessions.get(session_id)
            await until(lambda: live.current is not None and len(replay_server.requests) == 1)
            await anyio.sleep(0.3)  # the tool runs
            tg.start_soon(run, "queued", [text("Afterwards, this.")])
            await until(lambda: live.queued == 1)
            tg.start_soon(run, "steer", [text("Use the other file.")], {"ponder": {"delivery": "steer"}})
            await until(lambda: len(live.inbox.steers) == 1)
        updates = [p["update"] for m, p in drain(client) if m == "session/update"]
    assert answers == {
        "first": {"stopReason": "end_turn"},
        "steer": {"stopReason": "end_turn"},
        "queued": {"stopReason": "end_turn"},
    }
    shape = user_turn_after_results("anthropic", replay_server.requests[1].json())
    assert shape == [("result", "call_slow"), ("text", "Use the other file.")]
    assert replay_server.requests[2].json()["messages"][-1]["content"] == "Afterwards, this."
    user_chunks = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"]
    assert user_chunks == ["Use the other file."]


async def test_continue_slash_command(home: Path, tmp_path: Path, replay_server) -> None:
    calls = [("call_slow", "run_command", {"command": "sleep 30"})]
    replay_server.enqueue(ScriptedResponse(body=anthropic_tools(calls), headers=SSE))
    replay_server.enqueue(ScriptedResponse(body=anthropic_text("Went on."), headers=SSE))
    env = {**ENV_KEYS, "ANTHROPIC_BASE_URL": replay_server.url}
    (home / "config.toml").write_text('[defaults]\napproval_policy = "auto"\n')  # tools run without asking
    async with acp_daemon(home, env=env) as (client, daemon):
        session_id = await new_session(client, tmp_path, "anthropic/claude-sonnet-4-5")
        commands = [
            p["update"]
            for m, p in drain(client)
            if m == "session/update" and p["update"]["sessionUpdate"] == "available_commands_update"
        ]
        assert "continue" in [c["name"] for c in commands[-1]["availableCommands"]]
        nothing = await prompt(client, session_id, text("/continue"))
        assert nothing == {"stopReason": "end_turn", "_meta": {"ponder": {"action": "nothing_to_continue"}}}
        answers: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                answers["first"] = await prompt(client, session_id, text("Go."))

            tg.start_soon(first)
            live = await daemon.sessions.get(session_id)
            await until(lambda: live.current is not None and len(replay_server.requests) == 1)
            await anyio.sleep(0.3)
            await client.notify("session/cancel", {"sessionId": session_id})
        assert answers["first"] == {"stopReason": "cancelled"}
        continued = await prompt(client, session_id, text("/continue"))
    assert continued == {"stopReason": "end_turn"}
    body = replay_server.requests[1].json()
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][-1]["content"][0]["type"] == "tool_result"
