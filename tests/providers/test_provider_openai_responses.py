"""The Responses API adapter against every fixture of openai-responses/.

Each fixture is served by the real replay server (127.0.0.1), cut at its UTF-8 split
offsets and every 5 bytes (one at every byte); we assert the events against
``meta.expected`` and the request body against ``<fixture>.request.json``, and the tool
loop's second request against ``expected.next_request_input`` exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.config.settings import ProviderConfig
from daemon.conversation import Part, ToolSpec
from daemon.providers.base import Stop
from daemon.providers.openai_responses import OpenAIResponsesProvider, strict_compatible
from daemon.util.secret import Secret
from protocol.objects import TextBlock
from tests.support.provider_streams import assistant, collect, enqueue_local, make_request, tool_results, user
from tests.support.replay import ScriptedResponse, fixture_request, fixtures_dir, load_fixture

FAKE_KEY = "sk-test-not-a-real-key-0123456789"
FOLDER = "openai-responses"
FIXTURES = ["reasoning-summary-text", "reasoning-function-call", "response-failed", "incomplete-max-output-tokens"]
USER_ITEM = {"role": "user", "content": [{"type": "input_text", "text": "..."}]}
ENCRYPTED = ["reasoning.encrypted_content"]
# Where our body differs from the recorded one, on purpose: input is always a list of
# items (history), and every request is stateless with encrypted reasoning included.
BODY_DEVIATIONS: dict[str, dict[str, Any]] = {
    "incomplete-max-output-tokens": {"input": "list"},
    "response-failed": {"input": "list", "store": False, "include": ENCRYPTED},
}
_BODY_KEYS = {"model", "input", "tools", "include", "store", "stream", "max_output_tokens", "instructions"}
TOOL_OUTPUT = '{"temp_c":14,"conditions":"light rain","precip_chance_pm":0.8}'


def config(url: str, **kwargs: Any) -> ProviderConfig:
    kwargs.setdefault("api_key", Secret(FAKE_KEY))
    return ProviderConfig(name="openai", api="openai-responses", base_url=url, **kwargs)


def user_text(body: dict[str, Any]) -> str:
    source = body["input"]
    return source if isinstance(source, str) else source[0]["content"][0]["text"]


def user_item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def request_for(name: str, messages: list | None = None, model: str | None = None):
    body = fixture_request(FOLDER, name)
    tools = [
        ToolSpec(name=t["name"], description=t["description"], input_schema=t["parameters"])
        for t in body.get("tools", [])
    ]
    return make_request(
        "openai",
        model or body["model"],
        messages or [user(user_text(body))],
        params={k: v for k, v in body.items() if k not in _BODY_KEYS},  # the thinking fragment
        tools=tools,
        max_output_tokens=body.get("max_output_tokens"),
    )


def expected_body(name: str) -> dict[str, Any]:
    body = fixture_request(FOLDER, name)
    deviations = dict(BODY_DEVIATIONS.get(name, {}))
    if deviations.pop("input", None):
        body["input"] = [user_item(user_text(body))]
    return {**body, **deviations}


def test_every_fixture_is_covered():
    names = {p.name.removesuffix(".meta.json") for p in (fixtures_dir() / FOLDER).glob("*.meta.json")}
    assert names == set(FIXTURES)


@pytest.mark.anyio
@pytest.mark.parametrize("split_every", [None, 5], ids=["utf8-offsets", "every-5-bytes"])
@pytest.mark.parametrize("name", FIXTURES)
async def test_fixture(replay_server, name, split_every):
    meta = replay_server.enqueue_fixture(FOLDER, name, split_every=split_every)
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    got = await collect(adapter, request_for(name))
    await adapter.aclose()

    sent = replay_server.requests[0]
    assert sent.path == "/responses"
    assert sent.json() == expected_body(name)
    assert sent.headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert sent.headers["accept"] == "text/event-stream"
    assert_expected(meta["expected"], got)


def assert_expected(expected: dict[str, Any], got) -> None:
    assert got.streamed("text") == expected["text"]
    assert got.streamed("thinking") == expected["thinking"]
    if expected["error"]:
        error = expected["error"]
        assert got.error is not None and got.stop is None
        assert got.error.kind == error["type"]
        assert got.error.status == error["http_status"]
        assert got.error.retryable is error["retryable"]
        assert error["message"] in got.error.message
        return
    assert got.error is None, got.error
    # One thinking block per reasoning item, its summary parts joined by a blank line.
    thinking = [p for p in got.parts if p.type == "thinking"]
    assert [p.text for p in thinking] == [
        "\n\n".join(s["text"] for s in item["summary"]) for item in expected["reasoning_items"]
    ]
    # Round-trip state is the .done copy of each reasoning item (the .added one differs).
    assert [p.provider_data for p in thinking] == expected["reasoning_items"]
    assert all((p.provider, p.model) == ("openai", got_model(got)) for p in thinking)
    assert got.tool_calls == [
        {"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in expected["tool_calls"]
    ]
    assert [p.provider_data for p in got.parts if p.type == "tool_call"] == [
        {"arguments_raw": c["arguments_raw"], "item_id": c["item_id"]} for c in expected["tool_calls"]
    ]
    raw = expected["stop_reason"]
    reason = (
        "max_tokens" if raw == "incomplete:max_output_tokens" else "tool_use" if expected["tool_calls"] else "end_turn"
    )
    assert got.stop == Stop(reason=reason, raw=raw)
    assert got.usage == expected["usage"]


def got_model(got) -> str:
    return next(p.model for p in got.parts if p.model)


@pytest.mark.anyio
async def test_every_byte_its_own_chunk(replay_server):
    meta = replay_server.enqueue_fixture(FOLDER, "reasoning-summary-text", split_every=1)
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    got = await collect(adapter, request_for("reasoning-summary-text"))
    await adapter.aclose()
    assert_expected(meta["expected"], got)


# -- the second request ---------------------------------------------------------------------


async def _two_turns(replay_server, name: str, follow_up, model: str | None = None):
    replay_server.enqueue_fixture(FOLDER, name, split_every=5)
    replay_server.enqueue_fixture(FOLDER, "reasoning-summary-text")
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    first = request_for(name)
    got = await collect(adapter, first)
    reply = got.reply()
    await collect(adapter, request_for(name, [*first.messages, reply, follow_up(reply)], model=model))
    await adapter.aclose()
    return replay_server.requests[0].json(), replay_server.requests[1].json()


@pytest.mark.anyio
async def test_tool_loop_sends_reasoning_before_its_function_call(replay_server):
    meta, _ = load_fixture(FOLDER, "reasoning-function-call")

    def results(reply):
        return tool_results(*((p.call_id, TOOL_OUTPUT) for p in reply.parts if p.type == "tool_call"))

    body1, body2 = await _two_turns(replay_server, "reasoning-function-call", results)
    assert body2["input"] == meta["expected"]["next_request_input"]
    assert {k: v for k, v in body2.items() if k != "input"} == {k: v for k, v in body1.items() if k != "input"}


@pytest.mark.anyio
async def test_reasoning_goes_back_in_front_of_the_message_it_led_to(replay_server):
    meta, _ = load_fixture(FOLDER, "reasoning-summary-text")
    _, body2 = await _two_turns(replay_server, "reasoning-summary-text", lambda reply: user("And heapsort?"))
    question = fixture_request(FOLDER, "reasoning-summary-text")["input"][0]
    assert body2["input"] == [
        question,
        {"type": "reasoning", **meta["expected"]["reasoning_items"][0]},
        {"role": "assistant", "content": [{"type": "output_text", "text": meta["expected"]["text"]}]},
        user_item("And heapsort?"),
    ]


@pytest.mark.anyio
async def test_reasoning_that_led_to_nothing_is_not_sent(replay_server):
    """A reply cut off while reasoning: the API rejects a reasoning item without the item
    that followed it, so the next request goes without it."""
    _, body2 = await _two_turns(replay_server, "incomplete-max-output-tokens", lambda reply: user("Go on."))
    question = user_text(fixture_request(FOLDER, "incomplete-max-output-tokens"))
    assert body2["input"] == [user_item(question), user_item("Go on.")]


@pytest.mark.anyio
async def test_reasoning_goes_only_to_its_own_model(replay_server):
    def results(reply):
        return tool_results(*((p.call_id, TOOL_OUTPUT) for p in reply.parts if p.type == "tool_call"))

    _, body2 = await _two_turns(replay_server, "reasoning-function-call", results, model="gpt-5.1-mini")
    assert [item.get("type", "message") for item in body2["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert json.loads(body2["input"][1]["arguments"]) == {"city": "Lyon", "unit": "celsius"}


# -- request shape ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_body_with_system_prompt_tools_and_limit(replay_server):
    replay_server.enqueue_fixture(FOLDER, "reasoning-summary-text")
    adapter = OpenAIResponsesProvider(config(replay_server.url + "/v1"))
    loose = ToolSpec(
        name="grep", description="Search", input_schema={"type": "object", "properties": {"q": {"type": "string"}}}
    )
    closed = ToolSpec(
        name="read",
        description="Read",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    )
    history = [
        user("Find it."),
        assistant(
            [Part(type="thinking", text="from another provider", provider="anthropic", model="claude", signature="sig")]
        ),
        assistant(
            [
                Part(type="text", text="Looking."),
                Part(type="tool_call", call_id="toolu_1", name="grep", arguments={"q": "x"}),
            ]
        ),
        tool_results(("toolu_1", "no match")),
    ]
    request = make_request(
        "openai", "gpt-4.1", history, system="Be terse.", tools=[loose, closed], max_output_tokens=900
    )
    await collect(adapter, request)
    await adapter.aclose()
    sent = replay_server.requests[0]
    assert sent.path == "/v1/responses"
    # No reasoning fragment (a non-reasoning model): no encrypted-reasoning include either.
    assert sent.json() == {
        "model": "gpt-4.1",
        "instructions": "Be terse.",
        "input": [
            user_item("Find it."),
            {"role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "toolu_1", "name": "grep", "arguments": '{"q":"x"}'},
            {"type": "function_call_output", "call_id": "toolu_1", "output": "no match"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "grep",
                "description": "Search",
                "parameters": loose.input_schema,
                "strict": False,
            },
            {
                "type": "function",
                "name": "read",
                "description": "Read",
                "parameters": closed.input_schema,
                "strict": True,
            },
        ],
        "max_output_tokens": 900,
        "store": False,
        "stream": True,
    }


def test_strict_compatible():
    def obj(properties: dict, required: list | None = None, **extra: Any) -> dict:
        return {
            "type": "object",
            "properties": properties,
            "required": required if required is not None else list(properties),
            "additionalProperties": False,
            **extra,
        }

    assert strict_compatible(obj({"a": {"type": "string"}}))
    assert strict_compatible(obj({"a": {"type": "array", "items": obj({"b": {"type": "integer"}})}}))
    assert not strict_compatible(obj({"a": {"type": "string"}}, required=[]))
    assert not strict_compatible({"type": "object", "properties": {}})
    assert not strict_compatible(obj({"a": {"type": "array", "items": {"type": "object", "properties": {"b": {}}}}}))
    assert not strict_compatible(obj({"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}))
    assert not strict_compatible({"type": "string"})


# -- stream variants ------------------------------------------------------------------------


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _response(status: str, **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "status": status, "output": [], "usage": None, **extra}


async def _run(replay_server, body: bytes, request=None):
    replay_server.enqueue(
        ScriptedResponse(
            headers={"content-type": "text/event-stream"}, body=body, split_at=list(range(7, len(body), 7))
        )
    )
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    got = await collect(
        adapter, request or make_request("openai", "gpt-5.1", [user("hi")], params={"reasoning": {"effort": "high"}})
    )
    await adapter.aclose()
    return got


@pytest.mark.anyio
async def test_reasoning_without_summary_is_kept_for_the_round_trip(replay_server):
    """No summary requested: the reasoning item has no text, but its encrypted state must
    still be stored (as an empty thinking block) and sent back before the call."""
    reasoning = {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAA-final", "summary": []}
    call = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "ls",
        "arguments": "{}",
        "status": "completed",
    }
    body = sse(
        {"type": "response.created", "response": _response("in_progress")},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**reasoning, "encrypted_content": "gAAAA-part"},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**call, "arguments": "", "status": "in_progress"},
        },
        # No argument deltas: the arguments only arrive with .done.
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {
            "type": "response.completed",
            "response": _response("completed", usage={"input_tokens": 5, "output_tokens": 9}),
        },
    )
    got = await _run(replay_server, body)
    assert got.error is None
    thinking, tool = got.parts
    assert thinking == Part(
        type="thinking",
        text="",
        provider="openai",
        model="gpt-5.1",
        provider_data={"id": "rs_1", "encrypted_content": "gAAAA-final", "summary": []},
    )
    assert tool.arguments == {} and got.streamed("tool_call") == "{}"
    assert got.stop == Stop(reason="tool_use", raw="completed")
    assert got.usage == {
        "input_tokens": 5,
        "output_tokens": 9,
        "reasoning_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
    }

    replay_server.enqueue_fixture(FOLDER, "reasoning-summary-text")
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    history = [user("hi"), got.reply(), tool_results(("call_1", "a.txt"))]
    await collect(adapter, make_request("openai", "gpt-5.1", history, params={"reasoning": {"effort": "high"}}))
    await adapter.aclose()
    assert replay_server.requests[-1].json()["input"][1:] == [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-final", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("event", "kind", "retryable"),
    [
        # The SDK's ResponseErrorEvent shape: fields at the top level.
        (
            {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down.", "param": None},
            "rate_limit_exceeded",
            True,
        ),
        (
            {
                "type": "response.failed",
                "response": _response("failed", error={"code": "insufficient_quota", "message": "Quota."}),
            },
            "insufficient_quota",
            False,
        ),
        (
            {
                "type": "response.failed",
                "response": _response("failed", error={"code": "server_error", "message": "Oops."}),
            },
            "server_error",
            True,
        ),
    ],
)
async def test_in_stream_errors(replay_server, event, kind, retryable):
    body = sse({"type": "response.created", "response": _response("in_progress")}, event)
    got = await _run(replay_server, body)
    assert got.error is not None and got.error.kind == kind and got.error.retryable is retryable
    assert got.error.status == 200 and got.stop is None


@pytest.mark.anyio
async def test_content_filter_and_unknown_events(replay_server):
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    body = sse(
        {"type": "response.created", "response": _response("in_progress")},
        {"type": "response.web_search_call.in_progress", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "ws_1", "type": "web_search_call"}},
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {
            "type": "response.output_text.delta",
            "output_index": 1,
            "item_id": "msg_1",
            "content_index": 0,
            "delta": "Par",
        },
        {
            "type": "response.output_text.delta",
            "output_index": 1,
            "item_id": "msg_1",
            "content_index": 0,
            "delta": "tial",
        },
        {
            "type": "response.incomplete",
            "response": _response("incomplete", incomplete_details={"reason": "content_filter"}),
        },
    )
    got = await _run(replay_server, body)
    assert got.error is None
    assert [p.text for p in got.parts] == ["Partial"]
    assert got.stop == Stop(reason="refusal", raw="incomplete:content_filter")


@pytest.mark.anyio
async def test_stream_ending_without_a_terminal_event(replay_server):
    meta, body = load_fixture(FOLDER, "reasoning-summary-text")
    cut = body.index(b"event: response.completed")
    got = await _run(replay_server, body[:cut])
    assert got.error is not None and got.error.kind == "stream_ended_early" and got.error.retryable
    assert got.streamed("text") == meta["expected"]["text"] and got.stop is None


@pytest.mark.anyio
async def test_http_errors_use_the_openai_mapping(replay_server):
    meta, body = load_fixture("openai-chat", "rate-limit-429")
    replay_server.enqueue(ScriptedResponse(status=429, headers=meta["response"]["headers"], body=body))
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    got = await collect(adapter, request_for("reasoning-summary-text"))
    await adapter.aclose()
    assert got.error is not None and got.error.status == 429 and got.error.retryable
    assert got.error.retry_after == 2.0 and got.error.kind == "tokens"


# -- phase (gpt-5.3-codex and later) and cache writes: ponder's own fixtures -------------

CODEX = "gpt-5.3-codex"
READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
)
PHASE_PARAMS = {"reasoning": {"effort": "medium", "summary": "auto"}}


def codex_request(messages: list, model: str = CODEX):
    return make_request("openai", model, messages, params=PHASE_PARAMS, tools=[READ_FILE])


@pytest.mark.anyio
async def test_phase_is_kept_per_message_and_sent_back(replay_server):
    """A preamble (phase commentary) and the final answer (phase final_answer) each go back
    with their phase, in place; the client sees each as one plain text block."""
    first_meta = enqueue_local(replay_server, FOLDER, "phase-commentary-tool-call")
    second_meta = enqueue_local(replay_server, FOLDER, "phase-final-answer")
    replay_server.enqueue_fixture(FOLDER, "reasoning-summary-text")
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    try:
        prompt = user("The parser test fails. Fix it.")
        first = await collect(adapter, codex_request([prompt]))
        expected = first_meta["expected"]
        assert first.error is None
        assert first.streamed("text") == expected["text"] and first.starts("text") == 1
        assert first.streamed("thinking") == expected["thinking"]
        (text,) = [p for p in first.parts if p.type == "text"]
        assert text.to_block() == TextBlock(text=expected["text"])  # phase never reaches the wire
        assert (text.provider, text.model, text.provider_data) == ("openai", CODEX, {"phase": "commentary"})
        assert first.stop == Stop(reason="tool_use", raw="completed")

        tool_turn = tool_results(("call_R8kXv2pQmN4sT7wYz1aB3cD5", "def parse(tokens): return tokens[:-1]"))
        history = [prompt, first.reply(), tool_turn]
        second = await collect(adapter, codex_request(history))
        assert second.error is None and second.streamed("text") == second_meta["expected"]["text"]
        (answer,) = second.parts
        assert answer.provider_data == {"phase": "final_answer"}

        await collect(adapter, codex_request([*history, second.reply(), user("Thanks!")]))
    finally:
        await adapter.aclose()

    output = {"type": "function_call_output", "call_id": "call_R8kXv2pQmN4sT7wYz1aB3cD5"}
    output["output"] = "def parse(tokens): return tokens[:-1]"
    assert replay_server.requests[1].json()["input"] == [
        user_item("The parser test fails. Fix it."),
        *expected["assistant_items_for_roundtrip"],
        output,
    ]
    assert replay_server.requests[2].json()["input"] == [
        user_item("The parser test fails. Fix it."),
        *expected["assistant_items_for_roundtrip"],
        output,
        *second_meta["expected"]["assistant_items_for_roundtrip"],
        user_item("Thanks!"),
    ]


@pytest.mark.anyio
async def test_phase_goes_only_to_the_model_that_wrote_it(replay_server):
    enqueue_local(replay_server, FOLDER, "phase-final-answer")
    replay_server.enqueue_fixture(FOLDER, "reasoning-summary-text")
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    try:
        got = await collect(adapter, codex_request([user("Fix it.")]))
        await collect(adapter, codex_request([user("Fix it."), got.reply(), user("Thanks!")], model="gpt-5.1"))
    finally:
        await adapter.aclose()
    assert replay_server.requests[1].json()["input"][1] == {
        "role": "assistant",
        "content": [{"type": "output_text", "text": got.streamed("text")}],
    }


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["phase-commentary-tool-call", "phase-final-answer"])
async def test_usage_maps_cache_writes(replay_server, name):
    """input_tokens_details.cache_write_tokens is reported (it was dropped as null)."""
    meta = enqueue_local(replay_server, FOLDER, name)
    adapter = OpenAIResponsesProvider(config(replay_server.url))
    try:
        got = await collect(adapter, codex_request([user("Fix it.")]))
    finally:
        await adapter.aclose()
    assert got.usage == meta["expected"]["usage"]
