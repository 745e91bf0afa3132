"""Hooks through the daemon: every outcome of a ``pre_tool_use`` hook (allow, ask, deny by exit 2
or JSON, a failure, exit 127, invalid JSON, 10 MB of output, never exiting), that a hook never
overrides a deny rule, ``user_prompt_submit`` ending a turn, and the watching hooks
(``post_tool_use``, ``stop``, ``pre_compact``), each told as ``hook_start``/``hook_end``."""

import json
import sys
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.harness import in_memory_daemon, process_of, subprocess_daemon

pytestmark = pytest.mark.anyio


def hook_script(tmp_path: Path, name: str, body: str) -> str:
    """A Python hook program; it gets the hook's JSON on stdin as ``data``."""
    path = tmp_path / f"{name}.py"
    path.write_text("import json, os, sys, time\ndata = json.load(sys.stdin)\n" + body)
    return path.as_posix()


def hooks_config(*hooks: tuple[str, list[str], str]) -> str:
    """``[[hooks.EVENT]]`` tables: (event, command, extra TOML lines)."""
    return "".join(f"[[hooks.{event}]]\ncommand = {json.dumps(command)}\n{extra}\n" for event, command, extra in hooks)


def script(*steps: tuple[str, dict]) -> str:
    return "\n".join(f"tool: {name} {json.dumps(args)}" for name, args in steps)


async def start(client: Any, cwd: Path, policy: str = "auto") -> str:
    result = await client.request(
        "session/start", {"model_id": "mock/tools", "cwd": str(cwd), "approval_policy": policy}
    )
    return result["session"]["session_id"]


async def run(client: Any, session_id: str, *steps: tuple[str, dict]) -> list[dict]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": script(*steps)})
    return await client.collect_turn(turn["turn_id"])


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


TOUCH = ("run_command", {"command": "touch made"})

# (hook body, extra config, hook_end status, does the call run?, a phrase of the tool error)
OUTCOMES = [
    ("", "", "completed", True, None),  # no say: the policy (auto) runs it
    ("print(json.dumps({'decision': 'allow'}))", "", "completed", True, None),
    ("sys.stderr.write('not on Fridays'); sys.exit(2)", "", "blocked", False, "not on Fridays"),
    ("print(json.dumps({'decision': 'deny', 'reason': 'policy 7'}))", "", "blocked", False, "policy 7"),
    ("sys.exit(1)", "", "failed", False, "exited with status 1"),
    ("sys.exit(1)", 'on_failure = "ignore"', "failed", True, None),
    ("sys.exit(127)", "", "failed", False, "exited with status 127"),
    ("print('yes please')", "", "failed", False, "not JSON"),
    ("print(json.dumps({'decision': 'sure'}))", "", "failed", False, "answered neither"),
    ("sys.stdout.write('x' * (10 * 1024 * 1024))", "", "failed", False, "printed more than"),
    ("time.sleep(60)", "timeout_s = 0.5", "timed_out", False, "did not finish within 0.5 s"),
]


@pytest.mark.parametrize(("body", "extra", "status", "runs", "phrase"), OUTCOMES)
async def test_each_pre_tool_use_outcome(home: Path, tmp_path: Path, work: Path, body, extra, status, runs, phrase):
    guard = hook_script(tmp_path, "guard", body)
    (home / "config.toml").write_text(hooks_config(("pre_tool_use", [sys.executable, guard], extra)))
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work)
        began = time.monotonic()
        events = await run(client, session_id, TOUCH)
        took = time.monotonic() - began
    [hook_start] = of(events, "hook_start")
    [hook_end] = of(events, "hook_end")
    assert hook_start["event"] == "pre_tool_use" and guard in hook_start["command"]
    assert hook_end["hook_id"] == hook_start["hook_id"] and hook_end["status"] == status
    assert len(hook_end["output"]) <= 2000
    [started] = of(events, "tool_execution_start")
    [ended] = of(events, "tool_execution_end")
    assert events.index(hook_end) < events.index(started)
    assert (work / "made").exists() is runs
    assert ended["is_error"] is not runs
    if not runs:
        assert phrase in ended["result"]
        assert started["permission"]["decision"] == "deny" and started["permission"]["source"] == "hook"
    assert took < 20


