"""The Gemini adapter against the replay server: events, request bodies, signatures, errors.

Every fixture in ``fixtures/gemini/`` is replayed over real HTTP, cut at its UTF-8 split
offsets and every few bytes (one at every byte), and compared with its ``meta.expected``.
"""

from __future__ import annotations

import gc
import itertools
import json
import socket
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderAuthError, ProviderError, ProviderModelNotFound
from daemon.providers.assembler import pieces_of
from daemon.providers.base import (
    BlockDelta,
    BlockEnd,
    BlockStart,
    ProviderEvent,
    ProviderRequest,
    Stop,
    ToolSpec,
    UsageUpdate,
)
from daemon.providers.gemini import DUMMY_SIGNATURE, GeminiProvider, parse_duration
from daemon.util.secret import Secret
from protocol.objects import TextBlock, Thinking, Usage
from tests.support.provider_streams import enqueue_local
from tests.support.replay import ReplayServer, ScriptedResponse, fixture_request, load_fixture

pytestmark = pytest.mark.anyio

FAKE_KEY = "fake-gemini-key-not-real"
PROVIDER = "gemini"
PRO = "gemini-3-pro-preview"
FLASH = "gemini-3-flash-preview"
STOP_KINDS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}


# --------------------------------------------------------------------------- helpers


def make_adapter(url: str, key: str | None = FAKE_KEY) -> GeminiProvider:
    return GeminiProvider(
        ProviderConfig(
            name=PROVIDER,
            api="gemini",
            base_url=url,
            api_key=Secret(key) if key else None,
            key_hint="set GEMINI_API_KEY or GOOGLE_API_KEY",
        )
    )


def thinking(params: dict[str, Any]) -> Thinking:
    return Thinking(
        requested="high",
        effective="high",
        supported=["minimal", "low", "medium", "high"],
        reason=None,
        budget_tokens=None,
        request_params=params,
    )


_seq = iter(range(1, 1_000_000))


def message(role: str, *parts: Part) -> ChatMessage:
    n = next(_seq)
    return ChatMessage(message_id=f"msg-{n}", session_id="sess-1", seq=n, role=role, parts=list(parts))  # type: ignore[arg-type]


def user(text: str) -> ChatMessage:
    return message("user", Part(type="text", text=text))


def tool_result(call_id: str, result: dict[str, Any]) -> Part:
    return Part(type="tool_result", call_id=call_id, text=json.dumps(result))


def request_from_fixture(name: str, model: str, history: list[ChatMessage] | None = None) -> ProviderRequest:
    """The ProviderRequest that should produce ``<name>.request.json``."""
    body = fixture_request("gemini", name)
    tools = [
        ToolSpec(name=d["name"], description=d["description"], input_schema=d["parameters"])
        for group in body.get("tools", [])
        for d in group["functionDeclarations"]
    ]
    params = {"generationConfig": body["generationConfig"]} if "generationConfig" in body else {}
    if history is None:
        history = [user(body["contents"][0]["parts"][0]["text"])]
    return ProviderRequest(provider=PROVIDER, model=model, thinking=thinking(params), messages=history, tools=tools)


async def collect(adapter: GeminiProvider, request: ProviderRequest) -> list[ProviderEvent]:
    async with adapter.stream(request) as events:
        return [event async for event in events]


def summarize(events: list[ProviderEvent]) -> dict[str, Any]:
    """Fold events into text/thinking/calls/parts, checking the block grammar on the way."""
    open_blocks: dict[int, BlockStart] = {}
    deltas: dict[int, list[str]] = {}
    seen: list[int] = []
    parts: list[Part] = []
    usage: Usage | None = None
    stops: list[Stop] = []
    for event in events:
        assert not stops, f"event after Stop: {event}"
        if isinstance(event, BlockStart):
            assert event.index not in seen, "block index reused"
            assert event.index == len(seen), "blocks are numbered 0, 1, 2, ..."
            seen.append(event.index)
            open_blocks[event.index] = event
            deltas[event.index] = []
        elif isinstance(event, BlockDelta):
            assert event.index in open_blocks
            deltas[event.index].append(event.delta)
        elif isinstance(event, BlockEnd):
            start = open_blocks.pop(event.index)
            assert event.part.type == start.kind
            joined = "".join(deltas[event.index])
            if start.kind == "tool_call":
                assert json.loads(joined) == event.part.arguments
                assert (event.part.call_id, event.part.name) == (start.call_id, start.name)
            else:
                assert joined == event.part.text
            parts.append(event.part)
        elif isinstance(event, UsageUpdate):
            usage = event.usage
        elif isinstance(event, Stop):
            stops.append(event)
    assert not open_blocks, "every block ends"
    return {
        "text": "".join(p.text for p in parts if p.type == "text"),
        "thinking": "".join(p.text for p in parts if p.type == "thinking"),
        "calls": [p for p in parts if p.type == "tool_call"],
        "parts": parts,
        "signed": signed_pieces(parts),
        "usage": usage,
        "stop": stops[0] if stops else None,
    }


