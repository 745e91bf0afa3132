"""The Chat Completions adapter against every fixture of openai-chat/ and dashscope/.

Each fixture is served by the real replay server (127.0.0.1), cut at its UTF-8 split
offsets and every 5 bytes (one fixture at every byte), and we assert the events against
``meta.expected`` and the request body against ``<fixture>.request.json``. The tool-loop
and follow-up tests assert the exact turn-2 body against ``assistant_message_for_roundtrip``.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import pytest

from daemon.config.settings import ProviderConfig
from daemon.conversation import Part, ToolSpec
from daemon.errors import ProviderAuthError, ProviderModelNotFound
from daemon.providers.base import Stop
from daemon.providers.openai_chat import OpenAIChatProvider, chat_dialect
from daemon.providers.openai_common import error_retryable, parse_duration
from daemon.util.secret import Secret
from tests.support.provider_streams import collect, enqueue_local, make_request, tool_results, user
from tests.support.replay import ScriptedResponse, fixture_request, fixtures_dir, load_fixture

FAKE_KEY = "sk-test-not-a-real-key-0123456789"

# (fixture folder, fixture name, provider name that selects the dialect)
FIXTURES = [
    ("openai-chat", "plain-text", "openai"),
    ("openai-chat", "reasoning-usage", "openai"),
    ("openai-chat", "parallel-tool-calls", "openai"),
    ("openai-chat", "midstream-error", "openai"),
    ("openai-chat", "rate-limit-429", "openai"),
    ("openai-chat", "deepseek-reasoning-content", "deepseek"),
    ("openai-chat", "deepseek-tool-call", "deepseek"),
    ("openai-chat", "copilot-claude-reasoning", "copilot"),
    ("openai-chat", "copilot-gemini-reasoning-tools", "copilot"),
    ("openai-chat", "openrouter-reasoning", "openrouter"),
    ("openai-chat", "ollama-compat-reasoning", "local"),  # Ollama's /v1, configured by hand
    ("dashscope", "reasoning-content", "dashscope"),
    ("dashscope", "tool-call-empty-id", "dashscope"),
    ("dashscope", "non-streaming-thinking-400", "dashscope"),
]
# Where our body differs from the recorded one, on purpose.
BODY_DEVIATIONS: dict[str, dict[str, Any]] = {
    # Recorded by a client that did not ask for usage; we always do.
    "midstream-error": {"stream_options": {"include_usage": True}},
    # The fixture is the bug this adapter cannot make: thinking on a non-streaming call.
    "non-streaming-thinking-400": {"stream": True, "stream_options": {"include_usage": True}},
}
# Where our usage differs from the fixture's, on purpose: Usage.output_tokens includes
# reasoning, and Copilot's Gemini models count it outside completion_tokens (the recorded
# total is prompt + completion + reasoning: 19581 + 53 + 134 = 19768).
# Keyed by the recorded response id (copilot-gemini-reasoning-tools).
USAGE_DEVIATIONS: dict[str, dict[str, Any]] = {"MhdNvueIX8xw90AuKc3ZEj5": {"output_tokens": 53 + 134}}
_BODY_KEYS = {
    "model",
    "messages",
    "tools",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "parallel_tool_calls",
    "usage",
}
RAW_STOPS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
IDS = [f"{folder}/{name}" for folder, name, _ in FIXTURES]


def config(name: str, url: str, **kwargs: Any) -> ProviderConfig:
    kwargs.setdefault("api_key", Secret(FAKE_KEY))
    return ProviderConfig(name=name, api="openai-chat", base_url=url, **kwargs)


def request_for(folder: str, name: str, provider: str, messages: list | None = None):
    """The ProviderRequest that should produce the fixture's recorded body."""
    body = fixture_request(folder, name)
    tools = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"]["description"],
            input_schema=t["function"]["parameters"],
        )
        for t in body.get("tools", [])
    ]
    return make_request(
        provider,
        body["model"],
        messages or [user(body["messages"][0]["content"])],
        # Whatever is not ours in the recorded body is the thinking fragment.
        params={k: v for k, v in body.items() if k not in _BODY_KEYS},
        tools=tools,
        max_output_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
    )


