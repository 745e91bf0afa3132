"""Retries and stalls, through the real daemon against a real HTTP server on 127.0.0.1.

Before any output of a response was emitted, connection errors, timeouts (stalls), 429,
500-504, 529 and in-stream "overloaded" errors are retried with backoff, announced as
``retry`` events, at most ``max_attempts`` times. After output started, the turn ends with
``error``, the partial message is kept, and nothing streamed is ever sent twice.
"""

import random
import socket

import pytest

from daemon.agent import turn as agent_turn
from tests.support.faults import (
    MESSAGE_START,
    MODEL,
    PING,
    anthropic_env,
    block_stop,
    fixture_response,
    message_end,
    of_type,
    prompt,
    sse,
    start_session,
    streamed,
    streamed_text,
    text_delta,
    text_reply,
    text_start,
)
from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    """Backoff without retry-after starts at 10 ms here (1 s in production), jitter included."""
    monkeypatch.setattr(agent_turn, "BACKOFF_BASE_S", 0.01)


def silent_after(body: bytes) -> ScriptedResponse:
    """A stream that sends ``body`` and then nothing, with the connection left open."""
    return streamed(body, content_length=len(body) + 1000, hang_after_s=3.0)


def quick(config, *, attempts: int = 4, stall_s: float = 5.0) -> None:
    config.retry_max_attempts = attempts
    config.stall_timeout_s = stall_s


async def test_failures_before_output_are_retried_until_one_succeeds(home, tmp_path, replay_server):
    # 429 with retry-after-ms, 529 overloaded, then an in-stream overloaded error before any block.
    replay_server.enqueue(fixture_response("rate-limit-429", retry_after="", retry_after_ms="40"))
    replay_server.enqueue(fixture_response("overloaded-529"))
    replay_server.enqueue(
        streamed(
            sse(MESSAGE_START, PING, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        )
    )
    replay_server.enqueue_fixture("anthropic", "thinking-text", split_every=17)
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):  # default config
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "Where should I get coffee near the Louvre?")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]

    assert events[-1]["stop_reason"] == "end_turn"
    retries = of_type(events, "retry")
    assert [r["attempt"] for r in retries] == [2, 3, 4]
    assert {r["max_attempts"] for r in retries} == {4}
    assert retries[0]["delay_ms"] == 40, "retry-after-ms is honoured"
    assert retries[0]["error"]["provider_status"] == 429 and "rate limit" in retries[0]["error"]["message"]
    assert retries[1]["error"]["provider_status"] == 529
    assert "overloaded_error" in retries[2]["error"]["message"]
    # retries come before any output: exactly one assistant message, streamed once
    assert len(of_type(events, "message_start")) == 1
    assert events.index(retries[-1]) < events.index(of_type(events, "message_start")[0])
    [assistant] = [m for m in stored if m["role"] == "assistant"]
    assert assistant["status"] == "complete"
    assert streamed_text(events) == assistant["content"][-1]["text"]
    bodies = [r.body for r in replay_server.requests]
    assert len(bodies) == 4 and len(set(bodies)) == 1, "every attempt sends the same request"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_server_errors_are_retried(home, tmp_path, replay_server, status):
    replay_server.enqueue(
        ScriptedResponse(status=status, headers={"content-type": "text/html"}, body=b"<h1>bad gateway</h1>")
    )
    replay_server.enqueue(streamed(text_reply("fine ", "now")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=quick) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "hi")
    [retry] = of_type(events, "retry")
    assert retry["error"]["provider_status"] == status and "bad gateway" in retry["error"]["message"]
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "fine now"


async def test_a_connection_dropped_mid_stream_is_retried(home, tmp_path, replay_server):
    # Headers, then the connection closes before the declared body arrived. The stall watchdog is
    # far off: on a loaded machine a 0.3 s one could fire before the close is read (as it did).
    replay_server.enqueue(streamed(sse(MESSAGE_START)[:40], content_length=5000))
    replay_server.enqueue(streamed(text_reply("made it")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=lambda c: quick(c, stall_s=30)) as (
        client,
        _,
    ):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "hi")
    messages = [r["error"]["message"] for r in of_type(events, "retry")]
    assert len(messages) == 1, messages
    assert "broke mid-stream" in messages[0]
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "made it"


