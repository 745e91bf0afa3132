"""MCP servers end to end: real servers as subprocesses, driven through the real daemon.

``docs`` is written with the official ``mcp`` SDK (interoperability with the reference
implementation); ``misbehaving.py`` exits at start, crashes mid-call, never answers,
freezes, or refuses to die. Calls go through the agent's tool loop with ``mock/tools``.
"""

import json
import os
import sys
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from daemon.jsonrpc.client import RpcError
from daemon.tools.procgroup import group_alive
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).resolve().parents[1] / "support" / "mcp_servers"


def docs_server(state: Path, **extra):
    return {
        "command": sys.executable,
        "args": [str(SERVERS / "docs_server.py")],
        "env": {"MCP_TEST_DIR": str(state)},
        **extra,
    }


def misbehaving(state: Path, mode: str = "serve", *flags: str, **extra):
    return {
        "command": sys.executable,
        "args": [str(SERVERS / "misbehaving.py"), mode, *flags],
        "env": {"MCP_TEST_DIR": str(state)},
        **extra,
    }


def with_servers(servers):
    def configure(config):
        config.mcp_servers = servers

    return configure


def fast(daemon, backoff_s=0.3):
    """Shorter grace periods and backoff than a person would want, for quick tests."""
    daemon.mcp.backoff_base_s = backoff_s
    daemon.mcp.close_grace_s = 0.5
    daemon.mcp.kill_grace_s = 0.5
    daemon.mcp.ping_timeout_s = 0.3


@pytest.fixture
def state(tmp_path):
    path = tmp_path / "state"
    path.mkdir()
    return path


async def start(client, cwd, **params):
    result = await client.request(
        "session/start", {"model_id": "mock/tools", "thinking_level": "off", "cwd": str(cwd), **params}
    )
    return result["session"]["session_id"]


async def run_turn(client, session_id, *steps):
    text = "\n".join(f"tool: {name} {json.dumps(args)}" for name, args in steps)
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    with anyio.fail_after(15):
        return await client.collect_turn(turn["turn_id"])


def tool_ends(events):
    return [e for e in events if e["type"] == "tool_execution_end"]


def servers_by_name(listed):
    return {s["name"]: s for s in listed["servers"]}


def process_alive(pid: int) -> bool:
    return group_alive(pid)  # our servers lead their own group; zombies do not count


async def wait_for(predicate, timeout=5.0):
    with anyio.fail_after(timeout):
        while not await predicate():
            await anyio.sleep(0.02)


def capture_tools(daemon):
    """Record the tool names the mock provider is offered at each request."""
    provider = daemon.providers.get("mock", "mock")
    original = provider.stream
    offered: list[list[str]] = []

    def stream(request):
        offered.append([t.name for t in request.tools])
        return original(request)

    provider.stream = stream
    return offered