def test_every_fixture_is_covered():
    for folder in ("openai-chat", "dashscope"):
        names = {p.name.removesuffix(".meta.json") for p in (fixtures_dir() / folder).glob("*.meta.json")}
        assert names == {n for f, n, _ in FIXTURES if f == folder}


@pytest.mark.anyio
@pytest.mark.parametrize("split_every", [None, 5], ids=["utf8-offsets", "every-5-bytes"])
@pytest.mark.parametrize(("folder", "name", "provider"), FIXTURES, ids=IDS)
async def test_fixture(replay_server, folder, name, provider, split_every):
    meta = replay_server.enqueue_fixture(folder, name, split_every=split_every)
    adapter = OpenAIChatProvider(config(provider, replay_server.url))
    try:
        got = await collect(adapter, request_for(folder, name, provider))
    finally:
        await adapter.aclose()

    sent = replay_server.requests[0]
    assert sent.path == "/chat/completions"
    assert sent.json() == {**fixture_request(folder, name), **BODY_DEVIATIONS.get(name, {})}
    assert sent.headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "text/event-stream"
    assert_expected(meta["expected"], got)


def assert_expected(expected: dict[str, Any], got) -> None:
    error = expected.get("error")
    if error:
        assert got.error is not None, "expected a ProviderError"
        assert got.stop is None
        assert got.error.kind == error["type"]
        assert got.error.status == error["http_status"]
        assert got.error.retryable is error["retryable"]
        if "retry_after_seconds" in error:
            assert got.error.retry_after == error["retry_after_seconds"]
        if "message" in error:
            assert error["message"] in got.error.message
        assert FAKE_KEY not in got.error.message
        if "text" in expected:  # partial output before the failure
            assert got.streamed("text") == expected["text"]
        return
    assert got.error is None, got.error
    assert got.streamed("text") == expected["text"]
    assert got.streamed("thinking") == expected["thinking"]
    # One response is one assistant message (the Copilot trap): one text block at most,
    # one thinking block at most, never an empty one (check_grammar).
    assert expected["message_starts"] == 1
    assert got.starts("text") == (1 if expected["text"] else 0)
    assert got.starts("thinking") == (1 if expected["thinking"] else 0)
    assert [p.text for p in got.parts if p.type == "text"] == ([expected["text"]] if expected["text"] else [])
    assert got.tool_calls == [
        {"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in expected["tool_calls"]
    ]
    raws = [(p.provider_data or {}).get("arguments_raw") for p in got.parts if p.type == "tool_call"]
    assert raws == [c["arguments_raw"] for c in expected["tool_calls"]]
    assert got.stop == Stop(reason=RAW_STOPS[expected["stop_reason"]], raw=expected["stop_reason"])
    assert got.usage == {**expected["usage"], **USAGE_DEVIATIONS.get(expected.get("id", ""), {})}
    thinking_parts = [p for p in got.parts if p.type == "thinking"]
    if "reasoning_opaque" in expected:
        assert thinking_parts[0].provider_data == {"reasoning_opaque": expected["reasoning_opaque"]}
    if "reasoning_details_merged" in expected:
        assert thinking_parts[0].provider_data == {"reasoning_details": expected["reasoning_details_merged"]}


@pytest.mark.anyio
async def test_every_byte_its_own_chunk(replay_server):
    folder, name, provider = "openai-chat", "openrouter-reasoning", "openrouter"
    meta = replay_server.enqueue_fixture(folder, name, split_every=1)
    adapter = OpenAIChatProvider(config(provider, replay_server.url))
    got = await collect(adapter, request_for(folder, name, provider))
    await adapter.aclose()
    assert_expected(meta["expected"], got)


# -- the second request of a conversation ---------------------------------------------

TOOL_OUTPUTS = {
    "call_00_PKQRReCD3cWxFHIAHTbAYdDx": '{"temp_c":14,"conditions":"light rain"}',
    "call_JsnadNL4jQceO25aS8cXOrAb": '{"temp_c":18}',
    "call_X9PhZhQIRj9w67Jc4fnsY4Dw": '{"temp_c":27}',
    "call_dsS9H54uhxjqRwOq9DkxnWgJDqn": "# demo\nAn Elixir app.",
    "call_DfpwFFmhHfwVCWdr5nMZROdi0R4": "defmodule Demo.MixProject do ... end",
}
# The fixtures whose meta says what the reply must look like when sent back.
ROUNDTRIP = [
    (folder, name, provider)
    for folder, name, provider in FIXTURES
    if name
    in {
        "parallel-tool-calls",
        "deepseek-reasoning-content",
        "deepseek-tool-call",
        "copilot-claude-reasoning",
        "copilot-gemini-reasoning-tools",
        "openrouter-reasoning",
        "reasoning-content",
    }
]


def test_roundtrip_list_matches_the_fixtures():
    with_roundtrip = {
        (folder, name)
        for folder, name, _ in FIXTURES
        if "assistant_message_for_roundtrip" in load_fixture(folder, name)[0]["expected"]
    }
    assert with_roundtrip == {(folder, name) for folder, name, _ in ROUNDTRIP}


# Where what we send back differs from the fixture's, on purpose: a turn of tool calls only
# goes back with content null, as DeepSeek's own accepted traffic has it (the fixture's ""
# is what an SDK message object serializes to, not what the API sends).
ROUNDTRIP_DEVIATIONS: dict[str, dict[str, Any]] = {"deepseek-tool-call": {"content": None}}


@pytest.mark.anyio
@pytest.mark.parametrize(("folder", "name", "provider"), ROUNDTRIP, ids=[f"{f}/{n}" for f, n, _ in ROUNDTRIP])
async def test_follow_up_request_replays_the_reply(replay_server, folder, name, provider):
    """Turn 2 carries the reply exactly as the fixture says it must go back: DeepSeek's
    reasoning_content on tool-call turns, Copilot's reasoning_text + reasoning_opaque,
    OpenRouter's reasoning_details, raw tool arguments; tool results as role:tool."""
    meta = replay_server.enqueue_fixture(folder, name, split_every=5)
    replay_server.enqueue_fixture("openai-chat", "plain-text")
    adapter = OpenAIChatProvider(config(provider, replay_server.url))
    first = request_for(folder, name, provider)
    got = await collect(adapter, first)
    assert got.error is None
    reply = got.reply()
    calls = [p for p in reply.parts if p.type == "tool_call"]
    follow = tool_results(*((c.call_id, TOOL_OUTPUTS[c.call_id]) for c in calls)) if calls else user("Thanks. Why?")
    second = request_for(folder, name, provider, messages=[*first.messages, reply, follow])
    await collect(adapter, second)
    await adapter.aclose()

    body1, body2 = replay_server.requests[0].json(), replay_server.requests[1].json()
    tail = (
        [{"role": "tool", "tool_call_id": c.call_id, "content": TOOL_OUTPUTS[c.call_id]} for c in calls]
        if calls
        else [{"role": "user", "content": "Thanks. Why?"}]
    )
    roundtrip = {**meta["expected"]["assistant_message_for_roundtrip"], **ROUNDTRIP_DEVIATIONS.get(name, {})}
    assert body2["messages"] == [*body1["messages"], roundtrip, *tail]
    assert {k: v for k, v in body2.items() if k != "messages"} == {k: v for k, v in body1.items() if k != "messages"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "provider"),
    [
        ("deepseek-tool-call", "deepseek"),
        ("copilot-gemini-reasoning-tools", "copilot"),
        ("openrouter-reasoning", "openrouter"),
    ],
)
async def test_round_trip_data_goes_only_to_its_own_model(replay_server, name, provider):
    """After a model switch the history keeps its text and tool calls, but no reasoning
    state of the other model; DeepSeek still gets the (empty) reasoning_content it
    requires on tool-call turns. Tool arguments are re-serialized, not replayed raw."""
    replay_server.enqueue_fixture("openai-chat", name)
    replay_server.enqueue_fixture("openai-chat", "plain-text")
    adapter = OpenAIChatProvider(config(provider, replay_server.url))
    first = request_for("openai-chat", name, provider)
    reply = (await collect(adapter, first)).reply()
    calls = [p for p in reply.parts if p.type == "tool_call"]
    follow = tool_results(*((c.call_id, "ok") for c in calls)) if calls else user("Thanks.")
    other = make_request(provider, "another-model", [*first.messages, reply, follow])
    await collect(adapter, other)
    await adapter.aclose()

    sent = replay_server.requests[1].json()["messages"][1]
    assert not {"reasoning_text", "reasoning_opaque", "reasoning_details"} & sent.keys()
    if provider == "deepseek":
        assert sent["reasoning_content"] == ""
    for call, wire in zip(calls, sent.get("tool_calls", []), strict=True):
        assert json.loads(wire["function"]["arguments"]) == call.arguments
        assert wire["function"]["arguments"] == json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.anyio