async def test_a_timed_out_hook_dies_with_everything_it_started(home: Path, tmp_path: Path, work: Path):
    pid_file = tmp_path / "child.pid"
    body = (
        "import subprocess\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    guard = hook_script(tmp_path, "guard", body)
    (home / "config.toml").write_text(hooks_config(("pre_tool_use", [sys.executable, guard], "timeout_s = 1")))
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work)
        events = await run(client, session_id, TOUCH)
    assert of(events, "hook_end")[0]["status"] == "timed_out"
    child = int(pid_file.read_text())
    with anyio.fail_after(5):
        while _alive(child):
            await anyio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


async def test_a_missing_hook_command_is_a_problem_and_denies_every_call(home: Path, work: Path):
    (home / "config.toml").write_text(hooks_config(("pre_tool_use", ["/nonexistent/guard.sh"], "")))
    async with in_memory_daemon(home) as (client, _):
        problems = (await client.request("initialize", {"protocol_version": 1}))["problems"]
        assert any("/nonexistent/guard.sh" in p and "does not exist" in p for p in problems), problems
        session_id = await start(client, work)
        events = await run(client, session_id, ("list_files", {}))
    [ended] = of(events, "tool_execution_end")
    assert ended["is_error"] and "/nonexistent/guard.sh" in ended["result"]
    assert of(events, "hook_end")[0]["status"] == "failed"


async def test_a_hook_never_overrides_a_deny_rule_and_sees_its_input(home: Path, tmp_path: Path, work: Path):
    seen = tmp_path / "seen.jsonl"
    guard = hook_script(
        tmp_path,
        "guard",
        f"open({str(seen)!r}, 'a').write(json.dumps(data) + '\\n')\nprint(json.dumps({{'decision': 'allow'}}))\n",
    )
    (home / "config.toml").write_text(
        hooks_config(("pre_tool_use", [sys.executable, guard], 'matcher = "run_*"'))
        + '[[permissions.rules]]\ntool = "run_command"\npattern = ["rm"]\ndecision = "deny"\n'
    )
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work, policy="ask")  # nobody to ask: only the hook's allow runs it
        events = await run(client, session_id, ("run_command", {"command": "touch a && rm a"}))
        assert of(events, "hook_start") == []  # denied by the rule before any hook runs
        assert of(events, "tool_execution_start")[0]["permission"]["source"] == "rule"
        events = await run(client, session_id, TOUCH)
        assert of(events, "tool_execution_start")[0]["permission"]["source"] == "hook"
        events = await run(client, session_id, ("list_files", {}))
        assert of(events, "hook_start") == []  # the matcher: run_command only
    assert (work / "made").exists()
    [data] = [json.loads(line) for line in seen.read_text().splitlines()]
    assert data["hook_event_name"] == "pre_tool_use" and data["tool_name"] == "run_command"
    assert data["tool_input"] == {"command": "touch made"} and data["cwd"] == str(work)
    assert data["session_id"] == session_id and data["call_id"] and data["turn_id"]


async def test_a_hook_ask_asks_and_nobody_to_ask_denies(home: Path, tmp_path: Path, work: Path):
    guard = hook_script(tmp_path, "guard", "print(json.dumps({'decision': 'ask', 'reason': 'looks odd'}))")
    (home / "config.toml").write_text(hooks_config(("pre_tool_use", [sys.executable, guard], "")))
    requests: list[dict] = []

    async def answer(method: str, params: Any) -> Any:
        requests.append(params)
        return {"decision": "allow_once"}

    async with in_memory_daemon(home, permission_requests=True, on_request=answer) as (client, _):
        session_id = await start(client, work)
        events = await run(client, session_id, TOUCH)
    [request] = requests
    assert request["reason"] == "looks odd"
    assert of(events, "tool_execution_start")[0]["permission"]["source"] == "user"
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work)
        events = await run(client, session_id, ("run_command", {"command": "touch again"}))
    assert of(events, "tool_execution_end")[0]["is_error"] and not (work / "again").exists()