async def test_reference_server_listing_calls_and_approval(home, state):
    asked = []

    async def answer(method, params):
        asked.append(params)
        return {"decision": "allow_once"}

    async with in_memory_daemon(
        home,
        configure=with_servers({"docs": docs_server(state, trusted=True)}),
        permission_requests=True,
        on_request=answer,
    ) as (client, daemon):
        fast(daemon)
        listed = await client.request("mcp/list")
        [docs] = listed["servers"]
        assert docs["status"] == "ready" and docs["error"] is None
        # Four pages of tools/list, followed by cursor.
        assert [t["name"] for t in docs["tools"]] == [
            "search", "add", "write_note", "fail", "slow", "more_tools", "chart",
        ]  # fmt: skip
        assert docs["tools"][0]["description"] == "Search the documentation."

        offered = capture_tools(daemon)
        session_id = await start(client, home)  # approval_policy "ask", and this client answers
        events = await run_turn(
            client,
            session_id,
            ("mcp__docs__search", {"query": "install"}),
            ("mcp__docs__add", {"a": 2, "b": 3}),
            ("mcp__docs__fail", {"reason": "nope"}),
            ("mcp__docs__write_note", {"text": "hi"}),
        )
        assert events[-1]["stop_reason"] == "end_turn"
        search, add, fail, note = tool_ends(events)
        assert (search["is_error"], search["result"]) == (False, "3 results for 'install': intro.md, guide.md, faq.md")
        assert add["is_error"] is False and json.loads(add["result"]) == {"total": 5}  # structured content, once
        assert fail["is_error"] is True and "cannot do that: nope" in fail["result"]
        assert (note["is_error"], note["result"]) == (False, "noted: hi")
        # Only the tool without readOnlyHint asked (the server is trusted), under its namespaced name.
        assert [(a["tool"], a["title"]) for a in asked] == [
            ("mcp__docs__write_note", 'MCP docs: write_note {"text": "hi"}')
        ]
        # The model was offered the MCP tools next to the built-in ones, with the server's schema.
        assert {"read_file", "run_command", "mcp__docs__search", "mcp__docs__write_note"} <= set(offered[0])
        row = await daemon.sessions.row(session_id)
        tools = await daemon.mcp.tools_for(row)
        schema = tools["mcp__docs__search"].input_schema
        assert schema["properties"]["query"] == {"type": "string"} and schema["required"] == ["query"]
        assert (tools["mcp__docs__search"].mutating, tools["mcp__docs__write_note"].mutating) == (False, True)

        # read_only never runs the mutating one, and never asks.
        read_only = await start(client, home, approval_policy="read_only")
        events = await run_turn(
            client, read_only, ("mcp__docs__write_note", {"text": "x"}), ("mcp__docs__search", {"query": "y"})
        )
        note, search = tool_ends(events)
        assert note["is_error"] and "approval policy is 'read_only'" in note["result"]
        assert not search["is_error"] and len(asked) == 1
        pid = int((state / "docs.pid").read_text())
        assert process_alive(pid)
    assert not process_alive(pid), "the server must be gone when the daemon is"


def liar(state: Path, **extra):
    return {"command": sys.executable, "args": [str(SERVERS / "liar.py")], "env": {"MCP_TEST_DIR": str(state)}, **extra}


async def test_read_only_runs_mcp_tools_of_trusted_servers_only(home, state):
    """A tool's readOnlyHint is its server's claim: under read_only only a trusted server's tools run."""
    vouched = state / "vouched"
    vouched.mkdir()
    servers = {"liar": liar(state), "vouched": liar(vouched, trusted=True)}
    async with in_memory_daemon(home, configure=with_servers(servers)) as (client, daemon):
        fast(daemon)
        session_id = await start(client, home, approval_policy="read_only")
        events = await run_turn(client, session_id, ("mcp__liar__peek", {}), ("mcp__vouched__peek", {}))
        untrusted, trusted = tool_ends(events)
        assert untrusted["is_error"] and "approval policy is 'read_only'" in untrusted["result"]
        assert "trusted = true" in untrusted["result"]
        assert not (state / "written").exists(), "the untrusted server's tool must not have run"
        # The person vouched for this one: its claim is believed (and here it is a lie).
        assert not trusted["is_error"] and (vouched / "written").exists()

        # Under 'ask', the untrusted claim does not skip the question either (and this client cannot answer).
        asking = await start(client, home, approval_policy="ask")
        [denied] = tool_ends(await run_turn(client, asking, ("mcp__liar__peek", {})))
        assert denied["is_error"] and "cannot answer permission requests" in denied["result"]
        assert not (state / "written").exists()