async def test_deepseek_sends_reasoning_content_only_on_tool_call_turns(replay_server):
    replay_server.enqueue_fixture("openai-chat", "deepseek-reasoning-content")
    replay_server.enqueue_fixture("openai-chat", "plain-text")
    adapter = OpenAIChatProvider(config("deepseek", replay_server.url))
    first = request_for("openai-chat", "deepseek-reasoning-content", "deepseek")
    reply = (await collect(adapter, first)).reply()
    assert [p.type for p in reply.parts] == ["thinking", "text"]
    await collect(adapter, make_request("deepseek", first.model, [*first.messages, reply, user("And 18 × 24?")]))
    await adapter.aclose()
    assert replay_server.requests[1].json()["messages"][1] == {"role": "assistant", "content": "17 × 24 = **408**."}


# -- request shape ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("provider", "limit_key", "usage_keys"),
    [
        ("openai", "max_completion_tokens", {"stream_options": {"include_usage": True}}),
        ("deepseek", "max_tokens", {"stream_options": {"include_usage": True}}),
        ("dashscope", "max_tokens", {"stream_options": {"include_usage": True}}),
        ("local", "max_tokens", {"stream_options": {"include_usage": True}}),
        ("openrouter", "max_tokens", {"usage": {"include": True}}),
        ("copilot", "max_tokens", {}),
    ],
)
async def test_body_per_dialect(replay_server, provider, limit_key, usage_keys):
    replay_server.enqueue_fixture("openai-chat", "plain-text")
    adapter = OpenAIChatProvider(config(provider, replay_server.url + "/v1/"))
    tool = ToolSpec(name="read_file", description="Read a file", input_schema={"type": "object", "properties": {}})
    request = make_request(
        provider,
        "m1",
        [user("one", "two")],
        system="Be brief.",
        tools=[tool],
        max_output_tokens=1234,
        params={"stream_options": {"include_obfuscation": False}, "reasoning_effort": "low"},
    )
    await collect(adapter, request)
    await adapter.aclose()
    sent = replay_server.requests[0]
    assert sent.path == "/v1/chat/completions"
    expected: dict[str, Any] = {
        "model": "m1",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one\n\ntwo"}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "read_file", "description": "Read a file", "parameters": tool.input_schema},
            }
        ],
        limit_key: 1234,
        "stream": True,
        **usage_keys,
        "reasoning_effort": "low",
    }
    # The thinking fragment is deep-merged: it adds to our stream_options, not replaces them.
    expected["stream_options"] = {**usage_keys.get("stream_options", {}), "include_obfuscation": False}
    if provider == "openai":
        expected["parallel_tool_calls"] = True
    assert sent.json() == expected