def signed_pieces(parts: list[Part]) -> list[tuple[str, str, str]]:
    """(kind, text, signature) of every signed wire part the blocks were assembled from."""
    signed = []
    for part in parts:
        pieces = pieces_of(part) or [(part.text, part.type, part.signature)]
        signed += [(kind, text, sig) for text, kind, sig in pieces if sig is not None]
    return signed


def shared_meaning(raw: dict[str, Any]) -> Usage:
    """A fixture's usage in ponder's meaning: Gemini's candidatesTokenCount (the fixture's
    output_tokens) leaves out thoughtsTokenCount, Usage.output_tokens includes it."""
    return Usage(**{**raw, "output_tokens": raw["output_tokens"] + (raw["reasoning_tokens"] or 0)})


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)


def chunk(parts: list[dict[str, Any]], finish: str | None = None, **usage: int) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 5, **usage},
        "responseId": "resp-synthetic",
    }


def sse_response(body: bytes, status: int = 200) -> ScriptedResponse:
    return ScriptedResponse(status=status, headers={"content-type": "text/event-stream"}, body=body)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def turn2_history(turn1_parts: list[Part]) -> list[ChatMessage]:
    """User prompt, the model turn as the agent stores it, then both tool results."""
    calls = [p for p in turn1_parts if p.type == "tool_call"]
    return [
        user("What's the weather in Paris and London?"),
        message("assistant", *turn1_parts),
        message("tool", tool_result(calls[0].call_id or "", {"city": "Paris", "temp_c": 18, "conditions": "sunny"})),
        message("tool", tool_result(calls[1].call_id or "", {"city": "London", "temp_c": 12, "conditions": "drizzle"})),
    ]


def stored_turn1_parts() -> list[Part]:
    """function-call-signature's model turn as stored parts (from its meta, independent of the parser)."""
    meta, _ = load_fixture("gemini", "function-call-signature")
    expected = meta["expected"]
    common = {"provider": PROVIDER, "model": PRO}
    return [
        Part(type="thinking", text=expected["thinking"], **common),
        Part(type="text", text=expected["text"], **common),
        *[
            Part(
                type="tool_call",
                call_id=f"call-{i}",
                name=c["name"],
                arguments=c["arguments"],
                signature=c["thought_signature"],
                **common,
            )
            for i, c in enumerate(expected["tool_calls"])
        ],
    ]


# --------------------------------------------------------------------------- every fixture

# A short pause after each chunk so the client really reads the cuts one by one (without
# it the kernel coalesces most of them). Every fixture is cut at its UTF-8 offsets plus
# every 5 bytes; one is cut at every byte.
PACE_S = 0.0002
SPLITS = {
    "utf8+every5": {"split_every": 5, "chunk_delay_s": PACE_S},
    "every-byte": {"split_every": 1, "chunk_delay_s": PACE_S},
}
FIXTURES = ("thoughts-text-signature", "function-call-signature", "function-call-signature-turn2")
CASES = [(name, "utf8+every5") for name in FIXTURES] + [("thoughts-text-signature", "every-byte")]


def fixture_case_request(name: str, model: str) -> ProviderRequest:
    if name == "function-call-signature-turn2":
        return request_from_fixture(name, model, turn2_history(stored_turn1_parts()))
    return request_from_fixture(name, model)