async def test_reference_server_progress_cancel_and_list_changed(home, state):
    async with in_memory_daemon(home, configure=with_servers({"docs": docs_server(state)})) as (client, daemon):
        fast(daemon)
        session_id = await start(client, home, approval_policy="auto")
        args = {"seconds": 30, "label": "A"}
        turn = await client.request(
            "session/prompt", {"session_id": session_id, "text": f"tool: mcp__docs__slow {json.dumps(args)}"}
        )
        chunks = []
        with anyio.fail_after(15):
            async with aclosing(client.events(turn["turn_id"])) as events:
                async for event in events:
                    if event["type"] == "tool_execution_output":
                        chunks.append(event["chunk"])
                        if len(chunks) == 3:  # every progress notification has arrived: cancel mid-call
                            await client.request("session/cancel", {"session_id": session_id})
                    if event["type"] == "turn_end":
                        assert event["stop_reason"] == "cancelled"
                        break
        assert chunks == ["A: step 1 of 3\n", "A: step 2 of 3\n", "A: step 3 of 3\n"]

        async def cancellation_reached_server():
            return (state / "cancelled-A").exists()

        await wait_for(cancellation_reached_server)

        # The server announces a new tool; the next turn has it.
        events = await run_turn(client, session_id, ("mcp__docs__more_tools", {}))
        assert tool_ends(events)[0]["result"] == "added"
        events = await run_turn(client, session_id, ("mcp__docs__late", {}))
        assert tool_ends(events)[0] == {**tool_ends(events)[0], "is_error": False, "result": "late tool here"}
        listed = servers_by_name(await client.request("mcp/list"))
        assert "late" in [t["name"] for t in listed["docs"]["tools"]]


async def test_call_timeout_cancels_the_call_and_keeps_the_server(home, state):
    config = {"flaky": misbehaving(state, timeout_s=0.3)}
    async with in_memory_daemon(home, configure=with_servers(config)) as (client, daemon):
        fast(daemon)
        daemon.mcp.ping_timeout_s = 5  # the health check after the timeout must pass, even on a slow machine
        session_id = await start(client, home, approval_policy="auto")
        events = await run_turn(
            client,
            session_id,
            ("mcp__flaky__hang", {}),
            ("mcp__flaky__echo", {"text": "still here"}),
            ("mcp__flaky__ping_me", {}),
        )
        hang, echo, ping_me = tool_ends(events)
        assert hang["is_error"] and "did not answer within 0.3 s" in hang["result"]
        assert (echo["is_error"], echo["result"]) == (False, "echo: still here")
        # The server's own requests: ping is answered, roots/list (no such capability) refused.
        assert json.loads(ping_me["result"]) == [{}, -32601]
        assert list(state.glob("cancelled-*")), "the server is told the call was cancelled"
        await anyio.sleep(0.4)  # the health check (a ping) has had its chance
        assert servers_by_name(await client.request("mcp/list"))["flaky"]["status"] == "ready"


async def test_frozen_server_fails_after_a_timed_out_call(home, state):
    async with in_memory_daemon(home, configure=with_servers({"flaky": misbehaving(state, timeout_s=0.3)})) as (
        client,
        daemon,
    ):
        fast(daemon, backoff_s=30)
        session_id = await start(client, home, approval_policy="auto")
        events = await run_turn(client, session_id, ("mcp__flaky__freeze", {}))
        assert "did not answer within 0.3 s" in tool_ends(events)[0]["result"]

        async def failed():
            return servers_by_name(await client.request("mcp/list"))["flaky"]["status"] == "failed"

        await wait_for(failed)
        flaky = servers_by_name(await client.request("mcp/list"))["flaky"]
        assert "stopped answering" in flaky["error"] and flaky["tools"] == []
        pid = int((state / "serve.pid").read_text())

        async def gone():
            return not process_alive(pid)

        await wait_for(gone)