def test_dialect_by_name_then_host():
    def dialect(name: str, url: str) -> str:
        return chat_dialect(ProviderConfig(name=name, api="openai-chat", base_url=url))

    assert dialect("deepseek", "http://127.0.0.1:1") == "deepseek"
    assert dialect("my-ds", "https://api.deepseek.com") == "deepseek"
    assert dialect("work", "https://api.githubcopilot.com") == "copilot"
    assert dialect("or", "https://openrouter.ai/api/v1") == "openrouter"
    assert dialect("qwen", "https://dashscope.aliyuncs.com/compatible-mode/v1") == "dashscope"
    assert dialect("oai", "https://api.openai.com/v1") == "openai"
    assert dialect("local", "http://localhost:11434/v1") == "compat"
    assert dialect("evil", "https://deepseek.com.example.org") == "compat"


@pytest.mark.anyio
async def test_extra_headers_supply_the_credentials(replay_server):
    """The Copilot wrapper's hook: its token and headers, awaited per request, win."""
    calls = []

    async def extra() -> dict[str, str]:
        calls.append(1)
        return {"Authorization": "Bearer copilot-token-123456", "Copilot-Integration-Id": "vscode-chat"}

    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    settings = config("copilot", replay_server.url, api_key=None, headers={"Editor-Version": "ponder/0.1"})
    adapter = OpenAIChatProvider(settings, extra_headers=extra)
    for _ in range(2):
        assert (await collect(adapter, request_for("openai-chat", "copilot-claude-reasoning", "copilot"))).error is None
    await adapter.aclose()
    assert len(calls) == 2
    headers = replay_server.requests[0].headers
    assert headers["authorization"] == "Bearer copilot-token-123456"
    assert headers["copilot-integration-id"] == "vscode-chat"
    assert headers["editor-version"] == "ponder/0.1"


