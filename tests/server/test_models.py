"""models/list, model/set and thinking/set over the protocol: honest, sticky, persisted."""

import json

import pytest

from daemon.jsonrpc.client import RpcError
from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse

pytestmark = pytest.mark.anyio


async def test_models_list_covers_every_family_with_availability(home):
    async with in_memory_daemon(home, env={"ANTHROPIC_API_KEY": "sk-ant-test-fake"}) as (client, _):
        models = (await client.request("models/list"))["models"]
        by_id = {m["id"]: m for m in models}
        providers = {m["provider"] for m in models}
        assert {"anthropic", "openai", "copilot", "gemini", "deepseek", "dashscope", "openrouter", "mock"} <= providers
        assert by_id["anthropic/claude-sonnet-4-5"]["available"] is True
        assert by_id["openai/gpt-5.2"]["available"] is False
        assert by_id["mock/thinker"]["available"] is True
        for model in models:
            assert model["default_thinking_level"] in model["thinking_levels"]
            assert ("off" in model["thinking_levels"]) or model["supports_thinking"]
        only = (await client.request("models/list", {"provider": "gemini"}))["models"]
        assert only and {m["provider"] for m in only} == {"gemini"}


async def test_requested_level_is_sticky_across_model_switches_and_restarts(home):
    async with in_memory_daemon(home) as (client, _):
        started = await client.request("session/start", {"model_id": "mock/thinker", "thinking_level": "high"})
        session_id = started["session"]["session_id"]
        weaker = await client.request("model/set", {"session_id": session_id, "model_id": "mock/echo"})
        assert weaker["model"]["id"] == "mock/echo"
        assert weaker["thinking"]["requested"] == "high" and weaker["thinking"]["effective"] == "off"
        assert weaker["thinking"]["reason"]
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
        events = await client.collect_turn(turn["turn_id"])
        assert events[0]["model_id"] == "mock/echo" and events[0]["thinking"]["effective"] == "off"
        [end] = [e for e in events if e["type"] == "message_end"]
        assert end["message"]["model_id"] == "mock/echo" and end["message"]["thinking_level"] == "off"
        back = await client.request("model/set", {"session_id": session_id, "model_id": "thinker"})  # a bare name
        assert back["thinking"] == {**back["thinking"], "requested": "high", "effective": "high", "reason": None}
    async with in_memory_daemon(home) as (client, _):
        got = await client.request("session/get", {"session_id": session_id})
        assert got["session"]["model_id"] == "mock/thinker" and got["session"]["thinking_level"] == "high"
        assert got["thinking"]["effective"] == "high"


async def test_thinking_set_aliases_default_and_rejection(home):
    async with in_memory_daemon(home) as (client, _):
        session_id = (await client.request("session/start", {"model_id": "mock/thinker"}))["session"]["session_id"]
        # xhigh is its own level (issue #18): the mock thinker has no xhigh, so it steps down to high.
        result = await client.request("thinking/set", {"session_id": session_id, "level": "xhigh"})
        assert result["thinking"]["requested"] == "xhigh" and result["thinking"]["effective"] == "high"
        assert "xhigh" in result["thinking"]["reason"]
        result = await client.request("thinking/set", {"session_id": session_id, "level": "ultra"})
        assert result["thinking"]["requested"] == "max" and result["thinking"]["effective"] == "max"
        result = await client.request("thinking/set", {"session_id": session_id, "level": "none"})
        assert result["thinking"]["requested"] == "off" and result["thinking"]["effective"] == "low"
        assert "off" in result["thinking"]["reason"]
        result = await client.request("thinking/set", {"session_id": session_id, "level": "default"})
        assert result["thinking"]["effective"] == "medium"
        with pytest.raises(RpcError) as error:
            await client.request("thinking/set", {"session_id": session_id, "level": "turbo"})
        assert error.value.code == -32602
        assert set(error.value.data["allowed"]) >= {"off", "minimal", "low", "medium", "high", "max", "xhigh"}
        assert error.value.data["errors"][0]["path"] == "$.params.level"
        with pytest.raises(RpcError) as error:
            await client.request("model/set", {"session_id": session_id, "model_id": "anthropic/claude-sonet-4-5"})
        assert error.value.code == -32002 and "anthropic/claude-sonnet-4-5" in error.value.data["suggestions"]