@pytest.mark.parametrize(("name", "split"), CASES)
async def test_fixture_replay(replay_server: ReplayServer, name: str, split: str) -> None:
    meta = replay_server.enqueue_fixture("gemini", name, **SPLITS[split])
    expected = meta["expected"]
    model = expected["model"]
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, fixture_case_request(name, model)))
    finally:
        await adapter.aclose()

    assert result["thinking"] == expected["thinking"]
    assert result["text"] == expected["text"]
    assert [(c.name, c.arguments, c.signature) for c in result["calls"]] == [
        (c["name"], c["arguments"], c["thought_signature"]) for c in expected["tool_calls"]
    ]
    assert [sig for _, _, sig in result["signed"]] == [s["signature"] for s in expected["thought_signatures"]]
    for (kind, text, _), sig in zip(result["signed"], expected["thought_signatures"], strict=True):
        assert kind == {"functionCall": "tool_call", "text(empty)": "text"}.get(sig["part_kind"], sig["part_kind"])
        if kind == "text":
            assert (text == "") == (sig["part_kind"] == "text(empty)")
    # Clients see one block per contiguous run, never an empty one.
    assert all(p.text for p in result["parts"] if p.type == "text")
    kinds = [p.type for p in result["parts"]]
    assert all(a != b for a, b in itertools.pairwise(kinds) if a != "tool_call")
    assert all((p.provider, p.model) == (PROVIDER, model) for p in result["parts"])
    assert result["usage"] == shared_meaning(expected["usage"])
    assert result["stop"] is not None and result["stop"].raw == expected["stop_reason"]
    assert result["stop"].reason == ("tool_use" if expected["tool_calls"] else STOP_KINDS[expected["stop_reason"]])

    (sent,) = replay_server.requests
    assert sent.method == "POST"
    assert sent.path == f"/v1beta/models/{model}:streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == FAKE_KEY
    assert sent.headers["content-type"] == "application/json"
    assert FAKE_KEY not in sent.path
    assert sent.json() == fixture_request("gemini", name)


async def test_call_ids_are_stable_and_distinct(replay_server: ReplayServer) -> None:
    ids = []
    for _ in range(2):
        replay_server.enqueue_fixture("gemini", "function-call-signature", split_every=7)
        adapter = make_adapter(replay_server.url)
        try:
            result = summarize(await collect(adapter, request_from_fixture("function-call-signature", PRO)))
        finally:
            await adapter.aclose()
        ids.append([c.call_id for c in result["calls"]])
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 2 and all(ids[0])
    assert all("JBBFiWWX9AyuDkg6HIiicgg" in i for i in ids[0])  # derived from the response id


# --------------------------------------------------------------------------- round trips


async def test_trailing_signature_part_is_stored_and_sent_back_on_that_part(replay_server: ReplayServer) -> None:
    meta = replay_server.enqueue_fixture("gemini", "thoughts-text-signature", split_every=5)
    adapter = make_adapter(replay_server.url)
    try:
        first = request_from_fixture("thoughts-text-signature", FLASH)
        result = summarize(await collect(adapter, first))
        # Gemini 3 ends the answer with an empty part carrying the signature: clients see
        # the thoughts and one answer block; the empty signed part is kept on that block.
        expected = meta["expected"]
        thinking, text = result["parts"]
        assert (thinking.type, thinking.text, thinking.signature) == ("thinking", expected["thinking"], None)
        assert (text.type, text.text, text.signature) == ("text", expected["text"], None)
        (signature,) = [s["signature"] for s in expected["thought_signatures"]]
        assert text.provider_data == {"parts": [{"chars": len(expected["text"])}, {"chars": 0, "signature": signature}]}
        assert text.to_block() == TextBlock(text=expected["text"])
        replay_server.enqueue(sse_response(sse(chunk([{"text": "Yes."}], "STOP"))))
        follow_up = ProviderRequest(
            provider=PROVIDER,
            model=FLASH,
            thinking=first.thinking,
            messages=[*first.messages, message("assistant", *result["parts"]), user("Is it French?")],
        )
        await collect(adapter, follow_up)
    finally:
        await adapter.aclose()
    contents = replay_server.requests[1].json()["contents"]
    assert contents[1] == meta["expected"]["model_content_for_roundtrip"]
    assert contents[2] == {"role": "user", "parts": [{"text": "Is it French?"}]}


async def test_function_call_signature_round_trip_matches_turn2_body(replay_server: ReplayServer) -> None:
    meta = replay_server.enqueue_fixture("gemini", "function-call-signature", split_every=5)
    replay_server.enqueue_fixture("gemini", "function-call-signature-turn2", split_every=5)
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, request_from_fixture("function-call-signature", PRO)))
        assert result["stop"] == Stop(reason="tool_use", raw="STOP")
        second = request_from_fixture("function-call-signature-turn2", PRO, turn2_history(result["parts"]))
        answer = summarize(await collect(adapter, second))
    finally:
        await adapter.aclose()
    body = replay_server.requests[1].json()
    assert body == fixture_request("gemini", "function-call-signature-turn2")
    assert body["contents"][1] == meta["expected"]["model_content_for_roundtrip"]
    assert answer["stop"] == Stop(reason="end_turn", raw="STOP")