# -- errors ---------------------------------------------------------------------------------


def _error_body(message: str, type_: str, code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


@pytest.mark.anyio
async def test_auth_error_names_the_variable_and_hides_the_key(replay_server):
    body = _error_body(f"Incorrect API key provided: {FAKE_KEY}.", "authentication_error", "invalid_api_key")
    replay_server.enqueue(ScriptedResponse(status=401, headers={"content-type": "application/json"}, body=body))
    adapter = OpenAIChatProvider(config("deepseek", replay_server.url))
    got = await collect(adapter, make_request("deepseek", "deepseek-v4-pro", [user("hi")]))
    await adapter.aclose()
    assert isinstance(got.error, ProviderAuthError)
    assert got.error.status == 401 and not got.error.retryable
    assert "DEEPSEEK_API_KEY" in got.error.message
    assert FAKE_KEY not in got.error.message and FAKE_KEY not in repr(got.error.data)


@pytest.mark.anyio
async def test_missing_key_fails_before_any_request(replay_server):
    adapter = OpenAIChatProvider(config("openai", replay_server.url, api_key=None))
    got = await collect(adapter, make_request("openai", "gpt-4.1", [user("hi")]))
    assert isinstance(got.error, ProviderAuthError)
    assert "OPENAI_API_KEY" in got.error.message
    assert replay_server.requests == []


@pytest.mark.anyio
async def test_model_not_found(replay_server):
    body = _error_body(
        "The model `gpt-9` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"
    )
    replay_server.enqueue(ScriptedResponse(status=404, headers={"content-type": "application/json"}, body=body))
    adapter = OpenAIChatProvider(config("openai", replay_server.url))
    got = await collect(adapter, make_request("openai", "gpt-9", [user("hi")]))
    await adapter.aclose()
    assert isinstance(got.error, ProviderModelNotFound)
    assert "gpt-9" in got.error.message


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "headers", "body", "retryable", "retry_after"),
    [
        (503, {"retry-after-ms": "1500"}, _error_body("busy", "server_error"), True, 1.5),
        (500, {}, b"upstream exploded", True, None),
        # insufficient_quota is a 429 that no wait will lift.
        (
            429,
            {"retry-after": "5"},
            _error_body("You exceeded your current quota.", "insufficient_quota", "insufficient_quota"),
            False,
            None,
        ),
        (429, {"x-should-retry": "false"}, _error_body("slow down", "requests", "rate_limit_exceeded"), False, None),
        # No retry-after: the wait the message names, else the exhausted budget's reset.
        (
            429,
            {},
            _error_body("Limit 30000. Please try again in 6m0s. Visit ...", "tokens", "rate_limit_exceeded"),
            True,
            360.0,
        ),
        (
            429,
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "120ms",
                "x-ratelimit-remaining-tokens": "900",
                "x-ratelimit-reset-tokens": "9s",
            },
            _error_body("Rate limit reached.", "requests", "rate_limit_exceeded"),
            True,
            0.12,
        ),
    ],
)
async def test_status_errors(replay_server, status, headers, body, retryable, retry_after):
    replay_server.enqueue(
        ScriptedResponse(status=status, headers={"content-type": "application/json", **headers}, body=body)
    )
    adapter = OpenAIChatProvider(config("openai", replay_server.url))
    got = await collect(adapter, make_request("openai", "gpt-4.1", [user("hi")]))
    await adapter.aclose()
    assert got.error is not None and got.error.status == status
    assert got.error.retryable is retryable
    assert (
        got.error.retry_after == pytest.approx(retry_after)
        if retry_after is not None
        else got.error.retry_after is None
    )


