"""The Ollama adapter and model discovery against the replay server.

Every fixture in ``fixtures/ollama/`` is replayed over real HTTP, cut at its UTF-8 split
offsets and every 5 bytes (one at every byte), and compared with its ``meta.expected``;
request bodies are compared whole.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part, ToolSpec
from daemon.errors import ProviderError, ProviderModelNotFound
from daemon.providers import ollama
from daemon.providers.base import BlockDelta, ProviderEvent, ProviderRequest, Stop
from daemon.providers.ollama import OllamaProvider, discover_models
from protocol.objects import Usage
from tests.providers.test_provider_gemini import closed_port_url, message, summarize, thinking, user
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse, fixture_request

pytestmark = pytest.mark.anyio

PROVIDER = "ollama"
PACE_S = 0.0002  # see tests/providers/test_provider_gemini.py: makes each cut a separate read
NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture(autouse=True)
def fresh_discovery_cache():
    ollama.clear_discovery_cache()
    yield
    ollama.clear_discovery_cache()


# --------------------------------------------------------------------------- helpers


def make_adapter(url: str) -> OllamaProvider:
    return OllamaProvider(ProviderConfig(name=PROVIDER, api="ollama", base_url=url, needs_key=False))


def request_from_fixture(name: str, history: list[ChatMessage] | None = None) -> ProviderRequest:
    """The ProviderRequest that should produce ``<name>.request.json``."""
    body = fixture_request("ollama", name)
    tools = [
        ToolSpec(name=f["name"], description=f["description"], input_schema=f["parameters"])
        for f in (t["function"] for t in body.get("tools", []))
    ]
    params = {"think": body["think"]} if "think" in body else {}
    return ProviderRequest(
        provider=PROVIDER,
        model=body["model"],
        thinking=thinking(params),
        messages=history or [user(body["messages"][0]["content"])],
        tools=tools,
    )


async def collect(
    adapter: OllamaProvider, request: ProviderRequest, sink: list[ProviderEvent] | None = None
) -> list[ProviderEvent]:
    events_seen = [] if sink is None else sink
    async with adapter.stream(request) as events:
        async for event in events:
            events_seen.append(event)
    return events_seen


def ndjson(*lines: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def line(
    content: str = "",
    *,
    thinking: str | None = None,
    tool_calls: list | None = None,
    model: str = "qwen3:8b",
    created_at: str = "2026-08-22T09:00:00.000000001Z",
) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking is not None:
        msg["thinking"] = thinking
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return {"model": model, "created_at": created_at, "message": msg, "done": False}


def done(reason: str = "stop", prompt: int = 3, output: int = 4) -> dict[str, Any]:
    return {
        "model": "qwen3:8b",
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": reason,
        "prompt_eval_count": prompt,
        "eval_count": output,
    }


# --------------------------------------------------------------------------- every fixture

SPLITS = {
    "utf8+every5": {"split_every": 5, "chunk_delay_s": PACE_S},
    "every-byte": {"split_every": 1, "chunk_delay_s": PACE_S},
}
CASES = [("thinking-content", "utf8+every5"), ("thinking-content", "every-byte"), ("tool-calls", "utf8+every5")]


@pytest.mark.parametrize(("name", "split"), CASES)
async def test_fixture_replay(replay_server: ReplayServer, name: str, split: str) -> None:
    meta = replay_server.enqueue_fixture("ollama", name, **SPLITS[split])
    expected = meta["expected"]
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, request_from_fixture(name)))
    finally:
        await adapter.aclose()
    assert result["thinking"] == expected["thinking"]
    assert result["text"] == expected["text"]
    assert [(c.call_id, c.name, c.arguments) for c in result["calls"]] == [
        (c["id"], c["name"], c["arguments"]) for c in expected["tool_calls"]
    ]
    assert all((p.provider, p.model, p.signature) == (PROVIDER, expected["model"], None) for p in result["parts"])
    assert result["usage"] == Usage(**expected["usage"])
    assert result["stop"] == Stop(
        reason="tool_use" if expected["tool_calls"] else "end_turn", raw=expected["stop_reason"]
    )
    (sent,) = replay_server.requests
    assert (sent.method, sent.path) == ("POST", "/api/chat")
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    assert sent.json() == fixture_request("ollama", name)


async def test_midstream_error_line(replay_server: ReplayServer) -> None:
    meta = replay_server.enqueue_fixture("ollama", "midstream-error", **SPLITS["utf8+every5"])
    expected = meta["expected"]
    adapter = make_adapter(replay_server.url)
    seen: list[ProviderEvent] = []
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("midstream-error"), seen)
    finally:
        await adapter.aclose()
    error = caught.value
    assert type(error) is ProviderError
    assert error.kind == expected["error"]["type"]
    assert error.status == expected["error"]["http_status"]
    assert error.retryable is expected["error"]["retryable"]
    assert expected["error"]["message"] in error.message
    # the partial answer reached the consumer before the failure; no Stop, no usage
    assert "".join(e.delta for e in seen if isinstance(e, BlockDelta)) == expected["text"]
    assert not any(isinstance(e, Stop) for e in seen)
    assert replay_server.requests[0].json() == fixture_request("ollama", "midstream-error")


# --------------------------------------------------------------------------- round trips


async def test_thinking_and_content_are_sent_back(replay_server: ReplayServer) -> None:
    meta = replay_server.enqueue_fixture("ollama", "thinking-content", split_every=9)
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson(line("Yes."), done())))
    adapter = make_adapter(replay_server.url)
    try:
        first = request_from_fixture("thinking-content")
        result = summarize(await collect(adapter, first))
        follow_up = ProviderRequest(
            provider=PROVIDER,
            model=first.model,
            thinking=first.thinking,
            messages=[*first.messages, message("assistant", *result["parts"]), user("Sure?")],
        )
        await collect(adapter, follow_up)
    finally:
        await adapter.aclose()
    assert replay_server.requests[1].json() == {
        "model": "qwen3:8b",
        "messages": [
            {"role": "user", "content": "What is 17 × 23?"},
            meta["expected"]["assistant_message_for_roundtrip"],
            {"role": "user", "content": "Sure?"},
        ],
        "think": True,
        "stream": True,
    }


async def test_tool_calls_follow_up_body(replay_server: ReplayServer) -> None:
    meta = replay_server.enqueue_fixture("ollama", "tool-calls", split_every=5)
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson(line("24 °C and clear."), done())))
    expected = meta["expected"]
    adapter = make_adapter(replay_server.url)
    try:
        first = request_from_fixture("tool-calls")
        result = summarize(await collect(adapter, first))
        (call,) = result["calls"]
        result_text = expected["tool_result_message_example"]["content"]
        second = ProviderRequest(
            provider=PROVIDER,
            model=first.model,
            thinking=first.thinking,
            tools=first.tools,
            messages=[
                *first.messages,
                message("assistant", *result["parts"]),
                message("tool", Part(type="tool_result", call_id=call.call_id, text=result_text)),
            ],
        )
        answer = summarize(await collect(adapter, second))
    finally:
        await adapter.aclose()
    body = replay_server.requests[1].json()
    first_body = fixture_request("ollama", "tool-calls")
    assert body == {
        **first_body,
        "messages": [
            *first_body["messages"],
            expected["assistant_message_for_roundtrip"],
            expected["tool_result_message_example"],
        ],
    }
    assert answer["stop"] == Stop(reason="end_turn", raw="stop")


async def test_thinking_of_another_model_is_not_sent(replay_server: ReplayServer) -> None:
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson(line("ok"), done())))
    history = [
        user("a"),
        message(
            "assistant",
            Part(type="thinking", text="qwen's thoughts", provider=PROVIDER, model="qwen3:8b"),
            Part(type="text", text="answer", provider=PROVIDER, model="qwen3:8b"),
        ),
        user("b"),
    ]
    adapter = make_adapter(replay_server.url)
    try:
        await collect(
            adapter,
            ProviderRequest(
                provider=PROVIDER, model="gpt-oss:20b", thinking=thinking({"think": "low"}), messages=history
            ),
        )
    finally:
        await adapter.aclose()
    assert replay_server.requests[0].json()["messages"][1] == {"role": "assistant", "content": "answer"}


# --------------------------------------------------------------------------- request bodies


async def test_model_without_thinking_gets_no_think_key(replay_server: ReplayServer) -> None:
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson(line("Hello"), done())))
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(
            await collect(
                adapter,
                ProviderRequest(
                    provider=PROVIDER,
                    model="llama3.2:3b",
                    thinking=thinking({}),
                    messages=[user("Hi")],
                    system_prompt="Be brief.",
                    max_output_tokens=256,
                ),
            )
        )
    finally:
        await adapter.aclose()
    assert result["text"] == "Hello" and result["thinking"] == ""
    assert replay_server.requests[0].json() == {
        "model": "llama3.2:3b",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "stream": True,
        "options": {"num_predict": 256},
    }


# --------------------------------------------------------------------------- stream details


async def test_tool_calls_without_ids_get_stable_ones(replay_server: ReplayServer) -> None:
    calls = [
        {"function": {"name": "read", "arguments": {"path": "a"}}},
        {"function": {"name": "read", "arguments": '{"path": "b"}'}},  # a string, as some templates give
    ]
    body = ndjson(line(tool_calls=calls), done())
    ids = []
    for _ in range(2):
        replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=body))
        adapter = make_adapter(replay_server.url)
        try:
            result = summarize(await collect(adapter, request_from_fixture("thinking-content")))
        finally:
            await adapter.aclose()
        assert [c.arguments for c in result["calls"]] == [{"path": "a"}, {"path": "b"}]
        assert result["stop"] == Stop(reason="tool_use", raw="stop")
        ids.append([c.call_id for c in result["calls"]])
    assert ids[0] == ids[1] and len(set(ids[0])) == 2
    assert all(i and i.startswith("call_") for i in ids[0])


async def test_length_is_max_tokens(replay_server: ReplayServer) -> None:
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson(line("cut"), done("length"))))
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, request_from_fixture("thinking-content")))
    finally:
        await adapter.aclose()
    assert result["stop"] == Stop(reason="max_tokens", raw="length")
    assert result["usage"] == Usage(input_tokens=3, output_tokens=4)


async def test_stream_without_done_is_retryable(replay_server: ReplayServer) -> None:
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson(line("Sure"))))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "incomplete_stream"


async def test_leaving_early_closes_the_stream_cleanly(replay_server: ReplayServer) -> None:
    body = ndjson(*[line(f"w{i} ") for i in range(40)], done())
    cuts = list(range(50, len(body), 50))
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=body, split_at=cuts, chunk_delay_s=0.01))
    adapter = make_adapter(replay_server.url)
    try:
        async with adapter.stream(request_from_fixture("thinking-content")) as events:
            async for event in events:
                if isinstance(event, BlockDelta):
                    break
        with anyio.move_on_after(0.05):  # and once more, cancelled while waiting
            replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=body, split_at=[50], chunk_delay_s=1))
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()
    gc.collect()  # an abandoned body reader would warn here (filterwarnings = error)
    await anyio.lowlevel.checkpoint()


# --------------------------------------------------------------------------- errors


async def test_http_404_is_model_not_found_with_pull_hint(replay_server: ReplayServer) -> None:
    replay_server.enqueue(
        ScriptedResponse(
            status=404,
            headers={"content-type": "application/json"},
            body=b'{"error":"model \\"qwen3:8b\\" not found, try pulling it first"}',
        )
    )
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderModelNotFound, match=r"run `ollama pull qwen3:8b`") as caught:
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()
    assert caught.value.status == 404 and not caught.value.retryable


async def test_model_not_found_error_line_is_model_not_found(replay_server: ReplayServer) -> None:
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=ndjson({"error": "model 'qwen3:8b' not found"})))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderModelNotFound, match=r"ollama pull qwen3:8b"):
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()


@pytest.mark.parametrize(("status", "retryable"), [(500, True), (503, True), (400, False)])
async def test_http_errors(replay_server: ReplayServer, status: int, retryable: bool) -> None:
    replay_server.enqueue(
        ScriptedResponse(
            status=status, headers={"content-type": "application/json"}, body=b'{"error":"something broke"}'
        )
    )
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError, match="something broke") as caught:
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()
    assert type(caught.value) is ProviderError
    assert caught.value.status == status and caught.value.retryable is retryable


async def test_connection_dropped_mid_body_is_retryable(replay_server: ReplayServer) -> None:
    body = ndjson(line("Sure"), line(" thing"))
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=body, content_length=len(body) + 500))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "connection_error"
    assert "mid-stream" in caught.value.message


async def test_absent_server_is_a_retryable_connection_error() -> None:
    adapter = make_adapter(closed_port_url())
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("thinking-content"))
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "connection_error"
    assert time.monotonic() - started < 2


# --------------------------------------------------------------------------- discovery

TAGS = {
    "models": [
        {
            "name": name,
            "model": name,
            "modified_at": "2026-08-01T10:00:00.123456789Z",
            "size": 5_225_388_164,
            "digest": "500a1f067a9f782620b40bee6f7b0c89e17ae61f686b92c24933e4ca4b2b8b41",
            "details": {
                "format": "gguf",
                "family": family,
                "families": [family],
                "parameter_size": "8B",
                "quantization_level": "Q4_K_M",
            },
        }
        for name, family in [
            ("qwen3:8b", "qwen3"),
            ("gpt-oss:20b", "gptoss"),
            ("llama3.2:3b", "llama"),
            ("nomic-embed-text:latest", "nomic-bert"),
            ("broken:1b", "llama"),
        ]
    ]
}
SHOW = {
    "qwen3:8b": (["completion", "tools", "thinking"], {"general.architecture": "qwen3", "qwen3.context_length": 40960}),
    "gpt-oss:20b": (
        ["completion", "tools", "thinking"],
        {"general.architecture": "gptoss", "gptoss.context_length": 131072},
    ),
    "llama3.2:3b": (["completion", "tools"], {"general.architecture": "llama", "llama.context_length": 131072}),
    "nomic-embed-text:latest": (
        ["embedding"],
        {"general.architecture": "nomic-bert", "nomic-bert.context_length": 2048},
    ),
}


def found(model: str, thinking: bool, tools: bool, context: int | None, levels: list[str] | None = None) -> dict:
    return {
        "model": model,
        "name": model,
        "supports_thinking": thinking,
        "think_levels": levels,
        "supports_tools": tools,
        "supports_vision": False,
        "context_window": context,
    }


DISCOVERED = [
    found("qwen3:8b", True, True, 40960),
    found("gpt-oss:20b", True, True, 131072, ["low", "medium", "high"]),
    found("llama3.2:3b", False, True, 131072),
    found("broken:1b", False, False, None),  # /api/show failed: listed, with nothing claimed
]


def show_answer(request: RecordedRequest) -> ScriptedResponse:
    name = request.json()["model"]
    if name not in SHOW:
        return ScriptedResponse(status=500, body=b'{"error":"failed to read model"}')
    capabilities, model_info = SHOW[name]
    body = {
        "modelfile": f"FROM {name}\n",
        "parameters": "temperature 0.6",
        "template": "{{ .Prompt }}",
        "details": {"format": "gguf", "family": model_info["general.architecture"]},
        "model_info": {**model_info, "general.parameter_count": 8_190_735_360},
        "capabilities": capabilities,
        "modified_at": "2026-08-01T10:00:00.123456789Z",
    }
    return ScriptedResponse(headers={"content-type": "application/json; charset=utf-8"}, body=json.dumps(body).encode())


def serve_ollama_api(server: ReplayServer) -> None:
    tags = json.dumps(TAGS).encode()
    server.route(
        "GET", "/api/tags", lambda _: ScriptedResponse(headers={"content-type": "application/json"}, body=tags)
    )
    server.route("POST", "/api/show", show_answer)


async def test_discovery(replay_server: ReplayServer) -> None:
    serve_ollama_api(replay_server)
    assert await discover_models(replay_server.url) == DISCOVERED
    shows = sorted(r.json()["model"] for r in replay_server.requests if r.path == "/api/show")
    assert shows == sorted(m["name"] for m in TAGS["models"])
    assert [r.path for r in replay_server.requests].count("/api/tags") == 1


async def test_discovery_is_cached_per_base_url(replay_server: ReplayServer, monkeypatch: pytest.MonkeyPatch) -> None:
    serve_ollama_api(replay_server)
    now = [1000.0]
    monkeypatch.setattr(ollama, "_clock", lambda: now[0])
    first = await discover_models(replay_server.url)
    asked = len(replay_server.requests)
    first[0]["name"] = "changed by the caller"
    now[0] += ollama.DISCOVERY_TTL_S - 1
    assert await discover_models(replay_server.url + "/") == DISCOVERED  # cached, and not the caller's copy
    assert len(replay_server.requests) == asked
    now[0] += 2
    assert await discover_models(replay_server.url) == DISCOVERED
    assert len(replay_server.requests) == 2 * asked


async def test_discovery_without_a_server_is_quick_and_empty() -> None:
    url = closed_port_url()
    started = time.monotonic()
    assert await discover_models(url) == []
    assert time.monotonic() - started < 0.6


async def test_discovery_of_a_non_ollama_server_is_empty(replay_server: ReplayServer) -> None:
    replay_server.route("GET", "/api/tags", lambda _: ScriptedResponse(status=404, body=b"not here"))
    assert await discover_models(replay_server.url) == []


async def test_arguments_nested_too_deep_are_kept_as_invalid(replay_server: ReplayServer) -> None:
    deep: Any = {}
    for _ in range(150):  # within json's limits, past MAX_ARGUMENT_DEPTH: the agent makes it a tool error
        deep = {"a": deep}
    body = ndjson(line(tool_calls=[{"function": {"name": "read", "arguments": {"path": deep}}}]), done())
    replay_server.enqueue(ScriptedResponse(headers=NDJSON, body=body))
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, request_from_fixture("thinking-content")))
    finally:
        await adapter.aclose()
    [call] = result["calls"]
    assert call.arguments == {}
    assert json.loads(call.provider_data["invalid_arguments"]) == {"path": deep}
