"""``ponder acp --attach``: editors that only spawn a process share one listening daemon. Two real
ACP clients (the ``agent-client-protocol`` package), each spawning ``ponder acp --attach``, work on
one session of a real ``ponder serve --listen`` subprocess (over its Unix socket, and over its
WebSocket), next to a ponder-dialect observer: the other client's turn streams to both, a
permission request goes to both and the first answer wins, and a client that goes away mid-turn
cancels nothing.

The client library is asyncio-only (as in ``test_acp_client``); the daemon runs on asyncio and trio.
"""

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import acp
import anyio
import pytest
from acp.connection import StreamDirection, StreamEvent
from acp.schema import ClientCapabilities, Implementation

from tests.acp.test_acp_client import REPO, Recorder, SchemaObserver, joined
from tests.support.harness import subprocess_env
from tests.support.listening import listening_daemon, read_token, short_socket_dir, unix_client, ws_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ACP client library; the daemon's backend is daemon_backend


class Silent(Recorder):
    """A client that never answers a permission request (its question is withdrawn when another answers)."""

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        self.permissions.append((tool_call, options))
        await asyncio.Event().wait()


class Withdrawals(SchemaObserver):
    """Also notes which of the daemon's requests it withdrew (``$/cancel_request``; the client
    library has no handler for it, so the test reads it off the wire)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Any] = []
        self.withdrawn: list[Any] = []

    def __call__(self, event: StreamEvent) -> None:
        super().__call__(event)
        message = event.message
        if event.direction is StreamDirection.INCOMING:
            if message.get("method") == "session/request_permission":
                self.asked.append(message["id"])
            elif message.get("method") == "$/cancel_request":
                self.withdrawn.append(message["params"]["requestId"])


@asynccontextmanager
async def attached_acp(
    client: Recorder, home: Path, where: list[str], name: str, observer: SchemaObserver
) -> AsyncIterator[tuple[Any, Any]]:
    """``ponder acp --attach WHERE`` spawned by the ACP client library, initialized."""
    async with acp.spawn_agent_process(
        client,
        sys.executable,
        "-m",
        "daemon",
        "--home",
        str(home),
        "acp",
        "--attach",
        *where,
        env=subprocess_env(home),
        cwd=REPO,
        transport_kwargs={"stderr": None},
        observers=[observer],
    ) as (conn, process):
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name=name, version="0"),
        )
        assert init.protocol_version == 1 and init.agent_capabilities.load_session is True
        yield conn, process


@pytest.mark.parametrize("transport", ["unix", "ws"])
async def test_two_acp_clients_share_a_session_through_one_listening_daemon(
    home: Path, work: Path, daemon_backend: str, transport: str
) -> None:
    listen = f"unix:{short_socket_dir() / 's.sock'}" if transport == "unix" else "ws://127.0.0.1:0"
    env = {"PONDER_MOCK_DELAY_MS": "20"}  # the last turn outlasts the 2 s a leaving connection gets
    with listening_daemon(home, listen, backend=daemon_backend, env=env) as daemon:
        where = ["--socket", str(daemon.socket)] if transport == "unix" else ["--url", daemon.endpoint]

        def ponder_client(**kwargs: Any) -> Any:
            if transport == "unix":
                return unix_client(daemon.socket, **kwargs)
            return ws_client(daemon.endpoint, read_token(home), **kwargs)

        editor, other = Silent(), Recorder("allow_once")
        observed = [Withdrawals(), Withdrawals()]
        async with AsyncExitStack() as stack:
            conn_a, process_a = await stack.enter_async_context(attached_acp(editor, home, where, "zed", observed[0]))
            conn_b, _ = await stack.enter_async_context(attached_acp(other, home, where, "vim", observed[1]))
            session_id = (await conn_a.new_session(cwd=str(work), mcp_servers=[])).session_id
            await conn_b.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            watcher = await stack.enter_async_context(ponder_client(role="observer", name="watcher"))
            await watcher.request("session/subscribe", {"session_id": session_id})

            # A's turn streams to B too.
            result = await asyncio.wait_for(
                conn_a.prompt(session_id=session_id, prompt=[acp.text_block("Why is the sky blue?")]), 60
            )
            assert result.stop_reason == "end_turn"
            answer_a = joined(editor.of("agent_message_chunk"))
            # B's updates come over its own connection: A's answer can arrive before B's last chunk.
            with anyio.move_on_after(10):  # (then the assert below shows what B is missing)
                while joined(other.of("agent_message_chunk")) != answer_a:
                    await anyio.sleep(0.02)
            answer_b = joined(other.of("agent_message_chunk"))
            assert answer_a and answer_b == answer_a
            assert "Why is the sky blue?" in next(iter(answer_b.values()))

            # A's tool call asks both editors; B answers first (A never does), A's question is withdrawn.
            await conn_a.set_config_option(config_id="model", session_id=session_id, value="mock/tools")
            script = 'tool: write_file {"path": "shared.txt", "content": "written after vim said yes\\n"}'
            result = await asyncio.wait_for(conn_a.prompt(session_id=session_id, prompt=[acp.text_block(script)]), 60)
            assert result.stop_reason == "end_turn"
            assert (work / "shared.txt").read_text() == "written after vim said yes\n"
            assert len(editor.permissions) == 1 and len(other.permissions) == 1
            assert [u.status for u in other.of("tool_call_update")] == ["in_progress", "completed"]
            events = []  # the watcher's events of both turns so far: up to the second turn's end
            async with asyncio.timeout(30), aclosing(watcher.events()) as stream:
                async for event in stream:
                    events.append(event)
                    if [e["type"] for e in events].count("turn_end") == 2:
                        break
            resolved = [e for e in events if e["type"] == "permission_resolved"]
            assert [(r["decision"], r["resolved_by"]["client_name"]) for r in resolved] == [("allow_once", "vim")]
            assert observed[0].withdrawn == observed[0].asked and len(observed[0].asked) == 1
            assert observed[1].withdrawn == []

            # A goes away in the middle of a long turn: the turn goes on, B sees it to its end.
            await conn_a.set_config_option(config_id="model", session_id=session_id, value="mock/thinker")
            await conn_a.set_config_option(config_id="thought_level", session_id=session_id, value="max")
            before = len(other.of("agent_thought_chunk"))
            prompt = asyncio.ensure_future(
                conn_a.prompt(session_id=session_id, prompt=[acp.text_block("Think at length")])
            )
            while len(other.of("agent_thought_chunk")) < before + 5:
                await asyncio.sleep(0.02)
            process_a.kill()
            ended = None
            async with asyncio.timeout(60), aclosing(watcher.events()) as stream:
                async for event in stream:
                    if event["type"] == "turn_end":
                        ended = event
                        break
            assert ended is not None and ended["stop_reason"] == "end_turn"
            prompt.cancel()
        assert daemon.process.poll() is None
        assert "Traceback" not in (home / "logs" / "ponder.log").read_text()
    assert observed[0].failures == [] and observed[1].failures == []


async def test_an_acp_client_that_opens_a_session_while_a_request_waits_is_asked_and_answers(
    home: Path, work: Path, daemon_backend: str
) -> None:
    """``RpcBridge.follow_in_dialect``: the request is waiting (the only client cannot answer)
    when an editor loads the session; the editor is asked it, and its answer decides the call."""
    with listening_daemon(home, f"unix:{short_socket_dir() / 's.sock'}", backend=daemon_backend) as daemon:
        async with unix_client(daemon.socket, name="no-asks") as driver:
            started = await driver.request(
                "session/start", {"model_id": "mock/tools", "cwd": str(work), "approval_policy": "ask"}
            )
            session_id = started["session"]["session_id"]
            script = 'tool: write_file {"path": "late.txt", "content": "the editor said yes\\n"}'
            turn = await driver.request("session/prompt", {"session_id": session_id, "text": script})
            events = []
            async with asyncio.timeout(30), aclosing(driver.events(turn["turn_id"])) as stream:
                async for event in stream:
                    events.append(event)
                    if event["type"] == "tool_call_end":
                        break
            await asyncio.sleep(0.3)  # the request waits now (for a controller, up to 300 s)
            assert not (work / "late.txt").exists()

            editor, observed = Recorder("allow_once"), SchemaObserver()
            async with attached_acp(editor, home, ["--socket", str(daemon.socket)], "helix", observed) as (conn, _):
                await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
                async with asyncio.timeout(30):
                    events += await driver.collect_turn(turn["turn_id"])
                assert len(editor.permissions) == 1, "asked once, on opening the session"
                _tool_call, options = editor.permissions[0]
                assert "allow_once" in [option.option_id for option in options]
        assert events[-1]["type"] == "turn_end" and events[-1]["stop_reason"] == "end_turn"
        resolved = [e for e in events if e["type"] == "permission_resolved"]
        assert [(r["decision"], r["resolved_by"]["client_name"]) for r in resolved] == [("allow_once", "helix")]
        assert (work / "late.txt").read_text() == "the editor said yes\n"
        assert daemon.process.poll() is None
    assert observed.failures == []
