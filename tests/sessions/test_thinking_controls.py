"""Thinking controls on the session side (PROTOCOL.md "Thinking controls"), through the daemon:
``thinking/set`` and its persistence across a restart (a real SQLite file), defaults that
follow across model switches, per-turn levels (queued prompts keep what they were sent with),
the ``error`` fallback refusing before anything changes, ``MODEL/LEVEL`` ids, budgets on
budget and effort models, and the display reaching the request a provider receives."""

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient, RpcError
from daemon.store.migrations import MIGRATIONS, migrate
from tests.support.harness import in_memory_daemon, subprocess_daemon, subprocess_env

pytestmark = pytest.mark.anyio

MOCK_LEVELS = ["low", "medium", "high", "max"]  # mock/thinker's


async def start(client: RpcClient, cwd: Path, **params: Any) -> dict[str, Any]:
    return await client.request("session/start", {"cwd": str(cwd), "approval_policy": "auto", **params})


async def thinking_set(client: RpcClient, session_id: str, **params: Any) -> dict[str, Any]:
    result = await client.request("thinking/set", {"session_id": session_id, **params})
    return result["thinking"]


async def refused(client: RpcClient, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as raised:
        await client.request(method, params)
    assert raised.value.code == -32602, raised.value
    return raised.value


def write_config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(text, encoding="utf-8")


# --- thinking/set ------------------------------------------------------------------------


async def test_thinking_set_each_field_is_reported_and_survives_a_restart(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        started = await start(client, tmp_path, model_id="anthropic/claude-sonnet-4-5")
        session_id = started["session"]["session_id"]
        assert (started["thinking"]["display"], started["thinking"]["fallback"]) == ("summarized", "nearest")

        level = await thinking_set(client, session_id, level="high")
        assert (level["requested"], level["effective"], level["source"]) == ("high", "high", "session")
        display = await thinking_set(client, session_id, display="Omitted")
        assert display["display"] == "omitted" and display["request_params"]["thinking"]["display"] == "omitted"
        assert display["effective"] == "high"  # the other settings stay as they were
        budget = await thinking_set(client, session_id, budget_tokens=5000)
        assert budget["budget_tokens"] == 5000 and budget["request_params"]["thinking"]["budget_tokens"] == 5000
        assert budget["reason"] is None  # within the model's range: nothing to explain
        fallback = await thinking_set(client, session_id, fallback="error")
        assert (fallback["fallback"], fallback["display"], fallback["budget_tokens"]) == ("error", "omitted", 5000)

    async with in_memory_daemon(home) as (client, _):  # a new daemon: everything from sessions.db
        got = await client.request("session/get", {"session_id": session_id})
        thinking = got["thinking"]
        assert (thinking["requested"], thinking["display"], thinking["fallback"], thinking["budget_tokens"]) == (
            "high",
            "omitted",
            "error",
            5000,
        )
        assert got["session"]["thinking_level"] == "high"
        resumed = await client.request("session/resume", {"session_id": session_id})
        assert resumed["thinking"] == thinking

        cleared = await thinking_set(client, session_id, budget_tokens=None)  # null clears: the level's budget again
        assert cleared["budget_tokens"] not in (None, 5000)
        assert (cleared["display"], cleared["fallback"]) == ("omitted", "error")  # omitted fields untouched

        await refused(client, "thinking/set", {"session_id": session_id})  # nothing to set
        for field, value in (("display", "loud"), ("fallback", "closest"), ("level", "huge")):
            error = await refused(client, "thinking/set", {"session_id": session_id, field: value})
            assert error.data["errors"][0]["path"] == f"$.params.{field}" and error.data["allowed"], error.data
        await refused(client, "thinking/set", {"session_id": session_id, "budget_tokens": -1})
        await refused(client, "thinking/set", {"session_id": session_id, "budget_tokens": "lots"})
        after = await client.request("session/get", {"session_id": session_id})
        assert after["thinking"] == cleared  # the refused calls changed nothing


async def test_a_custom_budget_is_clamped_on_budget_models_and_kept_but_not_sent_on_effort_models(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        started = await start(client, tmp_path, model_id="anthropic/claude-sonnet-4-5", thinking_level="medium")
        session_id = started["session"]["session_id"]
        low = await thinking_set(client, session_id, budget_tokens=10)
        assert low["budget_tokens"] == 1024 and "outside" in low["reason"] and "using 1024" in low["reason"]

        await thinking_set(client, session_id, budget_tokens=6000)
        switched = await client.request("model/set", {"session_id": session_id, "model_id": "openai/gpt-5.2"})
        effort = switched["thinking"]
        assert effort["budget_tokens"] is None and effort["request_params"]["reasoning"]["effort"] == "medium"
        assert "not by a token budget" in effort["reason"] and "6000" in effort["reason"]

        back = await client.request(
            "model/set", {"session_id": session_id, "model_id": "anthropic/claude-sonnet-4-5"}
        )  # kept: it applies again
        assert back["thinking"]["budget_tokens"] == 6000 and back["thinking"]["reason"] is None


async def test_session_start_refuses_an_unknown_display_or_fallback_and_stores_nothing(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        for field, value, allowed in (
            ("display", "hidden", ["summarized", "omitted"]),
            ("fallback", "closest", ["nearest", "off", "default", "error"]),
        ):
            error = await refused(client, "session/start", {"cwd": str(tmp_path), field: value})
            assert error.data["allowed"] == allowed and error.data["errors"][0]["path"] == f"$.params.{field}"
        assert (await client.request("session/list", {}))["sessions"] == []


# --- defaults that follow ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "thinker", "tools", "source"),
    [
        ("", "medium", "off", "model_default"),
        ('[providers.mock]\ndefault_thinking_level = "high"\n', "high", "high", "provider_default"),
        (
            '[defaults]\nthinking_level = "low"\n[providers.mock]\ndefault_thinking_level = "high"\n',
            "low",
            "low",
            "config_default",
        ),
    ],
)
async def test_a_default_level_follows_the_defaults_across_model_switches(
    home, tmp_path, config, thinker, tools, source
):
    write_config(home, config)
    async with in_memory_daemon(home) as (client, _):
        started = await start(client, tmp_path, model_id="mock/thinker")
        session_id = started["session"]["session_id"]
        assert started["session"]["thinking_level"] == "default"
        assert (started["thinking"]["requested"], started["thinking"]["effective"]) == ("default", thinker)
        assert started["thinking"]["source"] == source

        switched = await client.request("model/set", {"session_id": session_id, "model_id": "mock/tools"})
        assert (switched["thinking"]["requested"], switched["thinking"]["effective"]) == ("default", tools)
        assert switched["thinking"]["source"] == source

        back = await client.request("model/set", {"session_id": session_id, "model_id": "mock/thinker"})
        assert back["thinking"]["effective"] == thinker  # not stuck at what the other model resolved it to
        listed = {m["id"]: m for m in (await client.request("models/list", {"provider": "mock"}))["models"]}
        assert listed["mock/thinker"]["default_thinking_level"] == thinker
        assert listed["mock/tools"]["default_thinking_level"] == tools

        explicit = await thinking_set(client, session_id, level="max")
        assert explicit["source"] == "session"
        again = await thinking_set(client, session_id, level="auto")
        assert (again["requested"], again["source"]) == ("default", source)
        got = await client.request("session/get", {"session_id": session_id})
        assert got["session"]["thinking_level"] == "default"


# --- per-turn levels ---------------------------------------------------------------------


async def per_turn_and_queued(client: RpcClient, cwd: Path) -> None:
    """A per-turn level applies once; each queued prompt keeps the settings it was sent with."""
    started = await start(client, cwd, model_id="mock/thinker", thinking_level="medium")
    session_id = started["session"]["session_id"]

    def prompt(text: str, **extra: Any) -> Any:
        return client.request("session/prompt", {"session_id": session_id, "text": text, **extra})

    first = await prompt("Think hard about this.", thinking_level="high")
    queued_plain = await prompt("And then?")  # sent while the session's level is medium
    queued_own = await prompt("Quickly now.", thinking_level="LOW")
    await thinking_set(client, session_id, level="max")  # changes later prompts, not the queued ones
    after = await prompt("After the change.")
    assert not first["queued"] and queued_plain["queued"] and queued_own["queued"] and after["queued"]

    seen = []
    for turn in (first, queued_plain, queued_own, after):
        events = await client.collect_turn(turn["turn_id"])
        assert events[-1]["type"] == "turn_end" and events[-1]["stop_reason"] == "end_turn", events[-1]
        thinking = events[0]["thinking"]
        seen.append((thinking["requested"], thinking["effective"], thinking["source"]))
    assert seen == [
        ("high", "high", "prompt"),
        ("medium", "medium", "session"),
        ("low", "low", "prompt"),
        ("max", "max", "session"),
    ]
    got = await client.request("session/get", {"session_id": session_id})
    assert got["thinking"]["requested"] == "max"  # a per-turn level never became the session's
    messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert [m["thinking_level"] for m in messages if m["role"] == "assistant"] == ["high", "medium", "low", "max"]


async def test_per_turn_levels_and_queued_prompts_keep_their_settings(home, tmp_path):
    async with in_memory_daemon(home, env={"PONDER_MOCK_DELAY_MS": "3"}) as (client, _):
        await per_turn_and_queued(client, tmp_path)


@pytest.mark.slow
async def test_per_turn_levels_and_queued_prompts_over_a_real_ponder_serve(home, tmp_path, anyio_backend):
    async with subprocess_daemon(home, env={"PONDER_MOCK_DELAY_MS": "3"}, backend=anyio_backend) as client:
        await per_turn_and_queued(client, tmp_path)


# --- the error fallback ------------------------------------------------------------------


async def test_fallback_error_refuses_an_unsupported_level_everywhere_and_changes_nothing(home, tmp_path):
    write_config(home, '[defaults]\nthinking_fallback = "error"\n')
    async with in_memory_daemon(home) as (client, _):
        error = await refused(
            client, "session/start", {"cwd": str(tmp_path), "model_id": "mock/thinker", "thinking_level": "minimal"}
        )
        assert error.data["allowed"] == MOCK_LEVELS and error.data["errors"][0]["path"] == "$.params.thinking_level"
        assert (await client.request("session/list", {}))["sessions"] == []  # nothing stored

        started = await start(client, tmp_path, model_id="mock/thinker", thinking_level="high")
        session_id = started["session"]["session_id"]
        assert started["thinking"]["fallback"] == "error"  # from config.toml's [defaults]

        error = await refused(
            client, "session/prompt", {"session_id": session_id, "text": "hi", "thinking_level": "off"}
        )
        assert error.data["allowed"] == MOCK_LEVELS and error.data["errors"][0]["path"] == "$.params.thinking_level"
        assert (await client.request("session/messages", {"session_id": session_id}))["messages"] == []
        got = await client.request("session/get", {"session_id": session_id})
        assert got["session"]["status"] == "idle" and got["session"]["message_count"] == 0

        error = await refused(client, "thinking/set", {"session_id": session_id, "level": "xhigh"})
        assert error.data["allowed"] == MOCK_LEVELS
        error = await refused(client, "model/set", {"session_id": session_id, "model_id": "mock/echo"})
        assert error.data["allowed"] == ["off"] and error.data["errors"][0]["path"] == "$.params.model_id"
        got = await client.request("session/get", {"session_id": session_id})
        assert (got["session"]["model_id"], got["thinking"]["requested"]) == ("mock/thinker", "high")

        # Per session: "nearest" again lets the same per-turn level through, resolved.
        await thinking_set(client, session_id, fallback="nearest")
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "hi", "thinking_level": "off"})
        events = await client.collect_turn(turn["turn_id"])
        assert (events[0]["thinking"]["effective"], events[0]["thinking"]["fallback"]) == ("low", "nearest")


# --- MODEL/LEVEL -------------------------------------------------------------------------


async def test_model_ids_with_a_level_suffix(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        started = await start(client, tmp_path, model_id="mock/thinker/high")
        session_id = started["session"]["session_id"]
        assert (started["session"]["model_id"], started["session"]["thinking_level"]) == ("mock/thinker", "high")

        switched = await client.request("model/set", {"session_id": session_id, "model_id": "mock/tools/med"})
        assert switched["model"]["id"] == "mock/tools" and switched["thinking"]["requested"] == "medium"
        same = await client.request(
            "model/set", {"session_id": session_id, "model_id": "thinker/ultra", "thinking_level": "max"}
        )
        assert (same["model"]["id"], same["thinking"]["effective"]) == ("mock/thinker", "max")

        error = await refused(
            client, "model/set", {"session_id": session_id, "model_id": "mock/tools/low", "thinking_level": "high"}
        )
        assert error.data["errors"][0]["path"] == "$.params.thinking_level"
        got = await client.request("session/get", {"session_id": session_id})
        assert got["session"]["model_id"] == "mock/thinker"  # the refused switch changed nothing
        await refused(
            client, "session/start", {"cwd": str(tmp_path), "model_id": "mock/thinker/low", "thinking_level": "high"}
        )

        # OpenRouter's ids contain slashes: whole, they name a model; a level still goes on the end.
        whole = await start(client, tmp_path, model_id="openrouter/anthropic/claude-sonnet-4.5")
        assert whole["session"]["model_id"] == "openrouter/anthropic/claude-sonnet-4.5"
        assert whole["session"]["thinking_level"] == "default"
        suffixed = await start(client, tmp_path, model_id="openrouter/anthropic/claude-sonnet-4.5/low")
        assert suffixed["session"]["model_id"] == "openrouter/anthropic/claude-sonnet-4.5"
        assert suffixed["thinking"]["effective"] == "low"

        with pytest.raises(RpcError) as unknown:
            await start(client, tmp_path, model_id="mock/nonesuch/high")
        assert unknown.value.code == -32002 and unknown.value.data["model_id"] == "mock/nonesuch"


@pytest.mark.slow
async def test_ponder_ask_model_with_a_level_suffix(home, tmp_path):
    env = {**os.environ, **subprocess_env(home)}
    command = [sys.executable, "-m", "daemon", "ask", "--cwd", str(tmp_path), "--model", "mock/thinker/ultra", "hi"]
    with anyio.fail_after(60):
        result = await anyio.run_process(command, env=env, check=False)
    assert result.returncode == 0, result.stderr
    async with in_memory_daemon(home) as (client, _):
        [session] = (await client.request("session/list", {}))["sessions"]
        messages = (await client.request("session/messages", {"session_id": session["session_id"]}))["messages"]
    assert (session["model_id"], session["thinking_level"]) == ("mock/thinker", "max")
    assert messages[-1]["thinking_level"] == "max"


# --- what the provider receives ----------------------------------------------------------


async def test_display_budget_and_a_per_turn_level_reach_the_request_body(home, tmp_path, replay_server):
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-thinking-key", "ANTHROPIC_BASE_URL": replay_server.url}
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    async with in_memory_daemon(home, env=env) as (client, _):
        started = await start(
            client, tmp_path, model_id="anthropic/claude-sonnet-4-5/high", display="omitted", fallback="off"
        )
        session_id = started["session"]["session_id"]
        assert (started["thinking"]["display"], started["thinking"]["fallback"]) == ("omitted", "off")
        await thinking_set(client, session_id, budget_tokens=5000)
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
        first = await client.collect_turn(turn["turn_id"])
        turn = await client.request(
            "session/prompt", {"session_id": session_id, "text": "again", "thinking_level": "off"}
        )
        second = await client.collect_turn(turn["turn_id"])
    assert first[-1]["stop_reason"] == "end_turn" and second[-1]["stop_reason"] == "end_turn"
    sent_first, sent_second = (request.json() for request in replay_server.requests)
    assert sent_first["thinking"] == {"type": "enabled", "budget_tokens": 5000, "display": "omitted"}
    assert sent_first["thinking"] == first[0]["thinking"]["request_params"]["thinking"]
    assert second[0]["thinking"]["effective"] == "off" and second[0]["thinking"]["source"] == "prompt"
    # Off on Claude 4.5 is the absence of the field: what the turn reported is what was sent.
    assert "thinking" not in sent_second and "thinking" not in second[0]["thinking"]["request_params"]


# --- sessions stored before the thinking controls ---------------------------------------


async def test_a_session_stored_by_the_previous_schema_follows_the_config_defaults(home, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(home / "sessions.db", isolation_level=None)
    try:
        migrate(conn, MIGRATIONS[:-1])  # the schema before this change
        conn.execute(
            "INSERT INTO sessions (id, title, cwd, model_id, thinking_level, approval_policy, system_prompt,"
            " parent_id, created_at, updated_at) VALUES ('ses_old', NULL, ?, 'mock/thinker', 'high', 'auto',"
            " NULL, NULL, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
            (str(tmp_path),),
        )
    finally:
        conn.close()
    write_config(home, '[defaults]\nthinking_display = "omitted"\nthinking_fallback = "default"\n')
    async with in_memory_daemon(home) as (client, _):
        got = await client.request("session/get", {"session_id": "ses_old"})
        thinking = got["thinking"]
        assert (thinking["requested"], thinking["display"], thinking["fallback"]) == ("high", "omitted", "default")
        assert thinking["budget_tokens"] is None
        forked = await client.request("session/fork", {"session_id": "ses_old"})
        await thinking_set(client, "ses_old", display="summarized", budget_tokens=2048)
        fork_id = forked["session"]["session_id"]
        assert (await client.request("session/get", {"session_id": fork_id}))["thinking"]["display"] == "omitted"
        again = await client.request("session/fork", {"session_id": "ses_old"})  # a fork copies the controls
        copied = (await client.request("session/get", {"session_id": again["session"]["session_id"]}))["thinking"]
        assert copied["display"] == "summarized" and copied["fallback"] == "default"
