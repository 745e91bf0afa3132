"""File tools keep out of the ponder home, and off the ``cwd``'s ``.git`` while the sandbox is
on, whatever the policy (PROTOCOL.md "Sandbox")."""

import json

import pytest

from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


def script(*steps: tuple[str, dict]) -> str:
    return "\n".join(f"tool: {name} {json.dumps(args)}" for name, args in steps)


async def tool_ends(client, session_id: str, *steps: tuple[str, dict]) -> list[dict]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": script(*steps)})
    return [e for e in await client.collect_turn(turn["turn_id"]) if e["type"] == "tool_execution_end"]


async def start(client, cwd, **params) -> str:
    result = await client.request(
        "session/start", {"model_id": "mock/tools", "cwd": str(cwd), "approval_policy": "auto", **params}
    )
    return result["session"]["session_id"]


async def test_file_tools_never_touch_the_home_and_keep_off_git(home, tmp_path):
    # The home lies inside the session's cwd (tmp_path), as ~/.local/share/ponder inside ~ does.
    (home / "serve.token").write_text("home-secret-token")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "notes.txt").write_text("home-secret-token? no: just notes\n")
    (tmp_path / "token-link").symlink_to(home / "serve.token")
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        read, link, write_home, write_git, edit_git, listing, found = await tool_ends(
            client,
            session_id,
            ("read_file", {"path": "home/serve.token"}),
            ("read_file", {"path": "token-link"}),
            ("write_file", {"path": "home/config.toml", "content": "[sandbox]\nmode = 'off'\n"}),
            ("write_file", {"path": ".git/config", "content": "[evil]\n"}),
            ("edit_file", {"path": ".git/config", "old_string": "[core]", "new_string": "[evil]"}),
            ("list_files", {}),
            ("search", {"pattern": "home-secret"}),
        )
        for refused in (read, link, write_home):
            assert refused["is_error"] and "ponder home" in refused["result"]
        assert "home-secret-token" not in read["result"] + link["result"]
        assert not (home / "config.toml").exists()
        for refused in (write_git, edit_git):
            assert refused["is_error"] and "read-only while the session's sandbox is on" in refused["result"]
        assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
        assert "notes.txt" in listing["result"] and "serve.token" not in listing["result"]
        assert "token-link" not in listing["result"]
        assert "notes.txt" in found["result"] and "serve.token" not in found["result"]

        # With the sandbox off, .git is the person's to change; the home never is.
        unsandboxed = await start(client, tmp_path, sandbox={"mode": "off"})
        write_git, read = await tool_ends(
            client,
            unsandboxed,
            ("write_file", {"path": ".git/config", "content": "[changed]\n"}),
            ("read_file", {"path": "home/serve.token"}),
        )
        assert not write_git["is_error"] and (tmp_path / ".git" / "config").read_text() == "[changed]\n"
        assert read["is_error"] and "ponder home" in read["result"]