async def test_a_silent_server_is_retried(home, tmp_path, replay_server):
    # 1: accepts the connection and answers nothing (the stall watchdog covers the headers)
    replay_server.enqueue(ScriptedResponse(headers_delay_s=3.0))
    # 2: starts an event stream, then goes silent before any content
    replay_server.enqueue(silent_after(sse(MESSAGE_START)))
    replay_server.enqueue(streamed(text_reply("made it")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=lambda c: quick(c, stall_s=0.3)) as (
        client,
        _,
    ):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "hi")
    messages = [r["error"]["message"] for r in of_type(events, "retry")]
    assert len(messages) == 2, messages
    assert "sent nothing for 0.3 s" in messages[0] and "sent nothing for 0.3 s" in messages[1]
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "made it"


async def test_unreachable_provider_gives_up_after_max_attempts_from_config_toml(home, tmp_path):
    (home / "config.toml").write_text("[reliability]\nmax_attempts = 3\n", encoding="utf-8")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"ANTHROPIC_API_KEY": "sk-ant-x", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}"}
    async with in_memory_daemon(home, env=env) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "hi")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    retries = of_type(events, "retry")
    assert [(r["attempt"], r["max_attempts"]) for r in retries] == [(2, 3), (3, 3)]
    end = events[-1]
    assert end["stop_reason"] == "error" and end["error"]["message"] == "Could not reach anthropic: ConnectError."
    assert not of_type(events, "message_start")
    assert [m["role"] for m in stored] == ["user"], "the prompt is kept; no empty assistant message"


async def test_non_retryable_errors_are_not_retried(home, tmp_path, replay_server):
    replay_server.enqueue(
        ScriptedResponse(
            status=400,
            headers={"content-type": "application/json"},
            body=b'{"type":"error","error":{"type":"invalid_request_error","message":"messages: bad"}}',
        )
    )
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=quick) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "hi")
    assert not of_type(events, "retry") and len(replay_server.requests) == 1
    assert events[-1]["stop_reason"] == "error" and events[-1]["error"]["provider_status"] == 400


async def test_failure_after_output_ends_the_turn_and_keeps_the_partial_message(home, tmp_path, replay_server):
    replay_server.enqueue_fixture("anthropic", "overloaded-midstream", split_every=23)
    replay_server.enqueue(streamed(text_reply("next turn works")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=quick) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "Tell me about the French government")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        after = await prompt(client, session_id, "go on")
    assert not of_type(events, "retry") and len(replay_server.requests) == 2
    end = events[-1]
    assert end["stop_reason"] == "error" and "overloaded_error" in end["error"]["message"]
    partial = "Here's a quick overview of the three main branches of the French government:\n\n1. **Exec"
    assert streamed_text(events) == partial, "each piece was streamed exactly once"
    [ended] = of_type(events, "message_end")
    assert ended["message"]["status"] == "error" and ended["message"]["content"] == [{"type": "text", "text": partial}]
    assert stored[-1] == ended["message"], "the partial message is persisted as it was announced"
    assert after[-1]["stop_reason"] == "end_turn" and streamed_text(after) == "next turn works"


async def test_connection_drop_and_stall_after_output_end_the_turn(home, tmp_path, replay_server):
    started = sse(MESSAGE_START, text_start(), text_delta("half "), text_delta("an answer"))
    replay_server.enqueue(streamed(started, content_length=len(started) + 500))  # dropped mid-body
    replay_server.enqueue(silent_after(started))  # then silent
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=lambda c: quick(c, stall_s=0.4)) as (
        client,
        _,
    ):
        session_id = await start_session(client, str(tmp_path))
        dropped = await prompt(client, session_id, "one")
        stalled = await prompt(client, session_id, "two")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    for events, why in ((dropped, "broke mid-stream"), (stalled, "sent nothing for 0.4 s")):
        assert not of_type(events, "retry")
        assert events[-1]["stop_reason"] == "error" and why in events[-1]["error"]["message"]
        assert streamed_text(events) == "half an answer"
    assert [(m["role"], m["status"]) for m in stored] == [("user", "complete"), ("assistant", "error")] * 2
    assert all(m["content"] == [{"type": "text", "text": "half an answer"}] for m in stored if m["role"] == "assistant")
    assert len(replay_server.requests) == 2


