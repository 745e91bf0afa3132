"""The tool loop and approval over the real protocol, with the scripted mock/tools model."""

import json
from contextlib import aclosing

import anyio
import pytest

from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


def script(*steps: tuple[str, dict]) -> str:
    return "\n".join(f"tool: {name} {json.dumps(args)}" for name, args in steps)


async def run_prompt(client, session_id, text):
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    return await client.collect_turn(turn["turn_id"])


async def start(client, cwd, policy="ask", **params):
    result = await client.request(
        "session/start", {"model_id": "mock/tools", "cwd": str(cwd), "approval_policy": policy, **params}
    )
    return result["session"]["session_id"]


def tool_ends(events):
    return [e for e in events if e["type"] == "tool_execution_end"]


class Answers:
    """A client that answers permission requests from a list and records them."""

    def __init__(self, *decisions):
        self.decisions = list(decisions)
        self.requests = []

    async def __call__(self, method, params):
        assert method == "permission/request"
        self.requests.append(params)
        return {"decision": self.decisions.pop(0)}


async def test_three_step_tool_loop(home, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("alpha\nbeta\n")
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work)
        events = await run_prompt(
            client,
            session_id,
            script(("list_files", {}), ("read_file", {"path": "notes.txt"}), ("search", {"pattern": "bet"})),
        )
        assert events[-1]["stop_reason"] == "end_turn"
        ends = tool_ends(events)
        assert [e["name"] for e in ends] == ["list_files", "read_file", "search"]
        assert not any(e["is_error"] for e in ends)
        assert "notes.txt:2:beta" in ends[2]["result"]
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert [m["role"] for m in stored] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        # each tool message answers the call of the reply before it, and names its message id in the events
        for reply, results in zip(stored[1::2], stored[2::2], strict=False):  # the last reply has no results
            [call] = [b for b in reply["content"] if b["type"] == "tool_call"]
            [result] = results["content"]
            assert result["type"] == "tool_result" and result["call_id"] == call["call_id"]
        assert {e["message_id"] for e in ends} == {m["message_id"] for m in stored if m["role"] == "tool"}
        assert "notes.txt:2:beta" in stored[-1]["content"][0]["text"]


async def test_allow_once_runs_and_deny_reports_to_the_model(home, tmp_path):
    answers = Answers("allow_once", "deny")
    async with in_memory_daemon(home, permission_requests=True, on_request=answers) as (client, _):
        session_id = await start(client, tmp_path)
        events = await run_prompt(
            client,
            session_id,
            script(
                ("write_file", {"path": "a.txt", "content": "one"}), ("write_file", {"path": "b.txt", "content": "two"})
            ),
        )
    assert (tmp_path / "a.txt").read_text() == "one"
    assert not (tmp_path / "b.txt").exists()
    first, _second = answers.requests
    assert first["tool"] == "write_file" and first["arguments"] == {"path": "a.txt", "content": "one"}
    assert first["options"] == ["allow_once", "allow_session", "allow_always", "deny", "deny_always"]
    assert first["session_id"] == session_id
    assert first["suggested_rule"] == {
        "tool": "write_file",
        "decision": "allow",
        "pattern": None,
        "path": "a.txt",
        "justification": None,
    }
    assert first["turn_id"] == events[0]["turn_id"] and "a.txt" in first["title"]
    ends = tool_ends(events)
    assert ends[0]["is_error"] is False
    assert ends[1]["is_error"] is True and "denied" in ends[1]["result"]
    assert events[-1]["stop_reason"] == "end_turn"  # a denial is a tool error; the turn goes on


async def test_allow_session_keeps_the_suggested_rule_for_the_session(home, tmp_path):
    answers = Answers("allow_session", "allow_once")
    async with in_memory_daemon(home, permission_requests=True, on_request=answers) as (client, _):
        session_id = await start(client, tmp_path)
        await run_prompt(client, session_id, script(("write_file", {"path": "a.txt", "content": "1"})))
        events = await run_prompt(client, session_id, script(("write_file", {"path": "a.txt", "content": "2"})))
        [start_event] = [e for e in events if e["type"] == "tool_execution_start"]
        assert start_event["permission"]["source"] == "rule"
        assert start_event["permission"]["rule"]["source"] == "session"
        assert start_event["permission"]["rule"]["path"] == "a.txt"
        assert len(answers.requests) == 1  # the same file again: the session rule allows it
        await run_prompt(client, session_id, script(("write_file", {"path": "b.txt", "content": "3"})))
        assert len(answers.requests) == 2  # another file: asked again (the rule is the call's path, not the tool)
    assert (tmp_path / "a.txt").read_text() == "2"
    assert (tmp_path / "b.txt").read_text() == "3"
    assert not (home / "permissions.toml").exists()  # a session rule is never written down