async def test_tool_results_in_one_message_make_the_same_body(replay_server: ReplayServer) -> None:
    parts = stored_turn1_parts()
    history = turn2_history(parts)
    history[2:] = [message("tool", *history[2].parts, *history[3].parts)]
    replay_server.enqueue_fixture("gemini", "function-call-signature-turn2")
    adapter = make_adapter(replay_server.url)
    try:
        await collect(adapter, request_from_fixture("function-call-signature-turn2", PRO, history))
    finally:
        await adapter.aclose()
    assert replay_server.requests[0].json() == fixture_request("gemini", "function-call-signature-turn2")


async def test_signatures_are_not_sent_to_another_model(replay_server: ReplayServer) -> None:
    signed_text = [
        Part(type="text", text="Crème brûlée.", provider=PROVIDER, model=PRO),
        Part(type="text", text="", provider=PROVIDER, model=PRO, signature="SIG-TEXT"),
    ]
    replay_server.enqueue(sse_response(sse(chunk([{"text": "ok"}], "STOP"))))
    history = [
        user("Which dessert?"),
        message("assistant", *signed_text),
        *turn2_history(stored_turn1_parts()),
    ]
    adapter = make_adapter(replay_server.url)
    try:
        await collect(
            adapter,
            ProviderRequest(provider=PROVIDER, model=FLASH, thinking=thinking({}), messages=history),
        )
    finally:
        await adapter.aclose()
    contents = replay_server.requests[0].json()["contents"]
    sent = json.dumps(contents)
    assert "SIG-TEXT" not in sent
    for call in stored_turn1_parts():
        if call.signature:
            assert call.signature not in sent
    # the empty part existed only to carry the signature, so it goes too
    assert contents[1] == {"role": "model", "parts": [{"text": "Crème brûlée."}]}
    # calls from another model in the current turn get Google's documented stand-in
    assert contents[3]["parts"][1] == {
        "functionCall": {"name": "get_weather", "args": {"city": "Paris", "unit": "celsius"}},
        "thoughtSignature": DUMMY_SIGNATURE,
    }
    assert "thoughtSignature" not in contents[3]["parts"][2]


async def test_same_model_other_provider_name_is_not_replayed(replay_server: ReplayServer) -> None:
    foreign = Part(type="text", text="hi", provider="vertex", model=FLASH, signature="SIG-VERTEX")
    replay_server.enqueue(sse_response(sse(chunk([{"text": "ok"}], "STOP"))))
    adapter = make_adapter(replay_server.url)
    try:
        request = ProviderRequest(
            provider=PROVIDER,
            model=FLASH,
            thinking=thinking({}),
            messages=[user("a"), message("assistant", foreign), user("b")],
        )
        await collect(adapter, request)
    finally:
        await adapter.aclose()
    assert replay_server.requests[0].json()["contents"][1] == {"role": "model", "parts": [{"text": "hi"}]}


async def test_previous_turn_calls_get_no_stand_in_signature(replay_server: ReplayServer) -> None:
    foreign_call = Part(
        type="tool_call",
        call_id="toolu_1",
        name="get_weather",
        arguments={"city": "Oslo"},
        provider="anthropic",
        model="claude-sonnet-4-5",
    )
    history = [
        user("Weather in Oslo?"),
        message("assistant", foreign_call),
        message("tool", Part(type="tool_result", call_id="toolu_1", text="cold")),
        message("assistant", Part(type="text", text="It is cold.", provider="anthropic", model="claude-sonnet-4-5")),
        user("And now?"),
    ]
    replay_server.enqueue(sse_response(sse(chunk([{"text": "ok"}], "STOP"))))
    adapter = make_adapter(replay_server.url)
    try:
        await collect(adapter, ProviderRequest(provider=PROVIDER, model=FLASH, thinking=thinking({}), messages=history))
    finally:
        await adapter.aclose()
    assert replay_server.requests[0].json()["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "cold"}}}]},
        {"role": "model", "parts": [{"text": "It is cold."}]},
        {"role": "user", "parts": [{"text": "And now?"}]},
    ]


