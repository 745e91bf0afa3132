"""What permission rules and a no-op hook add to each tool call (issue 29).

Two measures:

1. In process: ``judge`` (the command line parsed with tree-sitter-bash, then 20 rules
   matched against every command) for a typical compound command, per call (best of 5 runs
   of 2000); and ``run_hook`` of a no-op hook (``true``), median.
2. Through a real ``ponder serve`` (mock/tools at zero delay, ``approval_policy = auto``):
   a turn of N ``run_command`` calls, each timed from the tool message's ``message_start``
   to the call's ``tool_execution_start`` (exactly the approval: rules, hooks, policy), as
   the client receives them; without rules, with 20 rules, and with 20 rules and one no-op
   ``pre_tool_use`` hook (``true``). Medians.

    uv run python scripts/measure_permissions.py [calls]
"""

import json
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.jsonrpc.client import spawn_daemon
from daemon.permissions.decide import call_facts, judge
from daemon.permissions.hooks import Hook, run_hook
from daemon.permissions.rules import Rule

COMMAND = "git status && ls -la src | grep -v test > out.txt 2>&1; timeout 60 npm test -- --watch=false"
RULE_WORDS = ["git", "ls", "grep", "npm", "make", "cargo", "pytest", "uv", "echo", "cat"]


def rules_toml() -> str:
    out = []
    for word in RULE_WORDS:
        out.append(f'[[permissions.rules]]\ntool = "run_command"\npattern = ["{word}"]\ndecision = "allow"\n')
        out.append(
            f'[[permissions.rules]]\ntool = "run_command"\npattern = ["{word}", "--danger"]\ndecision = "deny"\n'
        )
    return "\n".join(out)


def in_process(cwd: Path) -> tuple[float, float]:
    """(µs to parse the line, µs to parse it and match 20 rules), per call."""
    rules = [Rule(tool="run_command", decision="allow", pattern=(w,)) for w in RULE_WORDS]
    rules += [Rule(tool="run_command", decision="deny", pattern=(w, "--danger")) for w in RULE_WORDS]
    assert judge(rules, call_facts("run_command", {"command": COMMAND}, cwd)).decision == "allow"
    number = 2000
    parse = min(timeit.repeat(lambda: call_facts("run_command", {"command": COMMAND}, cwd), number=number, repeat=5))
    both = min(
        timeit.repeat(
            lambda: judge(rules, call_facts("run_command", {"command": COMMAND}, cwd)), number=number, repeat=5
        )
    )
    return parse / number * 1e6, both / number * 1e6


async def hook_runs(calls: int, cwd: Path) -> float:
    """Median ms of ``run_hook`` for a no-op hook (``true``): spawn, JSON in, wait, read."""
    hook = Hook(event="pre_tool_use", command=(shutil.which("true") or "/bin/true",))
    payload = {"hook_event_name": "pre_tool_use", "tool_name": "run_command", "tool_input": {"command": COMMAND}}
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        outcome = await run_hook(hook, payload, cwd)
        times.append((time.perf_counter() - began) * 1000)
        assert outcome.status == "completed", outcome
    return statistics.median(times)


async def approval_gaps(config: str, calls: int, work: Path) -> list[float]:
    with tempfile.TemporaryDirectory() as home:
        Path(home, "config.toml").write_text(config)
        async with spawn_daemon(home=home, env={"PONDER_MOCK_DELAY_MS": "0"}, log_level="warning") as client:
            await client.request("initialize", {"protocol_version": 1})
            started = await client.request(
                "session/start", {"model_id": "mock/tools", "cwd": str(work), "approval_policy": "auto"}
            )
            session_id = started["session"]["session_id"]
            step = "tool: run_command " + json.dumps({"command": COMMAND.replace("npm test", "true")})
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "\n".join([step] * calls)})
            gaps, opened = [], None
            async for event in client.events(turn["turn_id"]):
                now = time.perf_counter()
                if event["type"] == "message_start" and event["role"] == "tool":
                    opened = now
                elif event["type"] == "tool_execution_start" and opened is not None:
                    gaps.append((now - opened) * 1000)
                    opened = None
            await client.request("shutdown")
    return gaps


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        parse, both = in_process(work)
        print(
            f"parse {COMMAND!r}: {parse:.0f} µs; parse + 20 rules (judge): {both:.0f} µs per call "
            "(in process, best of 5)"
        )
        print(f"run_hook of a no-op hook (true): median {await hook_runs(calls, work):.2f} ms (in process)")
        true = shutil.which("true") or "/bin/true"
        hook = f'[[hooks.pre_tool_use]]\ncommand = ["{true}"]\n'
        results = {}
        for name, config in (
            ("no rules", ""),
            ("20 rules", rules_toml()),
            ("20 rules + no-op hook", rules_toml() + hook),
        ):
            gaps = await approval_gaps(config, calls, work)
            results[name] = statistics.median(gaps)
            print(
                f"{name:>22}: median {results[name]:.2f} ms message_start -> tool_execution_start ({len(gaps)} calls)"
            )
        print(f"added by 20 rules: {results['20 rules'] - results['no rules']:.2f} ms per call")
        print(f"added by a no-op hook: {results['20 rules + no-op hook'] - results['20 rules']:.2f} ms per call")


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 30)