async def test_keep_alive_pings_are_life_for_the_stall_watchdog(home, tmp_path, replay_server):
    # 1.2 s of pings 0.15 s apart, then the answer; the watchdog would fire after 0.5 s of silence
    pings = [PING] * 8
    body = sse(
        MESSAGE_START, *pings, text_start(), text_delta("patience "), text_delta("pays"), block_stop(), *message_end()
    )
    cuts = [len(sse(MESSAGE_START, *pings[:n])) for n in range(1, len(pings) + 1)]
    replay_server.enqueue(streamed(body, split_at=cuts, chunk_delay_s=0.15))
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=lambda c: quick(c, stall_s=0.5)) as (
        client,
        _,
    ):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "take your time")
    assert not of_type(events, "retry") and len(replay_server.requests) == 1
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "patience pays"


@pytest.mark.parametrize("provider", ["anthropic", "deepseek"])
async def test_keep_alive_comments_are_life_too(home, tmp_path, replay_server, provider):
    # SSE comment lines (": keep-alive", OpenRouter's ": OPENROUTER PROCESSING") for 1.2 s
    comments = [": OPENROUTER PROCESSING\n\n"] * 8
    if provider == "anthropic":
        env = anthropic_env(replay_server)
        head, tail, model = sse(MESSAGE_START), text_reply("patience ", "pays")[len(sse(MESSAGE_START)) :], MODEL
    else:
        env = {"DEEPSEEK_API_KEY": "sk-deepseek-test", "DEEPSEEK_BASE_URL": replay_server.url}
        chunk = 'data: {"choices": [{"index": 0, "delta": {"content": "%s"}}]}\n\n'
        done = 'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
        head, tail, model = b"", (chunk % "patience " + chunk % "pays" + done).encode(), "deepseek/deepseek-chat"
    body = head + "".join(comments).encode() + tail
    cuts = [len(head) + len("".join(comments[:n])) for n in range(1, len(comments) + 1)]
    replay_server.enqueue(streamed(body, split_at=cuts, chunk_delay_s=0.15))
    async with in_memory_daemon(home, env=env, configure=lambda c: quick(c, stall_s=0.5)) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id=model)
        events = await prompt(client, session_id, "take your time")
    assert not of_type(events, "retry") and len(replay_server.requests) == 1
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "patience pays"


async def test_retries_stop_when_the_turn_is_cancelled(home, tmp_path, replay_server):
    replay_server.enqueue(fixture_response("rate-limit-429", retry_after="30"))
    async with in_memory_daemon(home, env=anthropic_env(replay_server), configure=quick) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
        events = []
        async for event in client.events(turn["turn_id"]):
            events.append(event)
            if event["type"] == "retry":
                assert event["delay_ms"] == 30_000
                await client.request("session/cancel", {"session_id": session_id})
    assert events[-1]["stop_reason"] == "cancelled" and len(replay_server.requests) == 1


def test_every_http_client_has_explicit_timeouts():
    """No httpx client is built on library defaults: each names its timeouts, and the
    providers' streaming client has explicit connect and read timeouts."""
    import ast
    from pathlib import Path

    import httpx

    from daemon.providers.http import make_client

    root = Path(__file__).resolve().parents[2] / "daemon"
    clients = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("AsyncClient", "Client")
            ):
                clients.append(path.name)
                timeout = next((k.value for k in node.keywords if k.arg == "timeout"), None)
                assert timeout is not None and not (isinstance(timeout, ast.Constant) and timeout.value is None), (
                    f"{path}:{node.lineno} builds an httpx client without an explicit timeout"
                )
    assert "http.py" in clients
    timeout: httpx.Timeout = make_client().timeout
    assert (timeout.connect, timeout.read) == (15.0, 300.0)


def test_backoff_is_exponential_with_jitter_capped_and_honours_retry_after(monkeypatch):
    monkeypatch.setattr(agent_turn, "BACKOFF_BASE_S", 1.0)
    random.seed(7)
    for attempt in range(1, 10):
        base = min(agent_turn.BACKOFF_CAP_S, 2 ** (attempt - 1))
        delays = {agent_turn._backoff(attempt, None) for _ in range(50)}
        assert all(base / 2 <= d <= base for d in delays) and len(delays) > 1, (attempt, delays)
    assert agent_turn._backoff(1, 2.5) == 2.5
    assert agent_turn._backoff(3, 0) == 0
    assert agent_turn._backoff(1, 10_000) == agent_turn.BACKOFF_CAP_S * 4, "a huge retry-after is capped"