async def test_signature_on_a_thought_part_goes_back_on_that_part(replay_server: ReplayServer) -> None:
    # Gemini 2.5 puts the signature on the first part, which may be a thought summary.
    body = sse(
        chunk(
            [{"text": "Thinking about it.", "thought": True, "thoughtSignature": "SIG-THOUGHT"}], thoughtsTokenCount=4
        ),
        chunk(
            [{"functionCall": {"name": "lookup", "args": {}, "id": "fc-42"}}],
            "STOP",
            candidatesTokenCount=3,
            thoughtsTokenCount=4,
        ),
    )
    replay_server.enqueue(sse_response(body))
    replay_server.enqueue(sse_response(sse(chunk([{"text": "done"}], "STOP"))))
    adapter = make_adapter(replay_server.url)
    model = "gemini-2.5-flash"
    try:
        first = ProviderRequest(provider=PROVIDER, model=model, thinking=thinking({}), messages=[user("go")])
        result = summarize(await collect(adapter, first))
        (call,) = result["calls"]
        assert call.call_id == "fc-42" and call.arguments == {}
        # candidatesTokenCount 3 plus thoughtsTokenCount 4
        assert result["usage"] == Usage(input_tokens=5, output_tokens=7, reasoning_tokens=4)
        second = ProviderRequest(
            provider=PROVIDER,
            model=model,
            thinking=first.thinking,
            messages=[
                *first.messages,
                message("assistant", *result["parts"]),
                message("tool", Part(type="tool_result", call_id="fc-42", text="[1, 2]")),
            ],
        )
        await collect(adapter, second)
    finally:
        await adapter.aclose()
    assert replay_server.requests[1].json()["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "Thinking about it.", "thought": True, "thoughtSignature": "SIG-THOUGHT"},
                {"functionCall": {"name": "lookup", "args": {}, "id": "fc-42"}},
            ],
        },
        # the call's id goes back on its response too
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "lookup", "response": {"output": [1, 2]}, "id": "fc-42"}}],
        },
    ]


# --------------------------------------------------------------------------- request bodies


@pytest.mark.parametrize(
    "params",
    [
        {"generationConfig": {"thinkingConfig": {"thinkingBudget": 8192, "includeThoughts": True}}},
        {"generationConfig": {"thinkingConfig": {"thinkingLevel": "medium", "includeThoughts": True}}},
        {},
    ],
    ids=["budget", "level", "none"],
)
async def test_thinking_params_system_prompt_tools_and_limit(replay_server: ReplayServer, params: dict) -> None:
    replay_server.enqueue(sse_response(sse(chunk([{"text": "ok"}], "STOP"))))
    adapter = make_adapter(replay_server.url)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}}
    try:
        await collect(
            adapter,
            ProviderRequest(
                provider=PROVIDER,
                model="gemini-2.5-flash",
                thinking=thinking(params),
                messages=[user("Hi")],
                system_prompt="Be brief.",
                tools=[ToolSpec(name="noop", description="Does nothing.", input_schema=schema)],
                max_output_tokens=1000,
            ),
        )
    finally:
        await adapter.aclose()
    generation = {"maxOutputTokens": 1000, **params.get("generationConfig", {})}
    assert replay_server.requests[0].json() == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "noop", "description": "Does nothing.", "parameters": {"type": "object", "properties": {}}}
                ]
            }
        ],
        "generationConfig": generation,
    }


# --------------------------------------------------------------------------- stop reasons


@pytest.mark.parametrize(
    ("finish", "kind"),
    [
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "refusal"),
        ("RECITATION", "refusal"),
        ("PROHIBITED_CONTENT", "refusal"),
        ("OTHER", "end_turn"),
    ],
)
async def test_finish_reasons(replay_server: ReplayServer, finish: str, kind: str) -> None:
    replay_server.enqueue(sse_response(sse(chunk([{"text": "partial"}]), chunk([{"text": ""}], finish))))
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, request_from_fixture("rate-limit-429", FLASH)))
    finally:
        await adapter.aclose()
    assert result["stop"] == Stop(reason=kind, raw=finish)  # type: ignore[arg-type]
    assert result["text"] == "partial"


async def test_blocked_prompt_is_a_refusal(replay_server: ReplayServer) -> None:
    body = sse({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 7}})
    replay_server.enqueue(sse_response(body))
    adapter = make_adapter(replay_server.url)
    try:
        result = summarize(await collect(adapter, request_from_fixture("rate-limit-429", FLASH)))
    finally:
        await adapter.aclose()
    assert result["stop"] == Stop(reason="refusal", raw="PROHIBITED_CONTENT")
    assert result["parts"] == []


async def test_malformed_function_call_is_a_retryable_error(replay_server: ReplayServer) -> None:
    replay_server.enqueue(sse_response(sse(chunk([], "MALFORMED_FUNCTION_CALL"))))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "MALFORMED_FUNCTION_CALL"


