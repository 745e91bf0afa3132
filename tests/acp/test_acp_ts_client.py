"""The editor flow with the official ACP TypeScript SDK (``@agentclientprotocol/sdk``, pinned in
``tests/acp/ts_client/package-lock.json`` and installed by ``.ci/run``) as the client of a real
``ponder acp``: fs declared, an unsaved buffer read, an edit and a new file written through the
client, a mode switch, a plan shown; every message ponder wrote is checked against the ACP
schema, and no ``session/update`` for the session precedes the answer that names it.

Skips, saying why, where Node.js or the installed SDK is missing (``npm ci --prefix
tests/acp/ts_client`` installs it)."""

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_wire import validate_agent_message
from tests.support.harness import subprocess_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).resolve().parent / "ts_client"
SDK = CLIENT / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"


def step(name: str, **arguments: Any) -> str:
    return f"tool: {name} {json.dumps(arguments)}"


def plan(*statuses: str) -> list[dict[str, str]]:
    steps = ["Read greet.py", "Fix the greeting", "Write CHANGES.md"]
    return [{"step": s, "status": status} for s, status in zip(steps, statuses, strict=True)]


PROMPT = "\n".join(
    [
        step(
            "update_plan", explanation="Fix the greeting, then note it.", plan=plan("in_progress", "pending", "pending")
        ),
        step("read_file", path="greet.py"),
        step("update_plan", plan=plan("completed", "in_progress", "pending")),
        step("edit_file", path="greet.py", old_string="Helo", new_string="Hello"),
        step("update_plan", plan=plan("completed", "completed", "in_progress")),
        step("write_file", path="CHANGES.md", content="- greet.py: fixed the greeting\n"),
        step("update_plan", plan=plan("completed", "completed", "completed")),
    ]
)


def abbreviated(update: dict[str, Any]) -> str:
    kind = update["sessionUpdate"]
    if kind == "plan":
        return "plan [" + ", ".join(f"{e['content']}: {e['status']}" for e in update["entries"]) + "]"
    if kind == "tool_call":
        return f"tool_call {update['title']!r} ({update['kind']}, {update['status']})"
    if kind == "tool_call_update":
        content = update.get("content") or [{"type": "-"}]
        return f"tool_call_update {update['status']} {content[0]['type']}"
    if kind == "current_mode_update":
        return f"current_mode_update {update['currentModeId']}"
    return kind


async def test_the_editor_flow_with_the_official_typescript_sdk(home: Path, tmp_path: Path, anyio_backend: str) -> None:
    node = shutil.which("node")
    if node is None or not SDK.exists():
        pytest.skip("needs Node.js and the ACP TypeScript SDK: npm ci --prefix tests/acp/ts_client (.ci/run does it)")
    work = tmp_path / "work"
    work.mkdir()
    greet = work / "greet.py"
    greet.write_text('print("Hi")\n')  # the disk
    target, changes = str(greet.resolve()), str((work / "CHANGES.md").resolve())
    config = {
        "command": [sys.executable, "-m", "daemon", "--home", str(home), "--log-level", "warning", "acp"],
        "env": {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend})},
        "cwd": str(REPO),
        "work": str(work),
        "buffers": {target: 'print("Helo")\n'},  # the unsaved buffer
        "prompt": PROMPT,
    }
    with anyio.fail_after(90):
        done = await anyio.run_process([node, str(CLIENT / "flow.mjs"), json.dumps(config)], check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    run = json.loads(done.stdout)
    assert run["code"] == 0 and run["answer"] == {"stopReason": "end_turn"}

    # Every message ponder wrote fits ACP's schema.
    method_of_id = {m["id"]: m["method"] for m in run["sent"] if "method" in m and "id" in m}
    for message in run["received"]:
        validate_agent_message(message, method_of_id)
    # Nothing about the session before the answer that named it.
    session_id = run["session"]["sessionId"]
    answered = next(i for i, m in enumerate(run["received"]) if m.get("result", {}).get("sessionId") == session_id)
    first = next(i for i, m in enumerate(run["received"]) if m.get("method") == "session/update")
    assert first > answered

    # fs declared: the read saw the buffer, the edit and the new file landed in it, not on disk.
    assert run["buffers"][target] == 'print("Hello")\n' and greet.read_text() == 'print("Hi")\n'
    assert run["buffers"][changes] == "- greet.py: fixed the greeting\n" and not (work / "CHANGES.md").exists()
    assert ["write", target] in run["fs"] and ["write", changes] in run["fs"]
    updates = [u["update"] for u in run["updates"]]
    finished = [u for u in updates if u["sessionUpdate"] == "tool_call_update" and u["status"] == "completed"]
    assert 'print("Helo")' in finished[0]["content"][0]["content"]["text"]
    assert finished[1]["content"] == [
        {"type": "diff", "path": target, "oldText": 'print("Helo")\n', "newText": 'print("Hello")\n'}
    ]
    # The mode switch (auto: nobody was asked) and the plan, from the first step to the last.
    assert [u["currentModeId"] for u in updates if u["sessionUpdate"] == "current_mode_update"] == ["auto"]
    assert run["permissions"] == []
    plans = [u for u in updates if u["sessionUpdate"] == "plan"]
    assert [[e["status"] for e in p["entries"]] for p in plans] == [
        ["in_progress", "pending", "pending"],
        ["completed", "in_progress", "pending"],
        ["completed", "completed", "in_progress"],
        ["completed", "completed", "completed"],
    ]
    print("\nWhat the editor was sent for one multi-step task (chunks and usage left out):")
    for update in updates:
        if update["sessionUpdate"] not in ("agent_message_chunk", "agent_thought_chunk", "usage_update"):
            print("  " + abbreviated(update))
