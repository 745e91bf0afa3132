"""The sandbox through a real ``ponder serve`` (PROTOCOL.md "Sandbox"): what initialize and
Session say, writes outside the roots and to ``.git``, the network, approval under ``ask``
and the escalation, the Landlock fallback, ``required`` without a sandbox (-32009), and a
``bwrap`` planted in the working directory."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from daemon.jsonrpc.client import RpcClient, RpcError, spawn_daemon
from daemon.jsonrpc.spawn import daemon_command
from tests.sandbox.support import needs_bwrap, needs_landlock
from tests.support.harness import initialize, subprocess_daemon, subprocess_env
from tests.support.wire import validate_message

pytestmark = pytest.mark.anyio

FAILING_BWRAP = "#!/bin/sh\necho 'bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted' >&2\nexit 1\n"


def script(*commands: str) -> str:
    return "\n".join(f"tool: run_command {json.dumps({'command': command})}" for command in commands)


async def start(client: RpcClient, cwd: Path, policy: str = "auto", **params: Any) -> dict[str, Any]:
    result = await client.request(
        "session/start", {"model_id": "mock/tools", "cwd": str(cwd), "approval_policy": policy, **params}
    )
    return result["session"]


async def run_commands(client: RpcClient, session_id: str, *commands: str) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": script(*commands)})
    events = await client.collect_turn(turn["turn_id"])
    return [e for e in events if e["type"] == "tool_execution_end"]


@pytest.fixture
def outside():
    """A directory outside the workspace, and not under /tmp (private inside the sandbox)."""
    path = Path(tempfile.mkdtemp(prefix="ponder-serve-outside-", dir="/var/tmp"))
    (path / "keep.txt").write_text("original")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def work(tmp_path):
    path = tmp_path / "work"
    (path / ".git").mkdir(parents=True)
    (path / ".git" / "config").write_text("[core]\n")
    return path


def failing_bwrap_path(tmp_path: Path) -> str:
    """A PATH whose first bwrap fails as it does where AppArmor blocks user namespaces."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir(parents=True)
    (fakebin / "bwrap").write_text(FAILING_BWRAP)
    (fakebin / "bwrap").chmod(0o755)
    return os.pathsep.join([str(fakebin), os.environ.get("PATH", "")])


@needs_bwrap
async def test_bubblewrap_confines_writes_git_and_the_network(home, work, outside, tmp_path):
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    connections: list[str] = []

    async def handle(stream: anyio.abc.SocketStream) -> None:
        connections.append("in")
        await stream.aclose()

    connect = f"{sys.executable} -I -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\""
    async with listener, anyio.create_task_group() as tg, subprocess_daemon(home) as client:
        tg.start_soon(listener.serve, handle)
        init = await initialize(client)
        assert init["capabilities"]["sandbox"]["available"] is True
        assert init["capabilities"]["sandbox"]["mechanism"] == "bubblewrap"
        assert init["capabilities"]["sandbox"]["network_isolation"] is True
        assert not any("sandbox" in p for p in init["problems"])
        session = await start(client, work)
        sandbox = session["sandbox"]
        assert sandbox["mode"] == "workspace_write" and sandbox["network"] is False
        assert sandbox["enforced"] is True and sandbox["mechanism"] == "bubblewrap" and sandbox["degraded"] == []
        assert sandbox["writable_roots"][0] == str(work) and len(sandbox["writable_roots"]) == 2
        assert sandbox["auto_approve"] is True

        ends = await run_commands(
            client,
            session["session_id"],
            "echo inside > made.txt",
            f"echo bad > {outside}/keep.txt",
            "echo '[evil]' >> .git/config",
            connect,
        )
        inside, outside_write, git_write, network = ends
        assert inside["sandbox"] == {"enforced": True, "mechanism": "bubblewrap", "denied": False}
        assert (work / "made.txt").read_text() == "inside\n"
        assert outside_write["is_error"] and outside_write["sandbox"]["denied"] is True
        assert (outside / "keep.txt").read_text() == "original"
        assert git_write["is_error"] and git_write["sandbox"]["denied"] is True
        assert (work / ".git" / "config").read_text() == "[core]\n"
        assert network["is_error"] and network["sandbox"]["enforced"] is True
        assert connections == []

        # network: true on session/start: the same call connects.
        opened = await start(client, work, sandbox={"network": True})
        assert opened["sandbox"]["network"] is True and opened["sandbox"]["enforced"] is True
        [end] = await run_commands(client, opened["session_id"], connect)
        assert not end["is_error"], end["result"]
        assert connections == ["in"]
        # mode off: unconfined, and said so.
        off = await start(client, work, sandbox={"mode": "off"})
        assert off["sandbox"]["enforced"] is False and off["sandbox"]["mechanism"] is None
        [end] = await run_commands(client, off["session_id"], f"echo changed > {outside}/keep.txt")
        assert end["sandbox"] == {"enforced": False, "mechanism": None, "denied": False}
        assert (outside / "keep.txt").read_text() == "changed\n"
        # The daemon goes on.
        assert await client.request("ping", {}) == {}
        tg.cancel_scope.cancel()