async def test_stream_cut_before_finish_reason_is_retryable(replay_server: ReplayServer) -> None:
    replay_server.enqueue(sse_response(sse(chunk([{"text": "half an ans"}]))))
    adapter = make_adapter(replay_server.url)
    seen: list[ProviderEvent] = []
    try:
        with pytest.raises(ProviderError) as caught:
            async with adapter.stream(request_from_fixture("rate-limit-429", FLASH)) as events:
                async for event in events:
                    seen.append(event)
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "incomplete_stream"
    assert BlockDelta(index=0, delta="half an ans") in seen


async def test_error_frame_inside_the_stream(replay_server: ReplayServer) -> None:
    overloaded = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    body = sse(chunk([{"text": "Hel"}])) + sse(overloaded)
    replay_server.enqueue(sse_response(body))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.status == 503 and caught.value.kind == "UNAVAILABLE"
    assert "overloaded" in caught.value.message


async def test_leaving_early_closes_the_stream_cleanly(replay_server: ReplayServer) -> None:
    _, body = load_fixture("gemini", "thoughts-text-signature")
    slow = ScriptedResponse(
        headers={"content-type": "text/event-stream"}, body=body, split_at=[700, 1400], chunk_delay_s=0.5
    )
    replay_server.enqueue(slow)
    replay_server.enqueue(slow)
    adapter = make_adapter(replay_server.url)
    try:
        async with adapter.stream(request_from_fixture("thoughts-text-signature", FLASH)) as events:
            async for event in events:
                if isinstance(event, BlockDelta):
                    break
        with anyio.move_on_after(0.1):  # and once more, cancelled while waiting for bytes
            await collect(adapter, request_from_fixture("thoughts-text-signature", FLASH))
    finally:
        await adapter.aclose()
    gc.collect()  # an abandoned body reader would warn here (filterwarnings = error)
    await anyio.lowlevel.checkpoint()


# --------------------------------------------------------------------------- HTTP errors


async def test_rate_limit_429_uses_retry_info(replay_server: ReplayServer) -> None:
    meta = replay_server.enqueue_fixture("gemini", "rate-limit-429", split_every=5)
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    expected = meta["expected"]["error"]
    error = caught.value
    assert type(error) is ProviderError
    assert error.status == expected["http_status"]
    assert error.retryable is expected["retryable"]
    assert error.retry_after == expected["retry_after_seconds"]
    assert error.kind == expected["type"]
    assert FAKE_KEY not in error.message
    assert replay_server.requests[0].json() == fixture_request("gemini", "rate-limit-429")


async def test_retry_after_header_wins_over_retry_info(replay_server: ReplayServer) -> None:
    _, body = load_fixture("gemini", "rate-limit-429")
    replay_server.enqueue(ScriptedResponse(status=429, headers={"retry-after": "3"}, body=body))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    assert caught.value.retry_after == 3.0


def gemini_error(code: int, status: str, message: str, **extra: Any) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "status": status, **extra}}).encode()