async def test_crash_mid_call_then_recovery_after_backoff(home, state):
    async with in_memory_daemon(home, configure=with_servers({"flaky": misbehaving(state)})) as (client, daemon):
        fast(daemon, backoff_s=1.0)
        session_id = await start(client, home, approval_policy="auto")
        events = await run_turn(client, session_id, ("mcp__flaky__crash", {}))
        [crash] = tool_ends(events)
        assert crash["is_error"]
        assert "exited with status 5" in crash["result"] and "boom: the widget exploded" in crash["result"]
        assert events[-1]["stop_reason"] == "end_turn"  # the turn goes on

        flaky = servers_by_name(await client.request("mcp/list"))["flaky"]
        assert flaky["status"] == "failed" and flaky["tools"] == []
        assert "exited with status 5" in flaky["error"] and "boom: the widget exploded" in flaky["error"]

        # Within the backoff its tools are gone from the next request.
        offered = capture_tools(daemon)
        events = await run_turn(client, session_id, ("mcp__flaky__echo", {"text": "x"}))
        [echo] = tool_ends(events)
        assert echo["is_error"] and "unknown tool 'mcp__flaky__echo'" in echo["result"]
        assert not any(name.startswith("mcp__") for name in offered[0])

        await anyio.sleep(1.0)  # past the backoff: a later turn starts it again
        events = await run_turn(client, session_id, ("mcp__flaky__echo", {"text": "back"}), ("mcp__flaky__crash", {}))
        assert [(e["is_error"], e["result"]) for e in tool_ends(events)] == [(False, "echo: back"), (False, "survived")]
        assert servers_by_name(await client.request("mcp/list"))["flaky"]["status"] == "ready"


async def test_servers_that_cannot_start_are_reported_and_the_turn_goes_on(home, state):
    config = {
        "dead": misbehaving(state, "exit-at-start"),
        "mute": misbehaving(state, "silent", startup_timeout_s=0.5),
        "missing": {"command": str(state / "no-such-program")},
        "broken": {"args": ["x"]},
        "off": misbehaving(state, enabled=False),
        "flaky": misbehaving(state),
    }
    async with in_memory_daemon(home, configure=with_servers(config)) as (client, daemon):
        fast(daemon, backoff_s=30)
        servers = servers_by_name(await client.request("mcp/list"))
        assert {name: s["status"] for name, s in servers.items()} == {
            "dead": "failed",
            "mute": "failed",
            "missing": "failed",
            "broken": "failed",
            "off": "stopped",
            "flaky": "ready",
        }
        assert (
            "exited with status 3" in servers["dead"]["error"] and "WIDGET_TOKEN is not set" in servers["dead"]["error"]
        )
        assert "did not finish starting within 0.5 s" in servers["mute"]["error"]
        assert "could not be started" in servers["missing"]["error"]
        assert "[mcp_servers.broken] needs command" in servers["broken"]["error"]
        assert "disabled" in servers["off"]["error"]
        silent_pid = int((state / "silent.pid").read_text())

        async def stopped():  # a server that timed out is stopped (just after it is reported)
            return not process_alive(silent_pid)

        await wait_for(stopped)

        session_id = await start(client, home, approval_policy="auto")
        events = await run_turn(client, session_id, ("mcp__flaky__echo", {"text": "fine"}))
        assert tool_ends(events)[0]["result"] == "echo: fine" and events[-1]["stop_reason"] == "end_turn"


async def test_shutdown_escalates_to_sigkill_for_the_whole_group(home, state):
    config = {"stubborn": misbehaving(state, "serve", "--stubborn")}
    async with in_memory_daemon(home, configure=with_servers(config)) as (client, daemon):
        fast(daemon)
        assert servers_by_name(await client.request("mcp/list"))["stubborn"]["status"] == "ready"
        pid = int((state / "serve.pid").read_text())
        child = int((state / "child.pid").read_text())
        assert os.getpgid(child) == pid and process_alive(pid)
        started = anyio.current_time()
    assert anyio.current_time() - started < 5
    assert not process_alive(pid), "stdin closed and SIGTERM ignored: SIGKILL ends the group"


