"""Compaction in ACP: ``/compact`` is offered as a slash command and runs as a compaction turn; a
compaction is told with the unstable ``compaction_update`` to a client that advertises
``session.compaction``, else as one short agent message. Real HTTP to a local chat server."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from daemon.jsonrpc.client import RpcClient
from tests.sessions.test_compaction import project
from tests.support.acp_harness import acp_daemon, drain
from tests.support.acp_wire import validate_agent_message
from tests.support.replay import ReplayServer
from tests.support.small_window import SmallWindowChat, small_window_config

pytestmark = pytest.mark.anyio

DEFAULTS = '[defaults]\nmodel = "local/small"\napproval_policy = "auto"\n'


@contextmanager
def serving(home: Path, chat: SmallWindowChat) -> Iterator[None]:
    """``chat`` on a local server, configured as the default model."""
    with ReplayServer() as server:
        chat.install(server)
        config = small_window_config(server.url, window=100_000, extra="keep_recent_tokens = 500")
        (home / "config.toml").write_text(DEFAULTS + config)
        yield


async def new_session(client: RpcClient, cwd: Path) -> str:
    return (await client.request("session/new", {"cwd": str(cwd), "mcpServers": []}))["sessionId"]


async def prompt(client: RpcClient, session_id: str, text: str) -> dict[str, Any]:
    blocks = [{"type": "text", "text": text}]
    return await client.request("session/prompt", {"sessionId": session_id, "prompt": blocks})


def updates(received: list[tuple[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [p["update"] for m, p in received if m == "session/update" and p["update"]["sessionUpdate"] == kind]


async def three_turns(client: RpcClient, session_id: str) -> None:
    for n in range(3):
        assert (await prompt(client, session_id, f"Turn {n}: module {n}."))["stopReason"] == "end_turn"


async def test_compact_is_a_slash_command_and_its_result_an_agent_message(home, tmp_path):
    cwd = project(tmp_path, 3)
    chat = SmallWindowChat(window=100_000)
    with serving(home, chat):
        async with acp_daemon(home) as (client, _daemon):
            session_id = await new_session(client, cwd)
            await three_turns(client, session_id)
            drained = drain(client)
            [commands] = updates(drained, "available_commands_update")
            assert [c["name"] for c in commands["availableCommands"]] == ["compact", "continue", "budget"]
            assert commands["availableCommands"][0]["input"]["hint"]
            answer = await prompt(client, session_id, "/compact keep the module numbers")
            received = drain(client)
            again = await prompt(client, session_id, "/compact")
            received_again = drain(client)
    assert answer == {"stopReason": "end_turn"}
    [message] = updates(received, "agent_message_chunk")
    assert message["content"]["text"].startswith("Compacted the conversation into a summary: about ")
    assert updates(received, "compaction_update") == []
    assert "keep the module numbers" in str(chat.of_kind("summary")[0].body)
    # Right after, everything left is recent: nothing to fold, said in one message too.
    assert again == {"stopReason": "end_turn"}
    assert [u["content"]["text"] for u in updates(received_again, "agent_message_chunk")] == [
        "Nothing to compact yet: the conversation is all recent."
    ]
    assert len(chat.of_kind("summary")) == 1


async def test_a_client_with_the_compaction_capability_gets_compaction_updates(home, tmp_path):
    cwd = project(tmp_path, 3)
    chat = SmallWindowChat(window=100_000)

    def validate(message: Any, method_of_id: dict[Any, str]) -> None:
        # compaction_update is in ACP's unstable schema only; everything else is checked as usual.
        update = (message.get("params") or {}).get("update") if isinstance(message, dict) else None
        if not (isinstance(update, dict) and update.get("sessionUpdate") == "compaction_update"):
            validate_agent_message(message, method_of_id)

    with serving(home, chat):
        async with acp_daemon(home) as (client, _daemon):
            client.on_message = validate
            capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "session": {"compaction": {}}}
            await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
            session_id = await new_session(client, cwd)
            await three_turns(client, session_id)
            drain(client)
            assert await prompt(client, session_id, "/compact") == {"stopReason": "end_turn"}
            received = drain(client)
    progress, done = updates(received, "compaction_update")
    assert progress == {
        "sessionUpdate": "compaction_update",
        "compactionId": done["compactionId"],
        "status": "in_progress",
    }
    assert done["status"] == "completed" and "## Goal" in done["summary"][0]["text"]
    assert updates(received, "agent_message_chunk") == []


async def test_load_replays_a_stored_compaction_at_its_place(home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    with serving(home, chat):
        async with acp_daemon(home) as (client, _daemon):
            session_id = await new_session(client, cwd)
            await three_turns(client, session_id)
            assert await prompt(client, session_id, "/compact") == {"stopReason": "end_turn"}
            await prompt(client, session_id, "Turn 3: module 3.")
        async with acp_daemon(home) as (client, _daemon):
            drain(client)
            await client.request("session/load", {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []})
            replayed = [p["update"] for m, p in drain(client) if m == "session/update"]
    users = [u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
    assert users == ["Turn 0: module 0.", "Turn 1: module 1.", "Turn 2: module 2.", "Turn 3: module 3."]
    at = next(i for i, u in enumerate(replayed) if u.get("messageId", "").startswith("compaction-"))
    assert replayed[at]["content"]["text"].startswith("Compacted the conversation into a summary: about ")
    before = [u for u in replayed[:at] if u["sessionUpdate"] == "user_message_chunk"]
    assert len(before) == 3  # after turn 2's messages, before turn 3's prompt
    assert replayed[at - 1]["sessionUpdate"] == "agent_message_chunk"  # turn 2's answer