async def test_user_prompt_submit_deny_ends_the_turn_with_its_reason(home: Path, tmp_path: Path, work: Path):
    guard = hook_script(
        tmp_path, "guard", "if 'secret' in data['prompt']:\n    sys.stderr.write('no secrets here'); sys.exit(2)\n"
    )
    (home / "config.toml").write_text(hooks_config(("user_prompt_submit", [sys.executable, guard], "")))
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "tell me the secret"})
        events = await client.collect_turn(turn["turn_id"])
        assert events[0]["type"] == "turn_start" and events[1]["type"] == "hook_start"
        assert events[-1]["stop_reason"] == "error" and "no secrets here" in events[-1]["error"]["message"]
        assert of(events, "message_start") == []  # no model call
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "tool: list_files {}"})
        events = await client.collect_turn(turn["turn_id"])
        assert events[-1]["stop_reason"] == "end_turn"


async def test_watching_hooks_see_results_and_stops_and_cannot_stop_anything(home: Path, tmp_path: Path, work: Path):
    seen = tmp_path / "seen.jsonl"
    body = f"open({str(seen)!r}, 'a').write(json.dumps(data) + '\\n')\nsys.exit(2)\n"  # blocks: ignored here
    watcher = hook_script(tmp_path, "watch", body)
    (home / "config.toml").write_text(
        hooks_config(
            ("post_tool_use", [sys.executable, watcher], ""),
            ("stop", [sys.executable, watcher], ""),
            ("pre_compact", [sys.executable, watcher], ""),
        )
    )
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, work)
        events = await run(client, session_id, TOUCH)
        assert (work / "made").exists() and events[-1]["stop_reason"] == "end_turn"
        assert [e["event"] for e in of(events, "hook_end")] == ["post_tool_use", "stop"]
        assert events[-2]["type"] == "hook_end"  # the stop hook runs inside the turn's brackets
        await client.request("session/compact", {"session_id": session_id})
        compaction: list[dict] = []
        async with aclosing(client.events()) as stream:
            async for event in stream:
                compaction.append(event)
                if event["type"] == "turn_end":
                    break
    kinds = [e["type"] for e in compaction]
    assert kinds.index("hook_end") < kinds.index("compaction_start")  # before it, never stopping it
    assert compaction[kinds.index("hook_start")]["event"] == "pre_compact"
    seen_events = [json.loads(line) for line in seen.read_text().splitlines()]
    post = seen_events[0]
    assert post["hook_event_name"] == "post_tool_use" and post["tool_result"]["is_error"] is False
    assert post["tool_input"] == {"command": "touch made"}
    assert seen_events[1]["hook_event_name"] == "stop" and seen_events[1]["stop_reason"] == "end_turn"
    assert seen_events[2]["hook_event_name"] == "pre_compact" and seen_events[2]["trigger"] == "manual"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="looks for the hook's process in /proc")
async def test_a_hook_dies_with_the_daemon(home: Path, tmp_path: Path, work: Path, anyio_backend):
    pid_file = tmp_path / "hook.pid"
    guard = hook_script(tmp_path, "guard", f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    (home / "config.toml").write_text(hooks_config(("pre_tool_use", [sys.executable, guard], "timeout_s = 300")))
    async with subprocess_daemon(home, backend=anyio_backend) as client:
        session_id = await start(client, work)
        await client.request("session/prompt", {"session_id": session_id, "text": script(TOUCH)})
        with anyio.fail_after(10):
            while not pid_file.exists() or not pid_file.read_text():
                await anyio.sleep(0.05)
        process_of(client).kill()  # SIGKILL: no clean-up of its own; the child watcher ends the group
        hook_pid = int(pid_file.read_text())
        with anyio.fail_after(10):
            while _alive(hook_pid):
                await anyio.sleep(0.05)
    assert not (work / "made").exists()