@pytest.mark.anyio
async def test_connection_refused(replay_server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter = OpenAIChatProvider(config("openai", f"http://127.0.0.1:{port}"))
    got = await collect(adapter, make_request("openai", "gpt-4.1", [user("hi")]))
    await adapter.aclose()
    assert got.error is not None and got.error.kind == "connection_error" and got.error.retryable


@pytest.mark.anyio
async def test_connection_dropped_mid_stream():
    """A server that promises more body than it sends, then hangs up."""
    _, body = load_fixture("openai-chat", "plain-text")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(head + body[:1500])

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        adapter = OpenAIChatProvider(config("openai", f"http://127.0.0.1:{listener.getsockname()[1]}"))
        got = await collect(adapter, make_request("openai", "gpt-4.1-mini", [user("hi")]))
        await adapter.aclose()
        thread.join(5)
    assert got.error is not None and got.error.kind == "connection_error" and got.error.retryable
    assert "mid-stream" in got.error.message
    assert got.streamed("text").startswith("The Eiffel")


@pytest.mark.anyio
async def test_stream_ending_without_finish_is_an_error(replay_server):
    meta, body = load_fixture("openai-chat", "plain-text")
    cut = body.index(b'"finish_reason":"stop"')
    cut = body.rindex(b"\n\n", 0, cut) + 2
    replay_server.enqueue(ScriptedResponse(headers=meta["response"]["headers"], body=body[:cut]))
    adapter = OpenAIChatProvider(config("openai", replay_server.url))
    got = await collect(adapter, make_request("openai", "gpt-4.1-mini", [user("hi")]))
    await adapter.aclose()
    assert got.error is not None and got.error.kind == "stream_ended_early" and got.error.retryable
    assert got.streamed("text") == "The Eiffel Tower is about 330 m (1,083 ft) tall."
    assert got.stop is None


@pytest.mark.anyio
async def test_json_error_body_with_status_200(replay_server):
    body = _error_body("model is overloaded", "server_error")
    replay_server.enqueue(ScriptedResponse(status=200, headers={"content-type": "application/json"}, body=body))
    adapter = OpenAIChatProvider(config("local", replay_server.url, api_key=None, needs_key=False))
    got = await collect(adapter, make_request("local", "qwen3:8b", [user("hi")]))
    await adapter.aclose()
    assert got.error is not None and "model is overloaded" in got.error.message and got.error.retryable


@pytest.mark.anyio
async def test_sse_framing_edge_cases(replay_server):
    """Comments, a retry-only block (dispatched by httpx-sse with empty data), CRLF lines,
    ``data:`` without a space, a finish chunk without [DONE]; a Copilot-style stream
    whose every chunk repeats the role with empty content."""
    chunk = '{"choices":[{"index":0,"delta":{"role":"assistant","content":%s}%s}]}'
    body = (
        ": keep-alive\r\n\r\nretry: 1000\r\n\r\n"
        + "data:"
        + chunk % ('""', "")
        + "\r\n\r\n"
        + "data: "
        + chunk % ('"Hel"', "")
        + "\n\n: OPENROUTER PROCESSING\n\n"
        + "data: "
        + chunk % ('""', "")
        + "\n\n"
        + "data: "
        + chunk % ('"lo"', "")
        + "\n\n"
        + "data: "
        + chunk % ("null", ',"finish_reason":"stop"')
        + "\n\n"
    ).encode()
    replay_server.enqueue(
        ScriptedResponse(
            headers={"content-type": "text/event-stream"}, body=body, split_at=list(range(3, len(body), 3))
        )
    )
    adapter = OpenAIChatProvider(config("local", replay_server.url, api_key=None, needs_key=False))
    got = await collect(adapter, make_request("local", "m", [user("hi")]))
    await adapter.aclose()
    assert got.error is None
    assert got.streamed("text") == "Hello" and got.starts("text") == 1
    assert got.stop == Stop(reason="end_turn", raw="stop") and got.usage is None


@pytest.mark.anyio
async def test_leaving_early_closes_the_stream_and_the_adapter_stays_usable(replay_server):
    replay_server.enqueue_fixture("openai-chat", "deepseek-reasoning-content", split_every=50)
    replay_server.enqueue_fixture("openai-chat", "plain-text")
    adapter = OpenAIChatProvider(config("deepseek", replay_server.url))
    async with adapter.stream(make_request("deepseek", "deepseek-v4-pro", [user("hi")])) as events:
        async for _event in events:
            break
    got = await collect(adapter, make_request("deepseek", "deepseek-v4-pro", [user("hi")]))
    await adapter.aclose()
    assert got.error is None and got.stop is not None


def test_error_retryable_table():
    assert error_retryable("server_error", None)
    assert error_retryable("tokens", "rate_limit_exceeded")
    assert error_retryable(None, 502)  # OpenRouter puts the status in code
    assert not error_retryable("insufficient_quota", "insufficient_quota")
    assert not error_retryable("invalid_request_error", "context_length_exceeded")
    assert not error_retryable(None, 400)


def test_parse_duration():
    assert parse_duration("1.608s") == pytest.approx(1.608)
    assert parse_duration("120ms") == pytest.approx(0.12)
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("1h2m3s") == 3723.0
    assert parse_duration("soon") is None and parse_duration("") is None


def test_tool_call_without_name_or_id_still_ends():
    """A server that sends a nameless, id-less call: it is still reported, with an id."""
    from daemon.providers.openai_chat import ChatStreamParser

    parser = ChatStreamParser(provider="local", request=make_request("local", "m", [user("x")]))
    events = parser.feed(
        "",
        json.dumps(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 3, "function": {"arguments": '{"a":'}}]}}]}
        ),
    )
    assert events == []
    events = parser.feed(
        "",
        json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 3, "function": {"arguments": "1}"}}]},
                        "finish_reason": "tool_calls",
                    }
                ]
            }
        ),
    )
    end = events[-1].part
    assert isinstance(end, Part) and end.arguments == {"a": 1} and end.call_id.startswith("call_") and end.name == ""
    assert parser.feed("", "[DONE]")[-1] == Stop(reason="tool_use", raw="tool_calls")


@pytest.mark.anyio
async def test_openrouter_cache_writes_are_reported(replay_server):
    meta = enqueue_local(replay_server, "openai-chat", "openrouter-cache-write")
    adapter = OpenAIChatProvider(config("openrouter", replay_server.url))
    try:
        got = await collect(adapter, make_request("openrouter", meta["expected"]["model"], [user("Warm the cache.")]))
    finally:
        await adapter.aclose()
    assert got.error is None and got.streamed("text") == meta["expected"]["text"]
    assert got.stop == Stop(reason="end_turn", raw="stop")
    assert got.usage == meta["expected"]["usage"]