async def test_a_session_started_before_any_server_sees_the_servers_added_later(home, state):
    """No server in config.toml: sessions start and run without the MCP manager (it is never
    built); a client's servers added later (ACP's) build it, and the same session's next turn
    has their tools."""
    entry = {
        "name": "acp",
        "command": sys.executable,
        "args": [str(SERVERS / "misbehaving.py"), "serve"],
        "env": [{"name": "MCP_TEST_DIR", "value": str(state)}],
    }
    async with in_memory_daemon(home) as (client, daemon):
        session = await start(client, home, approval_policy="auto")
        events = await run_turn(client, session, ("mcp__acp__echo", {"text": "before"}))
        assert "unknown tool" in tool_ends(events)[0]["result"]
        assert daemon._mcp is None, "no server anywhere: the MCP manager is not built"
        fast(daemon)  # builds it
        await daemon.mcp.add_session_servers(session, [entry], cwd=str(home))
        events = await run_turn(client, session, ("mcp__acp__echo", {"text": "after"}))
        assert tool_ends(events)[0]["result"] == "echo: after"


async def test_session_servers_from_acp(home, state):
    entry = {
        "name": "acp",
        "command": sys.executable,
        "args": [str(SERVERS / "misbehaving.py"), "serve"],
        "env": [{"name": "MCP_TEST_DIR", "value": str(state)}],
    }
    web = {"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": []}
    async with in_memory_daemon(home) as (client, daemon):
        fast(daemon)
        first = await start(client, home, approval_policy="auto")
        second = await start(client, home, approval_policy="auto")
        other = await start(client, home, approval_policy="auto")
        await daemon.mcp.add_session_servers(first, [entry, web], cwd=str(home))
        await daemon.mcp.add_session_servers(second, [entry])
        assert (await client.request("mcp/list"))["servers"] == []
        [listed] = (await client.request("mcp/list", {"session_id": first}))["servers"]
        assert listed["name"] == "acp" and listed["status"] == "ready"

        events = await run_turn(client, first, ("mcp__acp__echo", {"text": "one"}))
        assert tool_ends(events)[0]["result"] == "echo: one"
        events = await run_turn(client, other, ("mcp__acp__echo", {"text": "two"}))
        assert "unknown tool" in tool_ends(events)[0]["result"], "another session does not see them"
        # Identical entries share one process (the cwd differs, so first's is its own).
        shared = daemon.mcp.handles_for(second)[0]
        assert shared is not daemon.mcp.handles_for(first)[0]
        await daemon.mcp.add_session_servers(other, [entry])
        assert daemon.mcp.handles_for(other)[0] is shared

        with pytest.raises(RpcError) as caught:
            await client.request("mcp/list", {"session_id": "ses_nope"})
        assert caught.value.code == -32001

        # A server no session uses any more is stopped, and a call in flight fails at once.
        pid = int((state / "serve.pid").read_text())
        turn = await client.request("session/prompt", {"session_id": first, "text": "tool: mcp__acp__hang {}"})
        seen = []
        with anyio.fail_after(10):
            async with aclosing(client.events(turn["turn_id"])) as events:
                async for event in events:
                    if event["type"] == "tool_execution_start":
                        await daemon.mcp.remove_session_servers(first)
                        assert not process_alive(pid)
                    elif event["type"] == "turn_end":
                        assert event["stop_reason"] == "end_turn"
                        break
                    seen.append(event)
        [hang] = tool_ends(seen)
        assert hang["is_error"] and "stopped while running hang: ponder stopped it" in hang["result"]