async def test_model_set_to_an_unconfigured_provider_is_accepted_but_prompt_is_refused(home):
    async with in_memory_daemon(home) as (client, _):
        session_id = (await client.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]
        result = await client.request(
            "model/set",
            {"session_id": session_id, "model_id": "anthropic/claude-opus-4-7", "thinking_level": "minimal"},
        )
        assert result["model"]["available"] is False
        thinking = result["thinking"]
        assert thinking["requested"] == "minimal" and thinking["effective"] == "low" and thinking["reason"]
        assert thinking["request_params"] == {
            "thinking": {"type": "adaptive", "display": "summarized"},
            "output_config": {"effort": "low"},
            "max_tokens": 16000,
        }
        with pytest.raises(RpcError) as error:
            await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
        assert error.value.code == -32003


async def test_ollama_models_are_discovered_from_the_local_server(home, replay_server):
    tags = {"models": [{"name": "qwen3:8b", "model": "qwen3:8b"}]}
    replay_server.enqueue(
        ScriptedResponse(body=json.dumps(tags).encode(), headers={"content-type": "application/json"})
    )
    show = {"capabilities": ["completion", "tools", "thinking"], "model_info": {"qwen3.context_length": 40960}}
    replay_server.enqueue(
        ScriptedResponse(body=json.dumps(show).encode(), headers={"content-type": "application/json"})
    )
    from daemon.providers.ollama import clear_discovery_cache

    clear_discovery_cache()
    async with in_memory_daemon(home, env={"OLLAMA_HOST": replay_server.url}) as (client, _):
        models = (await client.request("models/list", {"provider": "ollama"}))["models"]
    clear_discovery_cache()
    [model] = models
    assert model["id"] == "ollama/qwen3:8b" and model["available"] is True
    assert model["context_window"] == 40960 and model["supports_tools"] is True
    assert "off" in model["thinking_levels"] and len(model["thinking_levels"]) > 1
    assert [r.path for r in replay_server.requests] == ["/api/tags", "/api/show"]


async def test_absent_ollama_keeps_models_list_fast(home):
    import time

    from daemon.providers.ollama import clear_discovery_cache

    clear_discovery_cache()
    async with in_memory_daemon(home, env={"OLLAMA_HOST": "http://127.0.0.1:9"}) as (client, _):
        started = time.monotonic()
        models = (await client.request("models/list"))["models"]
        assert time.monotonic() - started < 2
    assert not any(m["provider"] == "ollama" for m in models)


async def test_a_broken_config_is_reported_and_the_daemon_starts(home):
    (home / "config.toml").write_text(
        '[defaults]\nmax_tool_steps = "lots"\n[providers.local]\napi = "grpc"\nbase_url = "http://127.0.0.1:1"\n'
    )
    async with in_memory_daemon(home) as (client, daemon):
        assert await client.request("ping") == {}
        assert daemon.config.max_tool_steps == 50
        problems = " ".join(daemon.config.problems)
        assert "max_tool_steps" in problems and "unknown api 'grpc'" in problems
        status = {p["provider"]: p for p in (await client.request("auth/status"))["providers"]}
        assert status["local"]["configured"] is False
    (home / "config.toml").write_text("[defaults\nmodel = 1\n")
    async with in_memory_daemon(home) as (client, daemon):
        assert "line 1" in daemon.config.problems[0]
        assert (await client.request("session/start", {"model_id": "mock/echo"}))["session"]["model_id"] == "mock/echo"
