"""``ponder acp`` as an editor meets it, against a real subprocess, on asyncio and trio: the
order of answers and updates, files through the client's ``fs``, session modes, and plans.

Every message the daemon writes is recorded in order and checked against the vendored ACP
schema (``tests.support.acp_subprocess``)."""

from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcError
from tests.support.acp_subprocess import Wire, acp_subprocess

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def until(condition: Any, timeout_s: float = 15) -> None:
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.02)


def answer_position(wire: Wire, key: str, value: str) -> int:
    """Where the first result carrying ``key: value`` sits on the wire."""
    for index, message in enumerate(wire.messages):
        result = message.get("result") if isinstance(message, dict) else None
        if isinstance(result, dict) and result.get(key) == value:
            return index
    raise AssertionError(f"no answer with {key}={value!r}")


def update_positions(wire: Wire, session_id: str) -> list[int]:
    return [
        index
        for index, message in enumerate(wire.messages)
        if isinstance(message, dict)
        and message.get("method") == "session/update"
        and message["params"]["sessionId"] == session_id
    ]


# --- ordering ----------------------------------------------------------------------------------

SESSIONS = 24


async def test_no_session_update_precedes_the_answer_that_names_its_session(
    home: Path, work: Path, anyio_backend: str
) -> None:
    """Many ``session/new`` at once (and a fork): each session's first update comes after the
    answer that gave the client its id; every new session still gets its commands."""
    async with acp_subprocess(home, anyio_backend) as (client, wire, _):
        ids: list[str] = []

        async def new() -> None:
            ids.append((await client.request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"])

        async with anyio.create_task_group() as tg:
            for _ in range(SESSIONS):
                tg.start_soon(new)
        await until(lambda: len(wire.updates(kind="available_commands_update")) >= SESSIONS)
        forked = (await client.request("_ponder/session/fork", {"sessionId": ids[0]}))["sessionId"]
        loaded = await client.request("session/load", {"sessionId": forked, "cwd": str(work), "mcpServers": []})
        assert loaded["configOptions"]
    assert len(set(ids)) == SESSIONS
    for session_id in [*ids, forked]:
        answered = answer_position(wire, "sessionId", session_id)
        positions = update_positions(wire, session_id)
        assert positions, f"session {session_id} got no update at all"
        assert min(positions) > answered, (session_id, answered, positions)
    for session_id in ids:
        assert [u["sessionUpdate"] for u in wire.updates(session_id)][:1] == ["available_commands_update"]


# --- files through the editor ---------------------------------------------------------------------


class Editor:
    """An editor as ponder sees it over ACP: open buffers (unsaved text differs from the disk),
    ``fs`` requests answered from them, permission requests answered ``answer``."""

    def __init__(self, answer: str = "allow_once") -> None:
        self.buffers: dict[str, str] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.answer = answer

    async def __call__(self, method: str, params: Any) -> Any:
        self.requests.append((method, params))
        if method == "fs/read_text_file":
            path = params["path"]
            if path.endswith("locked.txt"):
                raise RuntimeError("the buffer is locked by another extension")
            if path in self.buffers:
                return {"content": self.buffers[path]}
            if Path(path).is_file():
                return {"content": Path(path).read_text()}
            raise RuntimeError(f"no such file: {path}")
        if method == "fs/write_text_file":
            if params["path"].endswith("locked.txt"):
                raise RuntimeError("the buffer is read-only")
            self.buffers[params["path"]] = params["content"]
            return {}
        if method == "session/request_permission":
            return {"outcome": {"outcome": "selected", "optionId": self.answer}}
        raise RuntimeError(f"unexpected request {method}")

    def fs_paths(self, method: str) -> list[str]:
        return [params["path"] for m, params in self.requests if m == method]


def script(*steps: tuple[str, dict[str, Any]]) -> str:
    import json

    return "\n".join(f"tool: {name} {json.dumps(arguments)}" for name, arguments in steps)


async def run_script(client: Any, work: Path, text: str, session_id: str | None = None) -> str:
    if session_id is None:
        session_id = (await client.request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
        await client.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "model", "value": "mock/tools"}
        )
    answer = await client.request(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    )
    assert answer["stopReason"] == "end_turn"
    return session_id


def finished_calls(wire: Wire, session_id: str) -> list[dict[str, Any]]:
    """Each tool call's final update (completed or failed), in order."""
    return [u for u in wire.updates(session_id, "tool_call_update") if u.get("status") in ("completed", "failed")]


def result_text(update: dict[str, Any]) -> str:
    [content] = update["content"]
    return content["content"]["text"] if content["type"] == "content" else f"diff {content['newText']!r}"


async def test_file_tools_go_through_the_editor_when_it_offers_fs(home: Path, work: Path, anyio_backend: str) -> None:
    (work / "notes.txt").write_text("on disk\n")
    (work / "locked.txt").write_text("x\n")
    (work.parent / "outside.txt").write_text("outside\n")
    notes = str((work / "notes.txt").resolve())
    editor = Editor()
    editor.buffers[notes] = "unsaved buffer\n"
    fs = {"readTextFile": True, "writeTextFile": True}
    async with acp_subprocess(home, anyio_backend, fs=fs, on_request=editor) as (client, wire, _):
        steps = script(
            ("read_file", {"path": "notes.txt"}),
            ("edit_file", {"path": "notes.txt", "old_string": "unsaved", "new_string": "edited"}),
            ("write_file", {"path": "sub/new.txt", "content": "brand new\n"}),
            ("read_file", {"path": "../outside.txt"}),
            ("read_file", {"path": "locked.txt"}),
            ("write_file", {"path": "locked.txt", "content": "y\n"}),
            ("search", {"pattern": "on disk|unsaved|edited"}),
        )
        session_id = await run_script(client, work, steps)
    read, edit, write, outside, locked_read, locked_write, search = finished_calls(wire, session_id)
    # The read saw the unsaved buffer, numbered as a file on disk is.
    assert read["status"] == "completed" and result_text(read) == "     1\tunsaved buffer"
    # The edit was made on the buffer and landed in the editor; the disk is untouched.
    assert edit["status"] == "completed"
    assert edit["content"] == [
        {"type": "diff", "path": notes, "oldText": "unsaved buffer\n", "newText": "edited buffer\n"}
    ]
    assert editor.buffers[notes] == "edited buffer\n"
    assert (work / "notes.txt").read_text() == "on disk\n"
    new = str((work / "sub" / "new.txt").resolve())
    assert write["status"] == "completed" and editor.buffers[new] == "brand new\n"
    assert not (work / "sub").exists()
    # The permission request for the edit showed the change to the buffer, not to the disk.
    asked = [params for m, params in editor.requests if m == "session/request_permission"]
    assert asked[0]["toolCall"]["content"][0]["oldText"] == "unsaved buffer\n"
    assert asked[0]["toolCall"]["content"][0]["newText"] == "edited buffer\n"
    # Confinement is checked before the editor is asked: nothing outside the cwd was requested.
    assert outside["status"] == "failed" and "outside the session's working directory" in result_text(outside)
    assert all(Path(p).is_relative_to(work.resolve()) for p in editor.fs_paths("fs/read_text_file"))
    # The editor's errors are tool errors the model reads.
    assert locked_read["status"] == "failed" and "the buffer is locked by another extension" in result_text(locked_read)
    assert locked_write["status"] == "failed" and "the buffer is read-only" in result_text(locked_write)
    # search stays on the disk.
    assert search["status"] == "completed"
    assert "on disk" in result_text(search) and "edited" not in result_text(search)


async def test_rules_and_the_policy_apply_before_the_editor_is_asked(
    home: Path, work: Path, anyio_backend: str
) -> None:
    (home / "config.toml").write_text(
        '[[permissions.rules]]\ntool = "write_file"\npath = "secrets/**"\ndecision = "deny"\n'
    )
    editor = Editor(answer="deny")
    fs = {"readTextFile": True, "writeTextFile": True}
    async with acp_subprocess(home, anyio_backend, fs=fs, on_request=editor) as (client, wire, _):
        steps = script(
            ("write_file", {"path": "secrets/key.txt", "content": "k\n"}),
            ("write_file", {"path": "refused.txt", "content": "r\n"}),
        )
        session_id = await run_script(client, work, steps)
    by_rule, by_person = finished_calls(wire, session_id)
    assert by_rule["status"] == "failed" and by_person["status"] == "failed"
    assert "user denied" in result_text(by_person)
    # Only the second was asked about, and neither reached the editor.
    assert [p["toolCall"]["rawInput"]["path"] for m, p in editor.requests if m == "session/request_permission"] == [
        "refused.txt"
    ]
    assert editor.fs_paths("fs/write_text_file") == []


@pytest.mark.parametrize(
    "fs",
    [
        {"readTextFile": False, "writeTextFile": False},
        {"readTextFile": True, "writeTextFile": False},  # edit_file needs both: it stays on disk
    ],
)
async def test_without_the_editors_writes_the_tools_use_the_disk(
    home: Path, work: Path, anyio_backend: str, fs: dict[str, bool]
) -> None:
    (work / "a.txt").write_text("alpha\n")
    editor = Editor()
    async with acp_subprocess(home, anyio_backend, fs=fs, on_request=editor) as (client, wire, _):
        steps = script(
            ("edit_file", {"path": "a.txt", "old_string": "alpha", "new_string": "beta"}),
            ("write_file", {"path": "b.txt", "content": "bravo\n"}),
            ("read_file", {"path": "a.txt"}),
        )
        session_id = await run_script(client, work, steps)
    edit, write, read = finished_calls(wire, session_id)
    assert (work / "a.txt").read_text() == "beta\n" and (work / "b.txt").read_text() == "bravo\n"
    assert edit["content"][0]["newText"] == "beta\n" and write["status"] == "completed"
    assert editor.fs_paths("fs/write_text_file") == []
    reads = editor.fs_paths("fs/read_text_file")
    if fs["readTextFile"]:
        assert result_text(read) == "     1\tbeta" and str((work / "a.txt").resolve()) in reads
    else:
        assert reads == []


# --- session modes --------------------------------------------------------------------------------


async def test_modes_are_the_approval_policies_the_rules_refine_and_are_stored(
    home: Path, work: Path, anyio_backend: str
) -> None:
    (home / "config.toml").write_text(
        '[[permissions.rules]]\ntool = "write_file"\npath = "secrets/**"\ndecision = "deny"\n'
        '[[permissions.rules]]\ntool = "write_file"\npath = "allowed.txt"\ndecision = "allow"\n'
    )
    editor = Editor()
    async with acp_subprocess(home, anyio_backend, on_request=editor) as (client, wire, _):
        new = await client.request("session/new", {"cwd": str(work), "mcpServers": []})
        session_id = new["sessionId"]
        assert new["modes"]["currentModeId"] == "ask"
        assert [m["id"] for m in new["modes"]["availableModes"]] == ["ask", "auto", "read_only"]
        assert all(m["name"] and m["description"] for m in new["modes"]["availableModes"])
        await client.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "model", "value": "mock/tools"}
        )

        async def in_mode(mode: str, *steps: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
            request_id = f"mode-{len(wire.messages)}"
            params = {"sessionId": session_id, "modeId": mode}
            assert await client.request("session/set_mode", params, request_id=request_id) == {}
            shown = {"sessionUpdate": "current_mode_update", "currentModeId": mode}
            await until(lambda: wire.updates(session_id, "current_mode_update")[-1:] == [shown])
            # The update follows the answer.
            answered = next(i for i, m in enumerate(wire.messages) if m.get("id") == request_id)
            assert [
                i
                for i, m in enumerate(wire.messages)
                if m.get("method") == "session/update" and m["params"]["update"] == shown
            ][-1] > answered
            done = len(finished_calls(wire, session_id))
            await run_script(client, work, script(*steps), session_id)
            return finished_calls(wire, session_id)[done:]

        asked_before = len(editor.requests)
        # read_only: no change runs, whatever a rule allows; nobody is asked.
        refused, allowed_by_rule = await in_mode(
            "read_only",
            ("write_file", {"path": "a.txt", "content": "a\n"}),
            ("write_file", {"path": "allowed.txt", "content": "x\n"}),
        )
        assert refused["status"] == allowed_by_rule["status"] == "failed"
        assert "approval policy is 'read_only'" in result_text(refused)
        assert len(editor.requests) == asked_before and not (work / "allowed.txt").exists()
        # auto: runs without asking, but a deny rule still denies.
        ran, denied = await in_mode(
            "auto",
            ("write_file", {"path": "a.txt", "content": "a\n"}),
            ("write_file", {"path": "secrets/k.txt", "content": "k\n"}),
        )
        assert ran["status"] == "completed" and (work / "a.txt").read_text() == "a\n"
        assert denied["status"] == "failed" and not (work / "secrets").exists()
        assert len(editor.requests) == asked_before
        # ask: the person is asked.
        [asked] = await in_mode("ask", ("write_file", {"path": "b.txt", "content": "b\n"}))
        assert asked["status"] == "completed"
        assert [m for m, _ in editor.requests[asked_before:]] == ["session/request_permission"]
        await client.request("session/set_mode", {"sessionId": session_id, "modeId": "auto"})

        with pytest.raises(RpcError) as unknown:
            await client.request("session/set_mode", {"sessionId": session_id, "modeId": "yolo"})
        assert unknown.value.code == -32602 and unknown.value.data["allowed"] == ["ask", "auto", "read_only"]
        with pytest.raises(RpcError) as missing:
            await client.request("session/set_mode", {"sessionId": "ses_nope", "modeId": "auto"})
        assert missing.value.code == -32002

    # The mode is the session's stored policy: a restart keeps it, on load and on resume.
    async with acp_subprocess(home, anyio_backend) as (client, wire, _):
        for method in ("session/load", "session/resume"):
            reopened = await client.request(method, {"sessionId": session_id, "cwd": str(work), "mcpServers": []})
            assert reopened["modes"]["currentModeId"] == "auto", method


async def test_the_configured_default_policy_is_a_new_sessions_mode(home: Path, work: Path, anyio_backend: str) -> None:
    (home / "config.toml").write_text('[defaults]\napproval_policy = "read_only"\n')
    async with acp_subprocess(home, anyio_backend) as (client, _wire, _):
        new = await client.request("session/new", {"cwd": str(work), "mcpServers": []})
    assert new["modes"]["currentModeId"] == "read_only"


# --- plans ----------------------------------------------------------------------------------------

PLAN = [
    {"step": "Read the notes", "status": "in_progress"},
    {"step": "Fix the typo", "status": "pending"},
]
DONE = [
    {"step": "Read the notes", "status": "completed"},
    {"step": "Fix the typo", "status": "completed"},
]


def acp_entries(plan: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{"content": e["step"], "priority": "medium", "status": e["status"]} for e in plan]


async def test_the_plan_is_shown_live_and_replayed_after_the_history(
    home: Path, work: Path, anyio_backend: str
) -> None:
    (work / "notes.txt").write_text("teh notes\n")
    (home / "config.toml").write_text('[[permissions.rules]]\ntool = "*"\ndecision = "deny"\n')
    steps = script(
        ("update_plan", {"explanation": "Two small steps.", "plan": PLAN}),
        ("update_plan", {"plan": [{**PLAN[0], "status": "in_progress"}, {**PLAN[1], "status": "in_progress"}]}),
        ("update_plan", {"plan": DONE}),
    )
    async with acp_subprocess(home, anyio_backend) as (client, wire, _):
        session_id = await run_script(client, work, steps)
        # Even a deny-everything rule leaves update_plan alone; its calls get no card.
        plans = wire.updates(session_id, "plan")
        assert plans == [
            {
                "sessionUpdate": "plan",
                "entries": acp_entries(PLAN),
                "_meta": {"ponder": {"explanation": "Two small steps."}},
            },
            {"sessionUpdate": "plan", "entries": acp_entries(DONE)},
        ]
        assert wire.updates(session_id, "tool_call") == []
        assert wire.updates(session_id, "tool_call_update") == []
        answer = "".join(u["content"]["text"] for u in wire.updates(session_id, "agent_message_chunk"))
        assert (
            "I ran 3 tool call(s). The last one returned:\nPlan updated: 2 completed, 0 in progress, 0 pending."
            in answer
        )

    async with acp_subprocess(home, anyio_backend) as (client, wire, _):
        await client.request("session/load", {"sessionId": session_id, "cwd": str(work), "mcpServers": []})
        kinds = [u["sessionUpdate"] for u in wire.updates(session_id)]
        # The history (the prompt, the answer), then the latest plan, once.
        assert kinds.index("plan") > kinds.index("agent_message_chunk")
        assert wire.updates(session_id, "plan") == [{"sessionUpdate": "plan", "entries": acp_entries(DONE)}]
        assert wire.updates(session_id, "tool_call") == []
        before = len(wire.messages)
        await client.request("session/resume", {"sessionId": session_id, "cwd": str(work), "mcpServers": []})
        resumed = [m["params"]["update"] for m in wire.messages[before:] if m.get("method") == "session/update"]
        assert [u for u in resumed if u["sessionUpdate"] == "plan"] == [
            {"sessionUpdate": "plan", "entries": acp_entries(DONE)}
        ]
