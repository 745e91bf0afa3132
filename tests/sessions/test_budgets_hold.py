"""Budgets that always hold, against real ``ponder serve`` subprocesses (issue #24).

The store is the truth (a budget changed by another daemon on the same home stops the next model
call), usage a provider does not report (or reports as garbage) is counted by the estimate, a cost
budget is never silently void (no price: refused, or the turn ends ``budget`` before spending),
``max_cost: 0`` allows no call.
"""

import json
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient, RpcError
from tests.support.file_reader import FileReaderChat, big_files, reader_config
from tests.support.harness import subprocess_daemon
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PRICED = (
    '\n[[providers.local.models]]\nmodel = "priced"\ncontext_window = 100000\nprice = { input = 3.0, output = 15.0 }\n'
)


async def start(client: RpcClient, cwd: Any, model: str, **params: Any) -> str:
    started = await client.request(
        "session/start", {"model_id": f"local/{model}", "cwd": str(cwd), "approval_policy": "auto", **params}
    )
    return started["session"]["session_id"]


async def prompt(client: RpcClient, session_id: str, text: str) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    with anyio.fail_after(60):
        return await client.collect_turn(turn["turn_id"])


async def test_a_budget_lowered_by_another_daemon_stops_the_running_turn(anyio_backend, home, tmp_path):
    cwd = tmp_path / "proj"
    files = big_files(cwd, count=4, size=2_000)
    chat = FileReaderChat(files, window=200_000, reply_delay_s=1.5)
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(reader_config(server.url, windows={"big": 200_000}))
        async with subprocess_daemon(home, backend=anyio_backend) as first:
            session_id = await start(first, cwd, "big")
            # The second daemon is up before the turn starts: its start-up, seconds on a busy
            # machine, is not raced against the turn's reads.
            async with subprocess_daemon(home, backend=anyio_backend) as second:
                turn = await first.request("session/prompt", {"session_id": session_id, "text": "Read src/."})
                with anyio.fail_after(30):
                    while chat.reads_issued < 1:
                        await anyio.sleep(0.05)
                lowered = await second.request(
                    "session/budget", {"session_id": session_id, "budget": {"max_tokens": 1}}
                )
                assert lowered["session"]["budget"]["max_tokens"] == 1
            with anyio.fail_after(60):
                events = await first.collect_turn(turn["turn_id"])
    end = events[-1]
    assert end["stop_reason"] == "budget", end
    assert "token budget of 1 tokens is spent" in end["error"]["message"]
    assert chat.reads_issued < len(files)  # the turn did not read on after the budget was lowered


def garbage_usage(request: RecordedRequest) -> ScriptedResponse:
    """An answer whose usage is garbage: a string, a float, a number beyond 2^64."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "An answer."}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": "12", "completion_tokens": 2**70, "total_tokens": 1.5}},
    ]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return ScriptedResponse(headers={"content-type": "text/event-stream"}, body=body)


async def test_garbage_usage_is_counted_by_the_estimate_and_a_token_budget_holds(anyio_backend, home, tmp_path):
    with ReplayServer() as server:
        server.route("POST", "/v1/chat/completions", garbage_usage)
        (home / "config.toml").write_text(reader_config(server.url, windows={"big": 200_000}))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            session_id = await start(client, tmp_path, "big", budget={"max_tokens": 50})
            first = await prompt(client, session_id, "Hello")
            second = await prompt(client, session_id, "Again")
            session = (await client.request("session/get", {"session_id": session_id}))["session"]
    assert first[-1]["stop_reason"] == "end_turn", first[-1]
    usage = next(e for e in first if e["type"] == "usage")
    assert usage["estimated"] is True and usage["usage"]["input_tokens"] > 50 and usage["usage"]["output_tokens"] > 0
    assert second[-1]["stop_reason"] == "budget", second[-1]
    assert session["totals"]["input_tokens"] == usage["usage"]["input_tokens"]
    assert len(server.requests) == 1


async def test_max_cost_zero_allows_no_call(anyio_backend, home, tmp_path):
    with ReplayServer() as server:
        server.route("POST", "/v1/chat/completions", garbage_usage)
        (home / "config.toml").write_text(reader_config(server.url, windows={}, extra=PRICED))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            session_id = await start(client, tmp_path, "priced", budget={"max_cost": 0})
            events = await prompt(client, session_id, "Hello")
    assert events[-1]["stop_reason"] == "budget" and "$0.00" in events[-1]["error"]["message"], events[-1]
    assert server.requests == []


async def test_a_cost_budget_without_a_price_is_refused_or_ends_the_turn_before_spending(anyio_backend, home, tmp_path):
    with ReplayServer() as server:
        server.route("POST", "/v1/chat/completions", garbage_usage)
        config = reader_config(server.url, windows={"big": 200_000}) + "\n[budget]\nmax_cost = 5.0\n"
        (home / "config.toml").write_text(config)
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            with pytest.raises(RpcError) as refused:
                await start(client, tmp_path, "big", budget={"max_cost": 1.0})
            assert refused.value.code == -32602
            assert "local/big" in refused.value.message and "price" in refused.value.message
            assert "config.toml" in refused.value.message
            # config.toml's [budget] gives it one anyway: the turn ends "budget" before any request.
            session_id = await start(client, tmp_path, "big")
            # The session says so: the cost budget is kept but cannot be counted (no price).
            shown = (await client.request("session/get", {"session_id": session_id}))["session"]["budget"]
            assert shown == {"max_cost": 5.0, "max_tokens": None, "cost_enforced": False}
            events = await prompt(client, session_id, "Hello")
            assert events[-1]["stop_reason"] == "budget", events[-1]
            assert "no price for local/big" in events[-1]["error"]["message"]
            with pytest.raises(RpcError) as again:
                await client.request("session/budget", {"session_id": session_id, "budget": {"max_cost": 2.0}})
            assert again.value.code == -32602
            # A token budget instead: the session works.
            changed = await client.request(
                "session/budget", {"session_id": session_id, "budget": {"max_tokens": 100_000}}
            )
            assert changed["session"]["budget"] == {"max_cost": None, "max_tokens": 100_000, "cost_enforced": True}
            events = await prompt(client, session_id, "Hello")
            assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert len(server.requests) == 1


DECLARED_ANTHROPIC = """
[providers.tiny]
api = "anthropic"
base_url = "{url}"
api_key = "sk-ant-fake-tiny"

[[providers.tiny.models]]
model = "tiny-1"
context_window = 32000
max_output_tokens = 1500
thinking_levels = ["off", "low", "high"]
"""


async def test_a_declared_model_never_gets_more_output_or_less_thinking_than_it_takes(anyio_backend, home, tmp_path):
    """max_tokens within the model's max_output_tokens, and a thinking budget the provider would refuse
    (below Anthropic's 1,024) turned off with a reason."""
    with ReplayServer() as server:
        server.enqueue_fixture("anthropic", "thinking-text")
        (home / "config.toml").write_text(DECLARED_ANTHROPIC.format(url=server.url))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            started = await client.request(
                "session/start", {"model_id": "tiny/tiny-1", "cwd": str(tmp_path), "thinking_level": "high"}
            )
            thinking = started["thinking"]
            assert thinking["effective"] == "off", thinking
            assert "1,024" in thinking["reason"] and "1,500" in thinking["reason"]
            events = await prompt(client, started["session"]["session_id"], "Hello")
    assert events[-1]["type"] == "turn_end"
    body = server.requests[0].json()
    assert body["max_tokens"] <= 1500
    assert body.get("thinking", {"type": "disabled"}).get("type") == "disabled"