@needs_bwrap
async def test_under_ask_the_sandbox_approves_and_a_stopped_command_may_run_once_unconfined(home, work, outside):
    requests: list[dict[str, Any]] = []
    answers = ["allow_once", "deny"]

    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        requests.append(params)
        return {"decision": answers.pop(0)}

    async with subprocess_daemon(home, permission_requests=True, on_request=answer) as client:
        session = await start(client, work, policy="ask")
        # Confined and harmless: runs without asking; the sandbox decided (step 5 of "Permissions").
        turn = await client.request(
            "session/prompt", {"session_id": session["session_id"], "text": script("echo ok > asked-nobody.txt")}
        )
        events = await client.collect_turn(turn["turn_id"])
        [start_event] = [e for e in events if e["type"] == "tool_execution_start"]
        [end] = [e for e in events if e["type"] == "tool_execution_end"]
        assert start_event["permission"]["decision"] == "allow" and start_event["permission"]["source"] == "sandbox"
        assert not end["is_error"] and requests == []
        assert (work / "asked-nobody.txt").exists()
        # Stopped by the sandbox: the person is asked to run it once unconfined (allow_once).
        [end] = await run_commands(client, session["session_id"], f"echo escaped > {outside}/keep.txt")
        assert len(requests) == 1
        assert requests[0]["reason"] == "sandbox" and requests[0]["options"] == ["allow_once", "deny"]
        assert requests[0]["tool"] == "run_command" and requests[0]["call_id"] == end["call_id"]
        assert end["sandbox"] == {"enforced": False, "mechanism": None, "denied": False}
        assert (outside / "keep.txt").read_text() == "escaped\n"
        # deny: the sandboxed result stands.
        [end] = await run_commands(client, session["session_id"], f"echo again > {outside}/keep.txt")
        assert len(requests) == 2
        assert end["is_error"] and end["sandbox"]["denied"] is True and end["sandbox"]["enforced"] is True
        assert (outside / "keep.txt").read_text() == "escaped\n"


@needs_bwrap
async def test_under_auto_a_stopped_command_is_not_run_again(home, work, outside):
    asked: list[Any] = []

    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"decision": "allow_once"}

    async with subprocess_daemon(home, permission_requests=True, on_request=answer) as client:
        session = await start(client, work, policy="auto")
        [end] = await run_commands(client, session["session_id"], f"echo bad > {outside}/keep.txt")
        assert end["sandbox"]["denied"] is True and asked == []
        assert (outside / "keep.txt").read_text() == "original"


@needs_landlock
async def test_the_landlock_fallback_where_bwrap_fails(home, work, outside, tmp_path):
    async with subprocess_daemon(home, env={"PATH": failing_bwrap_path(tmp_path)}) as client:
        init = await initialize(client)
        capability = init["capabilities"]["sandbox"]
        assert capability["mechanism"] == "landlock" and capability["available"] is True
        assert capability["network_isolation"] is False and "RTM_NEWADDR" in capability["reason"]
        session = await start(client, work)
        assert session["sandbox"]["enforced"] is True and session["sandbox"]["mechanism"] == "landlock"
        assert session["sandbox"]["degraded"] == ["git", "home", "network"]
        ends = await run_commands(client, session["session_id"], "echo ok > in.txt", f"echo bad > {outside}/keep.txt")
        assert ends[0]["sandbox"] == {"enforced": True, "mechanism": "landlock", "denied": False}
        assert ends[1]["sandbox"]["denied"] is True and (outside / "keep.txt").read_text() == "original"
        assert (work / "in.txt").read_text() == "ok\n"
    # Under ask with degraded protection, nothing is approved by the sandbox: no client, denied.
    async with subprocess_daemon(home, env={"PATH": failing_bwrap_path(tmp_path / "again")}) as client:
        session = await start(client, work, policy="ask")
        [end] = await run_commands(client, session["session_id"], "echo no > not-run.txt")
        assert end["is_error"] and "sandbox" not in end
        assert not (work / "not-run.txt").exists()


