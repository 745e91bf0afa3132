"""Permission rules through the daemon, over the real protocol: "always" answers kept across a
real ``ponder serve`` restart, headless denial, ``tool_execution_start.permission``,
``permissions/list`` and broken rules in ``initialize.problems``."""

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.permissions.always import FILE_NAME
from tests.support.harness import in_memory_daemon, initialize, subprocess_daemon

pytestmark = pytest.mark.anyio


def script(*steps: tuple[str, dict]) -> str:
    return "\n".join(f"tool: {name} {json.dumps(args)}" for name, args in steps)


async def start(client: Any, cwd: Path, policy: str = "ask") -> str:
    # Sandbox off: these tests are about rules and the policy, which an enforced sandbox would
    # otherwise stand in for under ask (step 5; see tests/sandbox).
    result = await client.request(
        "session/start",
        {"model_id": "mock/tools", "cwd": str(cwd), "approval_policy": policy, "sandbox": {"mode": "off"}},
    )
    return result["session"]["session_id"]


async def run(client: Any, session_id: str, *steps: tuple[str, dict]) -> list[dict]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": script(*steps)})
    return await client.collect_turn(turn["turn_id"])


def starts(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "tool_execution_start"]


def ends(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "tool_execution_end"]


class Answers:
    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)
        self.requests: list[dict] = []

    async def __call__(self, method: str, params: Any) -> Any:
        assert method == "permission/request"
        self.requests.append(params)
        return self.answers.pop(0)


@pytest.mark.slow
async def test_allow_always_and_deny_always_hold_in_the_next_ponder_serve(home: Path, tmp_path: Path, anyio_backend):
    work = tmp_path / "work"
    work.mkdir()
    answers = Answers({"decision": "allow_always"}, {"decision": "deny_always"})
    command = "echo made > made.txt && echo done"
    async with subprocess_daemon(home, backend=anyio_backend, permission_requests=True, on_request=answers) as client:
        session_id = await start(client, work)
        events = await run(client, session_id, ("run_command", {"command": command}))
        [request] = answers.requests
        assert request["suggested_rule"]["pattern"] == ["echo", "made"]  # the first command, never the line
        assert request["options"] == ["allow_once", "allow_session", "allow_always", "deny", "deny_always"]
        [started] = starts(events)
        assert started["permission"]["decision"] == "allow" and started["permission"]["source"] == "user"
        assert started["permission"]["rule"]["source"] == "always"
        events = await run(client, session_id, ("run_command", {"command": "touch nope"}))
        assert ends(events)[0]["is_error"]  # denied, and a deny rule kept
    saved = (home / FILE_NAME).read_text()
    assert saved.count("[[rules]]") == 2 and f'project = "{work.resolve()}"' in saved

    # A new daemon reads them: neither call asks, and the events say which rule decided.
    asked = Answers({"decision": "deny"})
    async with subprocess_daemon(home, backend=anyio_backend, permission_requests=True, on_request=asked) as client:
        session_id = await start(client, work)
        events = await run(client, session_id, ("run_command", {"command": "echo made"}))
        [started] = starts(events)
        assert started["permission"]["source"] == "rule" and started["permission"]["rule"]["source"] == "always"
        assert started["permission"]["rule"]["line"] == 3
        assert not ends(events)[0]["is_error"]
        events = await run(client, session_id, ("run_command", {"command": "touch nope -v"}))
        assert ends(events)[0]["is_error"] and "permission rule denies it" in ends(events)[0]["result"]
        assert starts(events)[0]["permission"]["decision"] == "deny"
        # The compound line it was first asked about still asks: only its first command was kept.
        events = await run(client, session_id, ("run_command", {"command": command}))
        assert len(asked.requests) == 1
        listed = await client.request("permissions/list", {"session_id": session_id})
        assert [(r["decision"], r["source"]) for r in listed["rules"]] == [
            ("allow", "always"),
            ("deny", "always"),
            ("ask", "policy"),
        ]
    assert not (work / "nope").exists()


