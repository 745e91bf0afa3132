"""Secrets: a planted API key never appears in anything a run leaves behind.

A real ``ponder serve --log-level debug`` (umask 0, so only explicit modes protect files)
runs: a provider that answers 401 and echoes the key back, a provider that cannot be
reached, a successful streamed turn, and tools that try to print the key (``env``, a
``.env`` file). Then the home (database, WAL, logs), stdout and stderr are searched for
the key and for a fragment of it. ``sessions.db``, the log file and the credential file
are mode 0600.
"""

import json
import os
import socket
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from daemon.jsonrpc.client import spawn_daemon
from daemon.util.secret import Secret
from tests.support.faults import fixture_response, of_type, start_session, streamed, text_reply
from tests.support.harness import initialize, subprocess_env
from tests.support.replay import ScriptedResponse
from tests.support.wire import validate_message

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = f"sk-ant-api03-PLANTED{uuid.uuid4().hex}{uuid.uuid4().hex}-Zz9AA"
DEEPSEEK_KEY = f"sk-PLANTED{uuid.uuid4().hex}"
FRAGMENTS = [KEY, KEY[20:44], DEEPSEEK_KEY, DEEPSEEK_KEY[10:30]]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def leaks(data: bytes) -> list[str]:
    return [f for f in FRAGMENTS if f.encode() in data]


@pytest.fixture
def permissive_umask():
    old = os.umask(0)
    yield
    os.umask(old)


async def run_daemon(home: Path, stdout: list[bytes], stderr_path: Path, env: dict[str, str], body) -> None:
    with open(stderr_path, "ab") as stderr:  # noqa: ASYNC230 (a local file, opened once for the child's stderr)
        async with spawn_daemon(
            home=home, log_level="debug", env=subprocess_env(home, env), stderr=stderr.fileno()
        ) as client:
            dispatch = client.dispatch

            async def recording(line: bytes) -> None:
                stdout.append(line)
                await dispatch(line)

            client.dispatch = recording  # type: ignore[method-assign]
            client.on_message = validate_message
            await initialize(client)
            with anyio.fail_after(30):
                await body(client)