@pytest.mark.parametrize(
    ("status", "body", "error_type", "retryable"),
    [
        (401, gemini_error(401, "UNAUTHENTICATED", "Invalid authentication credentials."), ProviderAuthError, False),
        (
            403,
            gemini_error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."),
            ProviderAuthError,
            False,
        ),
        (
            400,
            gemini_error(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                details=[{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
            ),
            ProviderAuthError,
            False,
        ),
        (404, gemini_error(404, "NOT_FOUND", "models/gemini-9 is not found."), ProviderModelNotFound, False),
        (400, gemini_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received."), ProviderError, False),
        (500, gemini_error(500, "INTERNAL", "An internal error has occurred."), ProviderError, True),
        (
            503,
            gemini_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
            ProviderError,
            True,
        ),
    ],
)
async def test_http_errors(
    replay_server: ReplayServer, status: int, body: bytes, error_type: type, retryable: bool
) -> None:
    replay_server.enqueue(ScriptedResponse(status=status, headers={"content-type": "application/json"}, body=body))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    error = caught.value
    assert type(error) is error_type
    assert error.status == status and error.retryable is retryable and error.provider == PROVIDER
    assert FAKE_KEY not in error.message
    if error_type is ProviderAuthError:
        assert "GEMINI_API_KEY or GOOGLE_API_KEY" in error.message


async def test_error_body_echoing_the_key_is_masked(replay_server: ReplayServer) -> None:
    body = gemini_error(400, "INVALID_ARGUMENT", f"Bad request for key {FAKE_KEY}.")
    replay_server.enqueue(ScriptedResponse(status=400, headers={"content-type": "application/json"}, body=body))
    adapter = make_adapter(replay_server.url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    assert FAKE_KEY not in caught.value.message and "***" in caught.value.message


async def test_connection_dropped_mid_body_is_retryable(replay_server: ReplayServer) -> None:
    _, body = load_fixture("gemini", "thoughts-text-signature")
    cut = body[:1200]  # two whole events, then the server hangs up early
    replay_server.enqueue(
        ScriptedResponse(headers={"content-type": "text/event-stream"}, body=cut, content_length=len(body))
    )
    adapter = make_adapter(replay_server.url)
    seen: list[ProviderEvent] = []
    try:
        with pytest.raises(ProviderError) as caught:
            async with adapter.stream(request_from_fixture("thoughts-text-signature", FLASH)) as events:
                async for event in events:
                    seen.append(event)
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "connection_error"
    assert "mid-stream" in caught.value.message
    assert any(isinstance(e, BlockDelta) for e in seen)


async def test_missing_key_fails_before_any_request(replay_server: ReplayServer) -> None:
    adapter = make_adapter(replay_server.url, key=None)
    with pytest.raises(ProviderAuthError, match="GEMINI_API_KEY"):
        await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    assert replay_server.requests == []


async def test_unreachable_server_is_a_retryable_connection_error() -> None:
    adapter = make_adapter(closed_port_url())
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(adapter, request_from_fixture("rate-limit-429", FLASH))
    finally:
        await adapter.aclose()
    assert caught.value.retryable and caught.value.kind == "connection_error"
    assert time.monotonic() - started < 5


def test_parse_duration() -> None:
    assert parse_duration("34s") == 34.0
    assert parse_duration("0.5s") == 0.5
    assert parse_duration("34.4s") == 34.4
    assert parse_duration("soon") is None
    assert parse_duration(None) is None


# --------------------------------------------------------------------------- ponder's own fixtures


def tool_from(meta: dict[str, Any]) -> list[ToolSpec]:
    declarations = [d for group in meta.get("request", {}).get("tools", []) for d in group["functionDeclarations"]]
    declarations = declarations or [
        {"name": "get_weather", "description": "Get the current weather for a city.", "parameters": {"type": "object"}}
    ]
    return [ToolSpec(name=d["name"], description=d["description"], input_schema=d["parameters"]) for d in declarations]


async def test_parallel_calls_of_one_function_pair_by_id(replay_server: ReplayServer) -> None:
    """Gemini 3 ids go back on each functionCall and on the functionResponse answering it,
    whatever order the results were stored in."""
    meta = enqueue_local(replay_server, "gemini", "gemini3-parallel-call-ids")
    replay_server.enqueue(sse_response(sse(chunk([{"text": "Oslo 3°C, Bergen 7°C."}], "STOP"))))
    expected = meta["expected"]
    adapter = make_adapter(replay_server.url)
    try:
        first = ProviderRequest(
            provider=PROVIDER,
            model=expected["model"],
            thinking=thinking({}),
            messages=[user("Oslo and Bergen?")],
            tools=tool_from(meta),
        )
        result = summarize(await collect(adapter, first))
        assert [(c.call_id, c.name, c.arguments, c.signature) for c in result["calls"]] == [
            (c["id"], c["name"], c["arguments"], c["thought_signature"]) for c in expected["tool_calls"]
        ]
        assert result["usage"] == Usage(**expected["usage"])
        oslo, bergen = result["calls"]
        # the results come back in the other order: they must still pair by id
        results = message(
            "tool",
            tool_result(bergen.call_id or "", {"city": "Bergen", "temp_c": 7}),
            tool_result(oslo.call_id or "", {"city": "Oslo", "temp_c": 3}),
        )
        second = ProviderRequest(
            provider=PROVIDER,
            model=expected["model"],
            thinking=first.thinking,
            tools=first.tools,
            messages=[*first.messages, message("assistant", *result["parts"]), results],
        )
        await collect(adapter, second)
    finally:
        await adapter.aclose()
    contents = replay_server.requests[1].json()["contents"]
    assert contents[1] == expected["model_content_for_roundtrip"]
    ids = [c["id"] for c in expected["tool_calls"]]
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"city": "Bergen", "temp_c": 7}, "id": ids[1]}},
            {"functionResponse": {"name": "get_weather", "response": {"city": "Oslo", "temp_c": 3}, "id": ids[0]}},
        ],
    }


