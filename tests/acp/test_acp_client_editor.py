"""The whole editor flow with the official ACP client library (``agent-client-protocol``)
driving a real ``ponder acp``: file-system capabilities declared, an unsaved buffer read, an
edit written through the client, a mode switch, a plan shown, and every message the daemon
wrote valid against the ACP schema (``SchemaObserver`` in ``ponder_acp``)."""

import asyncio
import json
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import ClientCapabilities, FileSystemCapabilities, ReadTextFileResponse, WriteTextFileResponse

from tests.acp.test_acp_client import Recorder, SentRecorder, ponder_acp

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ACP client library; the daemon's backend is daemon_backend


class EditorClient(Recorder):
    """A Recorder that is also an editor: open buffers, read and written through ``fs``."""

    def __init__(self) -> None:
        super().__init__("allow_once")
        self.buffers: dict[str, str] = {}
        self.fs: list[tuple[str, str]] = []  # (method, path) in order

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        self.fs.append(("read", path))
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        if Path(path).is_file():
            return ReadTextFileResponse(content=Path(path).read_text())
        raise acp.RequestError.resource_not_found(path)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.fs.append(("write", path))
        self.buffers[path] = content
        return WriteTextFileResponse()


def step(name: str, **arguments: Any) -> str:
    return f"tool: {name} {json.dumps(arguments)}"


STEPS = [
    step(
        "update_plan",
        explanation="Fix the greeting, then note what changed.",
        plan=[
            {"step": "Read greet.py", "status": "in_progress"},
            {"step": "Fix the greeting", "status": "pending"},
            {"step": "Write CHANGES.md", "status": "pending"},
        ],
    ),
    step("read_file", path="greet.py"),
    step(
        "update_plan",
        plan=[
            {"step": "Read greet.py", "status": "completed"},
            {"step": "Fix the greeting", "status": "in_progress"},
            {"step": "Write CHANGES.md", "status": "pending"},
        ],
    ),
    step("edit_file", path="greet.py", old_string="Helo", new_string="Hello"),
    step("write_file", path="CHANGES.md", content="- greet.py: fixed the greeting\n"),
    step(
        "update_plan",
        plan=[
            {"step": "Read greet.py", "status": "completed"},
            {"step": "Fix the greeting", "status": "completed"},
            {"step": "Write CHANGES.md", "status": "completed"},
        ],
    ),
]


def abbreviated(update: Any) -> str:
    """One update as a person would describe what the editor shows."""
    kind = update.session_update
    if kind == "plan":
        return "plan [" + ", ".join(f"{e.content}: {e.status}" for e in update.entries) + "]"
    if kind == "tool_call":
        return f"tool_call {update.title} ({update.kind}, {update.status})"
    if kind == "tool_call_update":
        content = update.content[0].type if update.content else "-"
        return f"tool_call_update {update.status} {content}"
    if kind == "current_mode_update":
        return f"current_mode_update {update.current_mode_id}"
    return kind


async def test_the_editor_flow_with_the_official_client(home: Path, work: Path, daemon_backend: str) -> None:
    greet = work / "greet.py"
    greet.write_text('print("Hi")\n')  # the disk
    client, sent = EditorClient(), SentRecorder()
    client.buffers[str(greet.resolve())] = 'print("Helo")\n'  # the unsaved buffer
    capabilities = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))
    async with ponder_acp(client, home, daemon_backend, sent=sent, capabilities=capabilities) as conn:
        new = await conn.new_session(cwd=str(work), mcp_servers=[])
        session_id = new.session_id
        assert new.modes.current_mode_id == "ask"
        assert [m.id for m in new.modes.available_modes] == ["ask", "auto", "read_only"]
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/tools")
        await conn.set_session_mode(session_id=session_id, mode_id="auto")
        result = await conn.prompt(session_id=session_id, prompt=[acp.text_block("\n".join(STEPS))])
        assert result.stop_reason == "end_turn"
        await asyncio.sleep(0.05)  # notification handlers run as their own tasks

    target, changes = str(greet.resolve()), str((work / "CHANGES.md").resolve())
    # Auto mode: nobody was asked; the edit and the new file landed in the editor, not on disk.
    assert client.permissions == []
    assert client.buffers[target] == 'print("Hello")\n' and greet.read_text() == 'print("Hi")\n'
    assert client.buffers[changes] == "- greet.py: fixed the greeting\n" and not (work / "CHANGES.md").exists()
    assert ("read", target) in client.fs and ("write", target) in client.fs and ("write", changes) in client.fs
    # The read saw the unsaved buffer.
    finished = [u for u in client.of("tool_call_update") if u.status == "completed"]
    assert 'print("Helo")' in finished[0].content[0].content.text
    # The edit's card shows the change to the buffer.
    diff = finished[1].content[0]
    assert (diff.type, diff.path, diff.old_text, diff.new_text) == (
        "diff",
        target,
        'print("Helo")\n',
        'print("Hello")\n',
    )
    # The mode switch was echoed, and the plan went from one step in progress to all completed.
    assert [u.current_mode_id for u in client.of("current_mode_update")] == ["auto"]
    plans = client.of("plan")
    assert [[e.status for e in p.entries] for p in plans] == [
        ["in_progress", "pending", "pending"],
        ["completed", "in_progress", "pending"],
        ["completed", "completed", "completed"],
    ]
    assert all(e.priority == "medium" for p in plans for e in p.entries)
    # update_plan calls are the plan, not cards: three cards for read, edit, write.
    assert [c.kind for c in client.of("tool_call")] == ["read", "edit", "edit"]
    print("\nWhat the editor was sent for one multi-step task:")
    for update in client.updates:
        if update.session_update not in ("agent_message_chunk", "agent_thought_chunk", "usage_update"):
            print("  " + abbreviated(update))