async def test_structured_content_that_repeats_the_text_reaches_the_model_once(home, state, tmp_path):
    """Results shaped like server-filesystem's and server-memory's: the text once, unless
    the structured content says more."""
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text("first line\nsecond line\n")
    server = {
        "command": sys.executable,
        "args": [str(SERVERS / "reference_shapes.py")],
        "env": {"MCP_FILES_DIR": str(files)},
    }
    seen = []
    async with in_memory_daemon(home, configure=with_servers({"fs": server})) as (client, daemon):
        provider = daemon.providers.get("mock", "mock")
        original = provider.stream

        def stream(request):
            seen.append([p.text for m in request.messages if m.role == "tool" for p in m.parts])
            return original(request)

        provider.stream = stream
        session_id = await start(client, home, approval_policy="auto")
        entities = [{"name": "Dana", "entityType": "person", "observations": ["leads the team"]}]
        events = await run_turn(
            client,
            session_id,
            ("mcp__fs__read_text_file", {"path": "notes.txt"}),
            ("mcp__fs__list_directory_with_sizes", {"path": "."}),
            ("mcp__fs__create_entities", {"entities": entities}),
            ("mcp__fs__read_graph", {}),
            ("mcp__fs__delete_entities", {"entityNames": ["Dana"]}),
            ("mcp__fs__stat", {"path": "notes.txt"}),
        )
        assert events[-1]["stop_reason"] == "end_turn"
        read, listing, created, graph, deleted, stat = (e["result"] for e in tool_ends(events))
        assert not any(e["is_error"] for e in tool_ends(events))
    assert read == "first line\nsecond line\n"
    assert listing.startswith("[FILE] notes.txt") and listing.count("notes.txt") == 1
    assert json.loads(created) == entities
    assert json.loads(graph) == {"entities": entities, "relations": []}
    assert deleted == "Entities deleted successfully"
    # What adds to the text still reaches the model, as JSON after it.
    text, structured = stat.split("\n", 1)
    assert text == "notes.txt exists" and json.loads(structured) == {"path": "notes.txt", "size": 23}
    # The model saw exactly these results, each once.
    assert seen[-1] == [read, listing, created, graph, deleted, stat]


async def test_a_client_server_entry_ponder_cannot_use_is_listed_failed_under_its_name(home):
    async with in_memory_daemon(home) as (client, daemon):
        fast(daemon)
        sid = await start(client, home, approval_policy="auto")
        good = {"name": "fine", "command": "/nonexistent/fine-mcp", "args": [], "env": []}
        await daemon.mcp.add_session_servers(sid, [{"name": "broken", "args": []}, good, {"args": []}])
        listed = (await client.request("mcp/list", {"session_id": sid}))["servers"]
        by_name = {server["name"]: server for server in listed}
        assert set(by_name) == {"broken", "fine", "unnamed"}
        assert by_name["broken"]["status"] == "failed" and "has no command" in by_name["broken"]["error"]
        assert by_name["unnamed"]["status"] == "failed" and "has no name" in by_name["unnamed"]["error"]


async def test_an_image_a_tool_returns_reaches_a_vision_model_and_a_note_reaches_the_others(home, state):
    async with in_memory_daemon(home, configure=with_servers({"docs": docs_server(state, trusted=True)})) as (
        client,
        daemon,
    ):
        fast(daemon)
        result = await client.request(
            "session/start", {"model_id": "mock/tools", "cwd": str(home), "approval_policy": "auto"}
        )
        session_id = result["session"]["session_id"]
        events = await run_turn(client, session_id, ("mcp__docs__chart", {"width": 3000, "height": 1000}))
        assert events[-1]["stop_reason"] == "end_turn", events[-1]
        [end] = tool_ends(events)
        assert end["result"].startswith("[image 1: image/png, ") and not end["is_error"]
        # The image was scaled like a prompt's, stored once, and the model got its bytes.
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        [tool_message] = [m for m in messages if m["role"] == "tool"]
        image = tool_message["content"][1]
        assert image["type"] == "image" and image["call_id"] == tool_message["content"][0]["call_id"]
        assert (image["width"], image["height"]) == (2000, 667)
        answer = [e for e in events if e["type"] == "message_end"][-1]["message"]["content"][0]["text"]
        assert f"[image image/png 2000x667 {image['bytes']} bytes]" in answer
        got = await client.request(
            "attachment/get", {"session_id": session_id, "attachment_id": image["attachment_id"]}
        )
        assert got["mime_type"] == "image/png"
        # A model without vision reads a note in its place, and the turn says so.
        await client.request("model/set", {"session_id": session_id, "model_id": "mock/thinker"})
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "and?"})
        later = await client.collect_turn(turn["turn_id"])
        assert later[0]["notes"] == ["1 image sent as a one-line note: mock/thinker takes no images."]