async def test_required_without_a_sandbox_fails_closed(home, work, tmp_path):
    # A session stored while a sandbox worked ...
    async with subprocess_daemon(home) as client:
        stored = await start(client, work)
    (home / "config.toml").write_text("[sandbox]\nrequired = true\nlandlock = false\n")
    async with subprocess_daemon(home, env={"PATH": failing_bwrap_path(tmp_path)}) as client:
        init = await initialize(client)
        assert init["capabilities"]["sandbox"]["available"] is False
        assert any("required" in p and "sandbox" in p for p in init["problems"])
        listed = (await client.request("session/list", {}))["sessions"]
        assert listed[0]["sandbox"]["enforced"] is False  # Session.sandbox also before any session is loaded
        before = [s["session_id"] for s in listed]
        with pytest.raises(RpcError) as refused:
            await start(client, work)
        assert refused.value.code == -32009
        assert refused.value.data["mechanism"] is None
        assert "RTM_NEWADDR" in refused.value.data["reason"] and "bubblewrap" in refused.value.data["hint"]
        after = [s["session_id"] for s in (await client.request("session/list", {}))["sessions"]]
        assert after == before == [stored["session_id"]]  # nothing was created
        with pytest.raises(RpcError) as fork_refused:
            await client.request("session/fork", {"session_id": stored["session_id"]})
        assert fork_refused.value.code == -32009
        # ... runs no command now: a tool error that says how to install bubblewrap.
        [end] = await run_commands(client, stored["session_id"], "echo ran > ran.txt")
        assert end["is_error"] and end["result"].startswith("sandbox_unavailable:")
        assert "apt-get install bubblewrap" in end["result"]
        assert not (work / "ran.txt").exists()
        assert await client.request("ping", {}) == {}


async def test_without_a_sandbox_commands_run_unconfined_and_initialize_says_so(home, work, tmp_path):
    (home / "config.toml").write_text("[sandbox]\nlandlock = false\n")
    async with subprocess_daemon(home, env={"PATH": failing_bwrap_path(tmp_path)}) as client:
        init = await initialize(client)
        assert any("run_command runs commands unconfined" in p for p in init["problems"])
        session = await start(client, work)
        assert session["sandbox"]["enforced"] is False and session["sandbox"]["mechanism"] is None
        [end] = await run_commands(client, session["session_id"], "echo ran > ran.txt")
        assert end["sandbox"] == {"enforced": False, "mechanism": None, "denied": False}
        assert (work / "ran.txt").exists()


def _daemon_inside(repo: Path, home: Path) -> "subprocess.Popen[bytes]":
    """``ponder serve`` run from inside ``repo``, with the repository first on its PATH."""
    path = os.pathsep.join([".", str(repo), os.environ.get("PATH", "")])
    package_root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        daemon_command(home, (), "info"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, **subprocess_env(home, {"PATH": path, "PYTHONPATH": str(package_root)})},
        cwd=repo,
    )


@needs_bwrap
async def test_a_bwrap_planted_in_the_working_directory_is_never_run(home, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    marker = tmp_path / "planted-bwrap-ran"
    (repo / "bwrap").write_text(f'#!/bin/sh\ntouch {marker}\nexec "$@"\n')
    (repo / "bwrap").chmod(0o755)
    async with spawn_daemon(started=_daemon_inside(repo, home)) as client:
        client.on_message = validate_message
        init = await initialize(client)
        assert init["capabilities"]["sandbox"]["mechanism"] == "bubblewrap"
        session = await start(client, repo)
        assert session["sandbox"]["enforced"] is True
        [end] = await run_commands(client, session["session_id"], "echo confined > out.txt")
        assert end["sandbox"]["enforced"] is True and not end["is_error"]
    assert not marker.exists()
    assert (repo / "out.txt").read_text() == "confined\n"


@needs_bwrap
async def test_a_sessions_own_sandbox_settings_survive_a_restart_and_a_fork(home, work):
    async with subprocess_daemon(home) as client:
        session = await start(client, work, sandbox={"mode": "read_only"})
        assert session["sandbox"]["mode"] == "read_only" and session["sandbox"]["writable_roots"] == []
    async with subprocess_daemon(home) as client:
        loaded = (await client.request("session/get", {"session_id": session["session_id"]}))["session"]
        assert loaded["sandbox"]["mode"] == "read_only" and loaded["sandbox"]["enforced"] is True
        fork = (await client.request("session/fork", {"session_id": session["session_id"]}))["session"]
        assert fork["sandbox"]["mode"] == "read_only"
        for session_id in (session["session_id"], fork["session_id"]):
            [end] = await run_commands(client, session_id, "touch written.txt")
            assert end["is_error"] and end["sandbox"]["denied"] is True
        assert not (work / "written.txt").exists()