async def test_client_without_permission_capability_means_deny_with_a_hint(home, tmp_path):
    async with in_memory_daemon(home, permission_requests=False) as (client, _):
        # Without a sandbox standing in for the prompt (see tests/sandbox), ask with nobody to ask denies.
        session_id = await start(client, tmp_path, sandbox={"mode": "off"})
        events = await run_prompt(client, session_id, script(("run_command", {"command": "touch made"})))
        [end] = tool_ends(events)
        assert end["is_error"] and "auto" in end["result"]
        assert not (tmp_path / "made").exists()
        # read-only tools still run without asking
        events = await run_prompt(client, session_id, script(("list_files", {})))
        assert tool_ends(events)[0]["is_error"] is False


async def test_auto_and_read_only_policies(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        auto = await start(client, tmp_path, policy="auto")
        await run_prompt(client, auto, script(("write_file", {"path": "x.txt", "content": "auto"})))
        assert (tmp_path / "x.txt").read_text() == "auto"
        locked = await start(client, tmp_path, policy="read_only")
        events = await run_prompt(
            client, locked, script(("edit_file", {"path": "x.txt", "old_string": "auto", "new_string": "no"}))
        )
        assert tool_ends(events)[0]["is_error"] and "read_only" in tool_ends(events)[0]["result"]
        assert (tmp_path / "x.txt").read_text() == "auto"


async def test_cancel_while_permission_pending_withdraws_it(home, tmp_path):
    asked = anyio.Event()

    async def never_answer(method, params):
        asked.set()
        await anyio.sleep(60)

    async with in_memory_daemon(home, permission_requests=True, on_request=never_answer) as (client, _):
        session_id = await start(client, tmp_path)
        turn = await client.request(
            "session/prompt",
            {"session_id": session_id, "text": script(("write_file", {"path": "w.txt", "content": "x"}))},
        )
        withdrawn = []
        events = []
        async with anyio.create_task_group() as tg:

            async def cancel_when_asked():
                await asked.wait()
                await client.request("session/cancel", {"session_id": session_id})

            tg.start_soon(cancel_when_asked)
            with anyio.fail_after(5):
                async for method, params in client.notifications:
                    if method == "$/cancelRequest":
                        withdrawn.append(params["id"])
                    elif method == "agent/event" and params["turn_id"] == turn["turn_id"]:
                        events.append(params)
                        if params["type"] == "turn_end":
                            break
        assert events[-1]["stop_reason"] == "cancelled"
        assert len(withdrawn) == 1
        assert not (tmp_path / "w.txt").exists()
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        # the unanswered call got a synthetic result, so the next request is valid for any provider
        [tool_message] = [m for m in stored if m["role"] == "tool"]
        assert tool_message["content"][0]["is_error"] and "ancel" in tool_message["content"][0]["text"]


async def test_cancel_kills_a_running_command_and_records_a_result(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path, policy="auto")
        turn = await client.request(
            "session/prompt",
            {"session_id": session_id, "text": script(("run_command", {"command": "echo started; sleep 30"}))},
        )
        events = []
        async with aclosing(client.events(turn["turn_id"])) as stream:
            async for event in stream:
                events.append(event)
                if event["type"] == "tool_execution_output":
                    await client.request("session/cancel", {"session_id": session_id})
        assert events[-1]["stop_reason"] == "cancelled"
        assert any("started" in e["chunk"] for e in events if e["type"] == "tool_execution_output")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert stored[-1]["role"] == "tool" and stored[-1]["status"] == "interrupted"
        # the session goes on: the next turn's request carries a result for the cancelled call
        events = await run_prompt(client, session_id, script(("list_files", {})))
        assert events[-1]["stop_reason"] == "end_turn"


async def test_unknown_tool_and_bad_arguments_are_tool_errors(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path, policy="auto")
        events = await run_prompt(client, session_id, script(("no_such_tool", {}), ("read_file", {"lines": 3})))
        ends = tool_ends(events)
        assert ends[0]["is_error"] and "unknown tool" in ends[0]["result"]
        assert ends[1]["is_error"] and "invalid arguments" in ends[1]["result"]
        assert events[-1]["stop_reason"] == "end_turn"


async def test_step_limit_ends_the_turn_with_tool_limit(home, tmp_path):
    def two_steps(config):
        config.max_tool_steps = 2

    async with in_memory_daemon(home, configure=two_steps) as (client, _):
        session_id = await start(client, tmp_path)
        events = await run_prompt(
            client, session_id, script(("list_files", {}), ("list_files", {}), ("list_files", {}))
        )
        assert events[-1]["stop_reason"] == "tool_limit"
        assert len(tool_ends(events)) == 2


async def test_file_tools_never_leave_the_cwd(home, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    (work / "link").symlink_to(tmp_path / "secret.txt")
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work, policy="auto")
        events = await run_prompt(
            client,
            session_id,
            script(
                ("read_file", {"path": "../secret.txt"}),
                ("read_file", {"path": str(tmp_path / "secret.txt")}),
                ("read_file", {"path": "link"}),
                ("write_file", {"path": "../evil.txt", "content": "x"}),
            ),
        )
    ends = tool_ends(events)
    assert all(e["is_error"] and "outside" in e["result"] for e in ends)
    assert not (tmp_path / "evil.txt").exists()
