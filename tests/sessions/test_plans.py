"""Plans on ponder's own protocol (PROTOCOL.md "Plans"): ``update_plan`` keeps ``Session.plan``
(stored, across a restart, copied by a fork) and emits a ``plan`` event inside the turn; no
rule, hook or policy applies to it; a bad plan is a tool error that changes nothing; the
system prompt says when a plan helps, and the model is offered the tool."""

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.jsonrpc.client import RpcClient
from daemon.tools.update_plan import PLAN_GUIDANCE
from tests.support.harness import in_memory_daemon
from tests.support.replay import ReplayServer

pytestmark = pytest.mark.anyio

PLAN = [{"step": "Read the code", "status": "in_progress"}, {"step": "Write the fix", "status": "pending"}]


def plan_call(**arguments: Any) -> str:
    return f"tool: update_plan {json.dumps(arguments)}"


async def run(client: RpcClient, session_id: str, *lines: str) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": "\n".join(lines)})
    return await client.collect_turn(turn["turn_id"])


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def get_plan(client: RpcClient, session_id: str) -> Any:
    return (await client.request("session/get", {"session_id": session_id}))["session"]["plan"]


async def test_update_plan_keeps_the_sessions_plan_across_a_restart_and_a_fork(home: Path, tmp_path: Path) -> None:
    # A deny-everything rule and the read_only policy: neither applies to update_plan.
    (home / "config.toml").write_text('[[permissions.rules]]\ntool = "*"\ndecision = "deny"\n')
    async with in_memory_daemon(home, permission_requests=True) as (client, _):
        init = await client.request("initialize", {"protocol_version": 1})
        assert init["capabilities"]["plans"] is True
        started = await client.request(
            "session/start", {"model_id": "mock/tools", "cwd": str(tmp_path), "approval_policy": "read_only"}
        )
        session_id = started["session"]["session_id"]
        assert started["session"]["plan"] is None
        events = await run(client, session_id, plan_call(explanation="Small fix.", plan=PLAN))
        [plan] = of_type(events, "plan")
        assert plan["explanation"] == "Small fix." and plan["entries"] == PLAN
        assert plan["turn_id"] == events[0]["turn_id"]  # inside the turn's brackets
        assert [e["type"] for e in events].index("plan") < [e["type"] for e in events].index("turn_end")
        [start] = of_type(events, "tool_execution_start")
        assert start["permission"]["decision"] == "allow" and start["permission"]["source"] == "policy"
        [end] = of_type(events, "tool_execution_end")
        assert end["is_error"] is False and end["result"] == "Plan updated: 0 completed, 1 in progress, 1 pending."
        kept = await get_plan(client, session_id)
        assert kept["explanation"] == "Small fix." and kept["entries"] == PLAN and kept["updated_at"]

        # Two steps in progress, or an unknown status: a tool error, and the plan is unchanged.
        two = [{**PLAN[0]}, {**PLAN[1], "status": "in_progress"}]
        odd = [{**PLAN[0], "status": "blocked"}]
        events = await run(client, session_id, plan_call(plan=two), plan_call(plan=odd))
        assert of_type(events, "plan") == []
        first, second = of_type(events, "tool_execution_end")
        assert first["is_error"] and "2 steps are in_progress" in first["result"]
        assert second["is_error"] and "invalid arguments for update_plan" in second["result"]
        assert await get_plan(client, session_id) == kept

        forked = (await client.request("session/fork", {"session_id": session_id}))["session"]
        assert forked["plan"] == kept

        # plan: [] clears the entries.
        events = await run(client, session_id, plan_call(plan=[]))
        assert [p["entries"] for p in of_type(events, "plan")] == [[]]
        cleared = await get_plan(client, session_id)
        assert cleared["entries"] == [] and cleared["explanation"] is None

    async with in_memory_daemon(home) as (client, _):  # a new daemon on the same home
        assert await get_plan(client, session_id) == cleared
        assert await get_plan(client, forked["session_id"]) == kept
        resumed = await client.request("session/resume", {"session_id": forked["session_id"]})
        assert resumed["session"]["plan"] == kept


async def test_the_model_is_told_when_a_plan_helps_and_offered_the_tool(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-plans", "ANTHROPIC_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env) as (client, _):
        for system_prompt in (None, "Answer in French."):
            params = {"model_id": "anthropic/claude-opus-4-6", "cwd": str(tmp_path), "system_prompt": system_prompt}
            session_id = (await client.request("session/start", params))["session"]["session_id"]
            await run(client, session_id, "What is 2 + 2?")
    bodies = [request.json() for request in replay_server.requests]
    assert [b["system"] for b in bodies] == [PLAN_GUIDANCE, f"Answer in French.\n\n{PLAN_GUIDANCE}"]
    assert all("update_plan" in [tool["name"] for tool in b["tools"]] for b in bodies)
    assert "Do not make a plan for a question" in PLAN_GUIDANCE
