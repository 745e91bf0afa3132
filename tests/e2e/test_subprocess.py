"""Real ``ponder`` processes: crash safety under SIGKILL, and ``ponder ask`` as scripts use it."""

import json
import os
import subprocess
import sys
from contextlib import aclosing

import anyio
import pytest

from tests.support.harness import process_of, subprocess_daemon, subprocess_env

pytestmark = pytest.mark.slow


@pytest.mark.anyio
async def test_kill_9_mid_stream_then_resume(home):
    streamed = []
    async with subprocess_daemon(home, env={"PONDER_MOCK_DELAY_MS": "15"}) as client:
        started = await client.request("session/start", {"model_id": "mock/thinker", "thinking_level": "max"})
        session_id = started["session"]["session_id"]
        turn = await client.request(
            "session/prompt", {"session_id": session_id, "text": "Think about café 東京 at length"}
        )
        async with aclosing(client.events(turn["turn_id"])) as events:
            async for event in events:
                if event["type"] == "thinking_delta":
                    streamed.append(event["delta"])
                    if len(streamed) == 80:  # about 1.2 s in: at least one checkpoint was written
                        process_of(client).kill()
                        break
    async with subprocess_daemon(home) as client:
        resumed = await client.request("session/resume", {"session_id": session_id})
        user, assistant = resumed["messages"]
        assert user["content"][0]["text"] == "Think about café 東京 at length"
        assert assistant["status"] == "interrupted"
        stored = assistant["thinking"]
        assert stored and "".join(streamed).startswith(stored), "the checkpoint holds a prefix of what streamed"
        assert len(stored) >= len("".join(streamed[:40]))
        # the dead daemon's lease does not block the session
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "again"})
        with anyio.fail_after(20):
            events = await client.collect_turn(turn["turn_id"])
        assert events[-1]["stop_reason"] == "end_turn"


def _ask(home, *args, extra_env=None, timeout=60):
    env = {**os.environ, **subprocess_env(home, extra_env)}
    return subprocess.run(
        [sys.executable, "-m", "daemon", "ask", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_ask_piped_prints_the_answer_and_a_notice(home, tmp_path):
    result = _ask(home, "--cwd", str(tmp_path), "Why is the sky blue?")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Here is my answer about “Why is the sky blue?”")
    assert "Let me restate" not in result.stdout  # thinking is not mixed into piped output
    assert "mock/thinker" in result.stderr and "ANTHROPIC_API_KEY" in result.stderr
    # --continue picks up the most recent session in that cwd
    again = _ask(home, "--cwd", str(tmp_path), "--continue", "--model", "mock/echo", "ping back")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "ping back"


def test_ask_json_prints_every_event(home, tmp_path):
    result = _ask(home, "--cwd", str(tmp_path), "--json", "--thinking", "low", "hello")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "result"  # PROTOCOL.md: the --json frame
    events = lines[1:-1]
    assert events[0]["type"] == "turn_start" and events[-1]["type"] == "turn_end"
    assert events[0]["thinking"]["effective"] == "low"
    assert any(e["type"] == "thinking_delta" for e in events)


def test_ask_with_tools_and_errors(home, tmp_path):
    (tmp_path / "hello.txt").write_text("hi")
    result = _ask(home, "--cwd", str(tmp_path), "--model", "mock/tools", "what is here?")
    assert result.returncode == 0, result.stderr
    assert "hello.txt" in result.stdout
    failed = _ask(home, "--model", "anthropic/claude-sonnet-4-5", "hi")
    assert failed.returncode == 2  # not configured: a usage error, nothing ran
    assert "ANTHROPIC_API_KEY" in failed.stderr and "Traceback" not in failed.stderr
    unknown = _ask(home, "--model", "mock/nope", "hi")
    assert unknown.returncode == 2 and "Unknown model" in unknown.stderr


def test_a_slow_reader_loses_and_reorders_nothing(home):
    """The client stops reading while a long turn streams: the pipe fills, the daemon waits."""
    import time

    import msgspec

    env = {**os.environ, **subprocess_env(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(obj):
        proc.stdin.write(msgspec.json.encode(obj) + b"\n")
        proc.stdin.flush()

    def read():
        return msgspec.json.decode(proc.stdout.readline())

    send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/start",
            "params": {"model_id": "mock/thinker", "thinking_level": "max"},
        }
    )
    session_id = read()["result"]["session"]["session_id"]
    for i in range(12):  # a dozen turns queue up: thousands of events, far more than a pipe holds
        send(
            {
                "jsonrpc": "2.0",
                "id": 10 + i,
                "method": "session/prompt",
                "params": {"session_id": session_id, "text": f"q{i}"},
            }
        )
    time.sleep(2)  # not reading: the daemon must block on the full pipe, not drop or reorder
    seqs, ends, answered = [], 0, set()
    while ends < 12:
        message = read()
        if message.get("method") == "agent/event":
            seqs.append(message["params"]["seq"])
            ends += message["params"]["type"] == "turn_end"
        elif "id" in message:
            answered.add(message["id"])
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    proc.stdout.close()
    assert answered == set(range(10, 22))
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 2000  # ~0.7 MB through a 64 KiB pipe


@pytest.mark.anyio
async def test_a_daemon_started_before_the_event_loop_serves_a_client(home, anyio_backend_name):
    """``ponder ask`` starts its daemon before importing anyio (``start_daemon``), then connects
    to it (``spawn_daemon(started=...)``): the same client, a turn, and a graceful exit."""
    from daemon.jsonrpc.client import spawn_daemon
    from daemon.jsonrpc.spawn import start_daemon

    env = subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend_name})
    started = start_daemon(home=home, log_level="warning", env=env, stderr=subprocess.DEVNULL)
    async with spawn_daemon(started=started) as client:
        await client.request("initialize", {"protocol_version": 1})
        session = await client.request("session/start", {"model_id": "mock/echo"})
        turn = await client.request("session/prompt", {"session_id": session["session"]["session_id"], "text": "hi"})
        with anyio.fail_after(20):
            events = await client.collect_turn(turn["turn_id"])
        assert events[-1]["stop_reason"] == "end_turn"
        assert process_of(client).pid == started.pid
    assert started.returncode == 0