async def test_an_answer_may_widen_the_rule_and_a_bad_one_keeps_nothing(home: Path, tmp_path: Path):
    answers = Answers(
        {"decision": "allow_session", "rule": {"tool": "run_command", "decision": "allow", "pattern": ["echo"]}},
        {"decision": "allow_session", "rule": {"tool": "run_command", "decision": "allow", "pattern": ["make"]}},
    )
    async with in_memory_daemon(home, permission_requests=True, on_request=answers) as (client, _):
        session_id = await start(client, tmp_path)
        await run(client, session_id, ("run_command", {"command": "echo one"}))
        events = await run(client, session_id, ("run_command", {"command": "echo two"}))
        assert len(answers.requests) == 1  # the widened rule covers it
        assert starts(events)[0]["permission"]["rule"]["pattern"] == ["echo"]
        events = await run(client, session_id, ("run_command", {"command": "touch x"}))
        permission = starts(events)[0]["permission"]
        assert permission["decision"] == "allow" and permission["rule"] is None  # counted as allow_once
        assert "does not match the call" in permission["note"]
        listed = await client.request("permissions/list", {"session_id": session_id})
        assert [r["pattern"] for r in listed["rules"] if r["source"] == "session"] == [["echo"]]


async def test_headless_ask_rules_deny_and_say_so(home: Path, tmp_path: Path):
    (home / "config.toml").write_text(
        """[[permissions.rules]]
tool = "run_command"
pattern = ["git", "push"]
decision = "ask"
justification = "pushes are reviewed"
"""
    )
    async with in_memory_daemon(home, permission_requests=False) as (client, _):
        session_id = await start(client, tmp_path, policy="auto")
        events = await run(client, session_id, ("run_command", {"command": "true && git push origin main"}))
        [end] = ends(events)
        assert end["is_error"] and "cannot answer permission requests" in end["result"]
        permission = starts(events)[0]["permission"]
        assert permission["decision"] == "deny" and permission["source"] == "rule"
        assert permission["rule"]["justification"] == "pushes are reviewed"
        events = await run(client, session_id, ("run_command", {"command": "true"}))
        assert starts(events)[0]["permission"] == {"decision": "allow", "source": "policy", "rule": None, "note": None}


async def test_read_only_is_absolute_and_deny_rules_hold_under_auto(home: Path, tmp_path: Path):
    (home / "config.toml").write_text(
        """[[permissions.rules]]
tool = "write_file"
decision = "allow"

[[permissions.rules]]
tool = "read_file"
path = "secrets/**"
decision = "deny"
"""
    )
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_text("k")
    async with in_memory_daemon(home) as (client, _):
        read_only = await start(client, tmp_path, policy="read_only")
        events = await run(client, read_only, ("write_file", {"path": "a.txt", "content": "x"}))
        assert ends(events)[0]["is_error"] and starts(events)[0]["permission"]["source"] == "policy"
        auto = await start(client, tmp_path, policy="auto")
        events = await run(client, auto, ("read_file", {"path": "secrets/../secrets/key"}))
        assert ends(events)[0]["is_error"] and "permission rule denies it" in ends(events)[0]["result"]
        events = await run(client, auto, ("write_file", {"path": "a.txt", "content": "x"}))
        assert starts(events)[0]["permission"]["source"] == "rule" and not ends(events)[0]["is_error"]
    assert (tmp_path / "a.txt").read_text() == "x"


async def test_broken_rules_are_initialize_problems_and_permissions_list_shows_them(home: Path, tmp_path: Path):
    (home / "config.toml").write_text(
        """[[permissions.rules]]
tool = "run_comand"
decision = "deny"

[[permissions.rules]]
tool = "run_command"
pattern = ["ls"]
decision = "allow"
"""
    )
    (home / FILE_NAME).write_text("not toml at all [")
    async with in_memory_daemon(home) as (client, _):
        again = await initialize(client)
        problems = again["problems"]
        assert any("line 1" in p and "unknown tool 'run_comand'" in p for p in problems), problems
        assert any(FILE_NAME in p for p in problems), problems
        assert again["capabilities"]["permission_rules"] is True
        listed = await client.request("permissions/list", {})
        assert [(r["tool"], r["source"], r["line"]) for r in listed["rules"]] == [("run_command", "config", 5)]
        assert listed["problems"] == [p for p in problems if "config.toml line" in p or FILE_NAME in p]