async def test_a_planted_key_never_leaks(home, tmp_path, replay_server, anyio_backend, permissive_umask):
    stdout: list[bytes] = []
    stderr_path = tmp_path / "stderr.log"
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / ".env").write_text(f"ANTHROPIC_API_KEY={KEY}\nOTHER=1\n")
    env = {
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": replay_server.url,
        "DEEPSEEK_API_KEY": DEEPSEEK_KEY,
        "DEEPSEEK_BASE_URL": replay_server.url,
        "PONDER_ASYNC_BACKEND": anyio_backend,
    }
    echoed = (
        f'{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}'.encode()
    )
    echoed_ds = json.dumps(
        {"error": {"message": f"Incorrect API key provided: {DEEPSEEK_KEY}", "type": "invalid_request_error"}},
        separators=(",", ":"),
    ).encode()
    ends = {}

    async def session_runs(client) -> None:
        anthropic = await start_session(client, str(cwd))
        deepseek = await start_session(client, str(cwd), model_id="deepseek/deepseek-chat")
        tools = await start_session(client, str(cwd), model_id="mock/tools")
        replay_server.enqueue(fixture_response("overloaded-529", retry_after_ms="10"))  # a retry first
        replay_server.enqueue(ScriptedResponse(status=401, headers={"content-type": "application/json"}, body=echoed))
        replay_server.enqueue(
            ScriptedResponse(status=401, headers={"content-type": "application/json"}, body=echoed_ds)
        )
        # an unknown event: logged at debug level by the adapter
        replay_server.enqueue(
            streamed(
                text_reply("all ", "good").replace(
                    b"event: message_stop", b'event: x_new\ndata: {"type": "x_new"}\n\nevent: message_stop'
                )
            )
        )
        await client.send_raw(b'{"jsonrpc": "2.0", "id": "never-asked", "result": {}}')  # a debug line too
        for name, sid, text in (
            ("401", anthropic, "hello"),
            ("401-deepseek", deepseek, "hello"),
            ("ok", anthropic, "again"),
            (
                "tools",
                tools,
                'tool: run_command {"command": "env; echo key=$ANTHROPIC_API_KEY"}\ntool: read_file {"path": ".env"}',
            ),
        ):
            turn = await client.request("session/prompt", {"session_id": sid, "text": text})
            ends[name] = await client.collect_turn(turn["turn_id"])
        for sid in (anthropic, deepseek, tools):
            await client.request("session/resume", {"session_id": sid})
        await client.request("auth/status")

    await run_daemon(home, stdout, stderr_path, env, session_runs)

    unreachable = {**env, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{closed_port()}"}

    async def connection_fails(client) -> None:
        sid = await start_session(client, str(cwd))
        turn = await client.request("session/prompt", {"session_id": sid, "text": "anyone there?"})
        ends["unreachable"] = await client.collect_turn(turn["turn_id"])

    (home / "config.toml").write_text("[reliability]\nmax_attempts = 2\n")
    await run_daemon(home, stdout, stderr_path, unreachable, connection_fails)

    # the runs did what they were meant to
    assert len(of_type(ends["401"], "retry")) == 1
    error_401 = ends["401"][-1]["error"]
    assert error_401["provider_status"] == 401 and "invalid x-api-key ***" in error_401["message"]
    assert ends["401-deepseek"][-1]["error"]["provider_status"] == 401
    assert ends["ok"][-1]["stop_reason"] == "end_turn"
    outputs = [e["result"] for e in of_type(ends["tools"], "tool_execution_end")]
    # The command never got the key (it is kept from children); the file's copy is masked.
    assert "key=\n" in outputs[0] and "ANTHROPIC_API_KEY=***" in outputs[1], outputs
    assert ends["unreachable"][-1]["error"]["message"] == "Could not reach anthropic: ConnectError."
    # the key did go where it belongs: to the provider, in its header
    assert replay_server.requests[1].headers["x-api-key"] == KEY

    found = {"stdout": leaks(b"\n".join(stdout)), "stderr": leaks(stderr_path.read_bytes())}
    for path in home.rglob("*"):
        if path.is_file() and path.name != "config.toml":
            found[str(path.relative_to(home))] = leaks(path.read_bytes())
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    assert "DEBUG" in stderr_path.read_text(), "the daemon really logged at debug level"
    assert (home / "logs" / "ponder.log").stat().st_size > 0

    for name in ("sessions.db", "sessions.db-wal", "sessions.db-shm", "logs/ponder.log"):
        path = home / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, (name, oct(path.stat().st_mode))


def test_the_credential_file_is_private_and_its_token_never_logged(home, tmp_path, permissive_umask):
    auth = pytest.importorskip("daemon.config.stored_login")
    token = f"gho_PLANTED{uuid.uuid4().hex}"
    auth.save_github_token(home, Secret(token))
    path = auth.token_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in home.iterdir()] == [path.name], "no temporary file is left behind"
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "--log-level", "debug", "serve"],
        input=b'{"jsonrpc": "2.0", "id": 1, "method": "auth/status"}\n',
        capture_output=True,
        env={**os.environ, **subprocess_env(home)},
        timeout=30,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert b'"provider":"copilot","configured":true,"source":"login"' in result.stdout
    leftovers = (
        result.stdout + result.stderr + b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file() and p != path)
    )
    assert token.encode() not in leftovers and token[8:28].encode() not in leftovers


# Every variable ponder reads a credential from, aliases included, and the GitHub tokens
# it keeps from commands; listed here rather than taken from daemon.config.settings, so a variable
# dropped there is caught.
PLANTED_ENV = {
    var: f"PLANTED-{var.lower()}-{uuid.uuid4().hex}"
    for var in (
        "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "DEEPSEEK_API_KEY",
        "DASHSCOPE_API_KEY", "OPENROUTER_API_KEY", "GITHUB_TOKEN", "GH_TOKEN", "MYCO_KEY",
    )
}  # fmt: skip
CONFIG_KEY = f"PLANTED-config-{uuid.uuid4().hex}"  # in config.toml, overridden by the environment's
MCP_TOKEN = f"PLANTED-mcp-{uuid.uuid4().hex}"
COPILOT_TOKEN = f"gho_PLANTED{uuid.uuid4().hex}"
EVERY_SECRET = [*PLANTED_ENV.values(), CONFIG_KEY, MCP_TOKEN, COPILOT_TOKEN]
# A secret cut at the end of what run_command keeps of a long output (16 KiB): before the
# fix, everything but its last character was kept, and no longer matched the mask.
CUT = PLANTED_ENV["GOOGLE_API_KEY"]


