"""Budgets on every face, against real ``ponder serve`` subprocesses (issue #24).

``config.toml`` ``[budget]`` is the budget of every session that never set its own, as the daemon
reads the file: raised or lowered there (and the daemon restarted), it reaches those sessions,
and never one with its own budget; a budget another daemon sets while a prompt waits in this
daemon's queue holds from that prompt's first model call.
"""

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient
from tests.support.harness import subprocess_daemon
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse
from tests.support.small_window import chat_chunk, sse_body

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BIG = 10**9


async def start(client: RpcClient, cwd: Path, **params: Any) -> dict[str, Any]:
    started = await client.request("session/start", {"model_id": "mock/thinker", "cwd": str(cwd), **params})
    return started["session"]


async def ask(client: RpcClient, session_id: str, text: str = "hello") -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    with anyio.fail_after(60):
        return await client.collect_turn(turn["turn_id"])


async def budget_of(client: RpcClient, session_id: str) -> Any:
    return (await client.request("session/get", {"session_id": session_id}))["session"]["budget"]


async def test_config_budget_changes_reach_the_sessions_that_never_set_their_own(anyio_backend, home, tmp_path):
    (home / "config.toml").write_text("[budget]\nmax_tokens = 1\n")
    async with subprocess_daemon(home, backend=anyio_backend) as client:
        follows = (await start(client, tmp_path))["session_id"]
        own = await start(client, tmp_path, budget={"max_tokens": BIG})
        assert await budget_of(client, follows) == {"max_cost": None, "max_tokens": 1, "cost_enforced": True}
        assert own["budget"] == {"max_cost": None, "max_tokens": BIG, "cost_enforced": True}
        assert (await ask(client, follows))[-1]["stop_reason"] == "end_turn"  # within it before the call
        spent = (await ask(client, follows))[-1]
        assert spent["stop_reason"] == "budget" and spent["error"]["code"] == -32011, spent
        assert (await ask(client, own["session_id"]))[-1]["stop_reason"] == "end_turn"

    (home / "config.toml").write_text(f"[budget]\nmax_tokens = {BIG}\n")  # the person raises it in the file
    async with subprocess_daemon(home, backend=anyio_backend) as client:
        assert await budget_of(client, follows) == {"max_cost": None, "max_tokens": BIG, "cost_enforced": True}
        assert (await ask(client, follows))[-1]["stop_reason"] == "end_turn"

    (home / "config.toml").write_text("[budget]\nmax_tokens = 1\n")  # and lowers it again
    async with subprocess_daemon(home, backend=anyio_backend) as client:
        assert (await ask(client, follows))[-1]["stop_reason"] == "budget"
        assert (await ask(client, own["session_id"]))[-1]["stop_reason"] == "end_turn"  # its own budget holds
        assert await budget_of(client, own["session_id"]) == {
            "max_cost": None,
            "max_tokens": BIG,
            "cost_enforced": True,
        }
        forked = await client.request("session/fork", {"session_id": follows})  # a fork follows the file too
        assert forked["session"]["budget"] == {"max_cost": None, "max_tokens": 1, "cost_enforced": True}

    (home / "config.toml").write_text("")  # no [budget]: no budget for the sessions that follow it
    async with subprocess_daemon(home, backend=anyio_backend) as client:
        assert await budget_of(client, follows) is None
        assert (await ask(client, follows))[-1]["stop_reason"] == "end_turn"
        # session/budget makes a budget the session's own: the file no longer reaches it.
        await client.request("session/budget", {"session_id": follows, "budget": None})
    (home / "config.toml").write_text("[budget]\nmax_tokens = 1\n")
    async with subprocess_daemon(home, backend=anyio_backend) as client:
        assert await budget_of(client, follows) is None
        assert (await ask(client, follows))[-1]["stop_reason"] == "end_turn"


def text_reply(text: str) -> ScriptedResponse:
    chunks = [
        chat_chunk({"role": "assistant", "content": text}, model="m"),
        chat_chunk(finish="stop", model="m"),
        chat_chunk(usage={"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}, model="m"),
    ]
    return ScriptedResponse(headers={"content-type": "text/event-stream"}, body=sse_body(chunks))


async def test_a_budget_set_while_a_prompt_waits_in_the_queue_holds_from_its_first_call(anyio_backend, home, tmp_path):
    release = threading.Event()
    calls: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> ScriptedResponse:
        calls.append(request)
        if len(calls) == 1:
            release.wait(30)  # the first prompt's reply waits until the budget was lowered elsewhere
        return text_reply(f"Answer {len(calls)}.")

    with ReplayServer() as server:
        server.route("POST", "/v1/chat/completions", answer)
        (home / "config.toml").write_text(
            f'[providers.local]\napi = "openai-chat"\nbase_url = "{server.url}/v1"\n'
            '[[providers.local.models]]\nmodel = "m"\ncontext_window = 100000\n'
        )
        async with subprocess_daemon(home, backend=anyio_backend) as first:
            session_id = (await start(first, tmp_path, model_id="local/m"))["session_id"]
            running = await first.request("session/prompt", {"session_id": session_id, "text": "one"})
            queued = await first.request("session/prompt", {"session_id": session_id, "text": "two"})
            with anyio.fail_after(30):
                while not calls:
                    await anyio.sleep(0.05)
            async with subprocess_daemon(home, backend=anyio_backend) as second:
                lowered = await second.request(
                    "session/budget", {"session_id": session_id, "budget": {"max_tokens": 1}}
                )
                assert lowered["session"]["budget"]["max_tokens"] == 1
            release.set()
            with anyio.fail_after(60):
                ran = await first.collect_turn(running["turn_id"])
                waited = await first.collect_turn(queued["turn_id"])
    assert ran[-1]["stop_reason"] == "end_turn"  # its one call was under way: it finishes
    assert waited[-1]["stop_reason"] == "budget", waited[-1]
    assert "token budget of 1 tokens is spent" in waited[-1]["error"]["message"]
    assert not [e for e in waited if e["type"] == "usage"]  # no model call in the queued turn
    assert len(calls) == 1, [json.loads(c.body)["messages"][-1] for c in calls]