async def test_call_ids_do_not_go_to_another_model(replay_server: ReplayServer) -> None:
    meta = enqueue_local(replay_server, "gemini", "gemini3-parallel-call-ids")
    replay_server.enqueue(sse_response(sse(chunk([{"text": "ok"}], "STOP"))))
    adapter = make_adapter(replay_server.url)
    try:
        prompt = [user("Oslo and Bergen?")]
        first = ProviderRequest(provider=PROVIDER, model=FLASH, thinking=thinking({}), messages=prompt)
        result = summarize(await collect(adapter, first))
        results = message("tool", *(tool_result(c.call_id or "", {"ok": True}) for c in result["calls"]))
        other = ProviderRequest(
            provider=PROVIDER,
            model=PRO,
            thinking=first.thinking,
            messages=[*first.messages, message("assistant", *result["parts"]), results],
        )
        await collect(adapter, other)
    finally:
        await adapter.aclose()
    sent = json.dumps(replay_server.requests[1].json())
    assert meta["expected"]["tool_calls"][0]["id"] not in sent and '"id"' not in sent


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("gemini25-signed-first-answer-part", ["text", "tool_call"]),
        ("gemini25-signed-first-thought-part", ["thinking", "text", "tool_call"]),
    ],
)
async def test_signature_mid_block_shows_one_block_and_goes_back_as_it_came(
    replay_server: ReplayServer, name: str, kinds: list[str]
) -> None:
    """Gemini 2.5 signs the first part, mid-sentence: clients see one block per run (events
    and Message.content); the next request carries every part exactly as it arrived."""
    meta = enqueue_local(replay_server, "gemini", name, split_every=3)
    replay_server.enqueue(sse_response(sse(chunk([{"text": "It is mild."}], "STOP"))))
    expected = meta["expected"]
    adapter = make_adapter(replay_server.url)
    try:
        first = ProviderRequest(
            provider=PROVIDER,
            model=expected["model"],
            thinking=thinking({}),
            messages=[user("Weather in Lyon?")],
            tools=tool_from(meta),
        )
        events = await collect(adapter, first)
        result = summarize(events)
        assert [e.kind for e in events if isinstance(e, BlockStart)] == kinds
        assert (result["thinking"], result["text"]) == (expected["thinking"], expected["text"])
        assert result["usage"] == Usage(**expected["usage"])
        reply = message("assistant", *result["parts"])
        content = reply.to_wire().content
        assert [b for b in content if isinstance(b, TextBlock)] == [TextBlock(text=expected["text"])]
        results = message("tool", tool_result(result["calls"][0].call_id or "", {"temp_c": 14}))
        second = ProviderRequest(
            provider=PROVIDER,
            model=expected["model"],
            thinking=first.thinking,
            tools=first.tools,
            messages=[*first.messages, reply, results],
        )
        await collect(adapter, second)
    finally:
        await adapter.aclose()
    contents = replay_server.requests[1].json()["contents"]
    assert contents[1] == expected["model_content_for_roundtrip"]
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp_c": 14}}}],
    }


async def test_empty_signed_part_after_thoughts_opens_no_block(replay_server: ReplayServer) -> None:
    """An empty signed part with no answer before it rides on the thinking block (as a text
    part of its own), never as an empty text block."""
    body = sse(
        chunk([{"text": "Nothing to add.", "thought": True}], thoughtsTokenCount=5),
        chunk([{"text": "", "thoughtSignature": "SIG-END"}], "STOP", thoughtsTokenCount=5),
    )
    replay_server.enqueue(sse_response(body))
    replay_server.enqueue(sse_response(sse(chunk([{"text": "ok"}], "STOP"))))
    adapter = make_adapter(replay_server.url)
    try:
        first = ProviderRequest(provider=PROVIDER, model=FLASH, thinking=thinking({}), messages=[user("Say nothing.")])
        events = await collect(adapter, first)
        assert [e.kind for e in events if isinstance(e, BlockStart)] == ["thinking"]
        (part,) = summarize(events)["parts"]
        second = ProviderRequest(
            provider=PROVIDER,
            model=FLASH,
            thinking=first.thinking,
            messages=[*first.messages, message("assistant", part), user("Fine.")],
        )
        await collect(adapter, second)
    finally:
        await adapter.aclose()
    assert replay_server.requests[1].json()["contents"][1] == {
        "role": "model",
        "parts": [{"text": "", "thoughtSignature": "SIG-END"}],
    }