def every_leak(data: bytes) -> list[str]:
    return [s for s in EVERY_SECRET for fragment in (s, s[8:-1], s[-20:]) if fragment.encode() in data]


async def test_every_known_credential_is_masked_and_kept_from_commands(home, tmp_path, anyio_backend, permissive_umask):
    """Provider keys and aliases, a config key, an MCP server's env token and the Copilot sign-in."""
    stdout: list[bytes] = []
    stderr_path = tmp_path / "stderr.log"
    cwd = tmp_path / "project"
    cwd.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (cwd / ".env").write_text("".join(f"{k}={v}\n" for k, v in PLANTED_ENV.items()) + f"CONFIG={CONFIG_KEY}\n")
    head = 16 * 1024
    (cwd / "big.txt").write_text("x" * (head - len(CUT) + 1) + CUT + "\n" + "y" * 100_000 + "\n")
    liar = [str(Path(__file__).parent.parent / "support" / "mcp_servers" / "liar.py")]
    (home / "config.toml").write_text(
        f'[providers.myco]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9"\napi_key_env = "MYCO_KEY"\n'
        f'[providers.openrouter]\napi_key = "{CONFIG_KEY}"\n'
        f"[mcp_servers.widgets]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps(liar)}\n"
        f"env = {{ WIDGET_TOKEN = {json.dumps(MCP_TOKEN)}, MCP_TEST_DIR = {json.dumps(str(state))} }}\n"
    )
    auth = pytest.importorskip("daemon.config.stored_login")
    auth.save_github_token(home, Secret(COPILOT_TOKEN))
    env = {**PLANTED_ENV, "PONDER_ASYNC_BACKEND": anyio_backend}
    commands = [
        "env; echo gh=${GITHUB_TOKEN:-absent} google=${GOOGLE_API_KEY:-absent} myco=${MYCO_KEY:-absent}",
        f"cat .env {home}/copilot.json {home}/config.toml",
        "cat big.txt",
    ]
    script = "\n".join(
        [f"tool: run_command {json.dumps({'command': c})}" for c in commands]
        + ['tool: read_file {"path": ".env"}', "tool: mcp__widgets__peek {}"]
    )
    ends: list[dict] = []

    async def tools_run(client) -> None:
        # Unconfined: the command reads files in the ponder home, which a sandbox would hide.
        sid = await start_session(client, str(cwd), model_id="mock/tools", sandbox={"mode": "off"})
        turn = await client.request("session/prompt", {"session_id": sid, "text": script})
        ends.extend(await client.collect_turn(turn["turn_id"]))
        await client.request("session/resume", {"session_id": sid})
        await client.request("mcp/list")
        await client.request("auth/status")

    await run_daemon(home, stdout, stderr_path, env, tools_run)

    results = [e["result"] for e in of_type(ends, "tool_execution_end")]
    outputs = "".join(e["chunk"] for e in of_type(ends, "tool_execution_output"))
    assert len(results) == 5 and ends[-1]["stop_reason"] == "end_turn", ends[-1]
    assert "gh=absent google=absent myco=absent" in results[0], "credentials must not reach a command"
    assert "OPENAI_API_KEY=***" in results[1] and '"github_token": "***"' in results[1]
    assert 'WIDGET_TOKEN = "***"' in results[1]
    assert "x***\nyyy" in results[2] and "bytes of output omitted" in results[2], results[2][head - 60 : head + 60]
    assert "GEMINI_API_KEY=***" in results[3] and "GOOGLE_API_KEY=***" in results[3]
    assert results[4] == "peeked with token ***"
    assert "x***\n" in outputs and "peeked" not in outputs

    found = {"stdout": every_leak(b"\n".join(stdout)), "stderr": every_leak(stderr_path.read_bytes())}
    for path in home.rglob("*"):
        if path.is_file() and path.name not in ("config.toml", "copilot.json"):
            found[str(path.relative_to(home))] = every_leak(path.read_bytes())
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    assert "using token ***" in stderr_path.read_text(), "the MCP server's stderr was logged, masked"
