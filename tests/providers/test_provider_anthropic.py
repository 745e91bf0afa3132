"""The Anthropic adapter against a real HTTP server on 127.0.0.1 replaying the shared fixtures.

Every fixture in ``fixtures/anthropic`` is streamed split at its UTF-8 offsets and every 7
bytes (one also byte by byte); the normalized events are checked against the fixture's
``meta.expected`` and the request the adapter sent against the fixture's request body.
Then the round trips (signed thinking, redacted thinking, signature-only blocks), the
thinking request fragments per level, ``adjust_thinking``, and the error paths.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import pytest

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderAuthError, ProviderError
from daemon.models.budgets import BASE_MAX_TOKENS
from daemon.providers.anthropic import (
    INTERLEAVED_THINKING_BETA,
    AnthropicProvider,
    StreamParser,
    build_messages,
)
from daemon.providers.base import (
    BlockDelta,
    BlockEnd,
    BlockStart,
    KeepAlive,
    ProviderEvent,
    ProviderRequest,
    Stop,
    ToolSpec,
    UsageUpdate,
)
from daemon.util.secret import Secret
from protocol.objects import Thinking, Usage
from tests.support.provider_streams import enqueue_local
from tests.support.replay import ReplayServer, ScriptedResponse, fixture_request, fixtures_dir, load_fixture

FAKE_KEY = "sk-ant-test-FAKE-0123456789"
LEVELS = ["off", "minimal", "low", "medium", "high", "max"]
SONNET_45 = "claude-sonnet-4-5-20250929"
OPUS_46 = "claude-opus-4-6"
OPUS_47 = "claude-opus-4-7"
ADAPTIVE_WIRE = {"type": "adaptive", "display": "summarized"}


# -- building requests -------------------------------------------------------------------


def thinking_off() -> Thinking:
    return Thinking(
        requested="off", effective="off", supported=LEVELS, reason=None, budget_tokens=None, request_params={}
    )


def budget(level: str, budget_tokens: int, max_tokens: int) -> Thinking:
    return Thinking(
        requested=level,  # type: ignore[arg-type]
        effective=level,  # type: ignore[arg-type]
        supported=LEVELS,
        reason=None,
        budget_tokens=budget_tokens,
        request_params={"max_tokens": max_tokens, "thinking": {"type": "enabled", "budget_tokens": budget_tokens}},
    )


def adaptive(level: str, effort: str) -> Thinking:
    return Thinking(
        requested=level,  # type: ignore[arg-type]
        effective=level,  # type: ignore[arg-type]
        supported=LEVELS,
        reason=None,
        budget_tokens=None,
        request_params={"thinking": dict(ADAPTIVE_WIRE), "output_config": {"effort": effort}},
    )


_seq = iter(range(1, 1_000_000))


def msg(role: str, *parts: Part) -> ChatMessage:
    n = next(_seq)
    return ChatMessage(message_id=f"m{n}", session_id="s1", seq=n, role=role, parts=list(parts))  # type: ignore[arg-type]


def user(text: str) -> ChatMessage:
    return msg("user", Part(type="text", text=text))


def tool_result(call_id: str, text: str, is_error: bool = False) -> ChatMessage:
    return msg("tool", Part(type="tool_result", call_id=call_id, text=text, is_error=is_error))


def request(model: str, thinking: Thinking, messages: list[ChatMessage], **kw: Any) -> ProviderRequest:
    return ProviderRequest(provider="anthropic", model=model, thinking=thinking, messages=messages, **kw)


def weather_tool() -> ToolSpec:
    spec = fixture_request("anthropic", "adaptive-thinking-tool-use")["tools"][0]
    return ToolSpec(name=spec["name"], description=spec["description"], input_schema=spec["input_schema"])


def part_from_wire(block: dict[str, Any], model: str) -> Part:
    """A stored Part as the adapter would have produced it for ``block`` of ``model``."""
    if block["type"] == "thinking":
        return Part(
            type="thinking", text=block["thinking"], signature=block["signature"], provider="anthropic", model=model
        )
    if block["type"] == "redacted_thinking":
        return Part(
            type="thinking", redacted=True, provider="anthropic", model=model, provider_data={"data": block["data"]}
        )
    if block["type"] == "tool_use":
        return Part(type="tool_call", call_id=block["id"], name=block["name"], arguments=block["input"])
    return Part(type="text", text=block["text"])


def wire_from_part(part: Part) -> dict[str, Any]:
    """A produced Part in the shape of ``meta.expected.blocks``."""
    if part.type == "thinking" and part.redacted:
        return {"type": "redacted_thinking", "data": (part.provider_data or {})["data"]}
    if part.type == "thinking":
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    if part.type == "tool_call":
        return {"type": "tool_use", "id": part.call_id, "name": part.name, "input": part.arguments}
    return {"type": "text", "text": part.text}


UMBRELLA = "Should I bring an umbrella in Lyon today?"
WEATHER_RESULT = '{"city":"Lyon","temp_c":14,"conditions":"light rain","precip_chance_pm":0.8}'


def turn1_history() -> list[ChatMessage]:
    """The stored history after turn 1 of the umbrella tool loop, built from the fixture meta."""
    meta, _ = load_fixture("anthropic", "adaptive-thinking-tool-use")
    blocks = meta["expected"]["assistant_message_for_roundtrip"]["content"]
    call_id = meta["expected"]["tool_calls"][0]["id"]
    return [
        user(UMBRELLA),
        msg("assistant", *[part_from_wire(b, OPUS_46) for b in blocks]),
        tool_result(call_id, WEATHER_RESULT),
    ]


def first_user_text(name: str) -> str:
    return fixture_request("anthropic", name)["messages"][0]["content"]


def fixture_case(name: str) -> ProviderRequest:
    """The ProviderRequest that should produce ``<name>.request.json``."""
    if name == "thinking-text":
        return request(SONNET_45, budget("medium", 10000, 16000), [user(first_user_text(name))])
    if name == "redacted-thinking":
        return request(SONNET_45, budget("low", 4000, 8000), [user(first_user_text(name))])
    if name in ("rate-limit-429", "overloaded-529"):
        return request(SONNET_45, budget("medium", 10000, 16000), [user("Summarise the attached 40-page report.")])
    if name == "overloaded-midstream":
        text = "Give me a quick overview of the branches of the French government."
        return request(SONNET_45, thinking_off(), [user(text)], max_output_tokens=2048)
    if name == "adaptive-thinking-tool-use":
        history = [user(UMBRELLA)]
        return request(OPUS_46, adaptive("medium", "medium"), history, tools=[weather_tool()], max_output_tokens=16000)
    if name == "adaptive-thinking-tool-use-turn2":
        history = turn1_history()
        return request(OPUS_46, adaptive("medium", "medium"), history, tools=[weather_tool()], max_output_tokens=16000)
    if name == "adaptive-display-omitted":
        return request(OPUS_47, adaptive("high", "high"), [user("What is 27 * 453?")])
    raise AssertionError(f"no request built for fixture {name}")


def expected_body(name: str) -> dict[str, Any]:
    body = fixture_request("anthropic", name)
    if body.get("thinking", {}).get("type") == "adaptive":
        # The fixtures write adaptive thinking as {"type": "adaptive"}; the catalog's fragment
        # also asks for summarized display (the default on Opus 4.6, and what makes Opus 4.7
        # show thinking text). Everything else must match byte for byte.
        assert body["thinking"] == {"type": "adaptive"}
        body["thinking"] = dict(ADAPTIVE_WIRE)
    return body


FIXTURES = [
    "thinking-text",
    "adaptive-thinking-tool-use",
    "adaptive-thinking-tool-use-turn2",
    "adaptive-display-omitted",
    "redacted-thinking",
    "overloaded-midstream",
    "rate-limit-429",
    "overloaded-529",
]


def test_every_anthropic_fixture_is_covered() -> None:
    names = {p.name.removesuffix(".meta.json") for p in (fixtures_dir() / "anthropic").glob("*.meta.json")}
    assert names == set(FIXTURES)


# -- running the adapter -----------------------------------------------------------------


@dataclass
class Outcome:
    events: list[ProviderEvent]
    error: ProviderError | None

    def ends(self) -> list[Part]:
        return [e.part for e in self.events if isinstance(e, BlockEnd)]

    def streamed(self, kind: str) -> str:
        """Concatenated deltas of every block of ``kind``."""
        indexes = {e.index for e in self.events if isinstance(e, BlockStart) and e.kind == kind}
        return "".join(e.delta for e in self.events if isinstance(e, BlockDelta) and e.index in indexes)

    @property
    def usage(self) -> Usage | None:
        updates = [e.usage for e in self.events if isinstance(e, UsageUpdate)]
        return updates[-1] if updates else None

    @property
    def stops(self) -> list[Stop]:
        return [e for e in self.events if isinstance(e, Stop)]


@asynccontextmanager
async def anthropic(base_url: str, **config: Any) -> AsyncIterator[AnthropicProvider]:
    config.setdefault("api_key", Secret(FAKE_KEY))
    config.setdefault("key_hint", "set ANTHROPIC_API_KEY")
    provider = AnthropicProvider(ProviderConfig(name="anthropic", api="anthropic", base_url=base_url, **config))
    try:
        yield provider
    finally:
        await provider.aclose()


async def run(provider: AnthropicProvider, req: ProviderRequest) -> Outcome:
    events: list[ProviderEvent] = []
    try:
        async with provider.stream(req) as stream:
            async for event in stream:
                if not isinstance(event, KeepAlive):  # pings only feed the agent's stall watchdog
                    events.append(event)
    except ProviderError as exc:
        return Outcome(events, exc)
    return Outcome(events, None)


def enqueue(server: ReplayServer, name: str, *, every: int | None = None) -> dict[str, Any]:
    """Queue fixture ``name`` cut at its UTF-8 offsets (and every ``every`` bytes).

    A short pause after each chunk stops the kernel from gluing the pieces back together,
    so the client really reads them one by one.
    """
    meta, body = load_fixture("anthropic", name)
    cuts = list(meta["replay"]["utf8_split_offsets"]) + (list(range(every, len(body), every)) if every else [])
    server.enqueue(
        ScriptedResponse(
            status=meta["response"]["status"],
            headers=dict(meta["response"]["headers"]),
            body=body,
            split_at=cuts,
            chunk_delay_s=0.0002 if every else 0.002,
        )
    )
    return meta


def sse(*events: dict[str, Any], tail: str = "") -> bytes:
    return ("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events) + tail).encode()


SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


def message_start(input_tokens: int = 5, output_tokens: int = 1, **usage: int) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_x",
            "model": "m",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **usage},
        },
    }


def message_delta(stop_reason: str, **usage: Any) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": usage}


MESSAGE_STOP = {"type": "message_stop"}


def minimal_stream() -> ScriptedResponse:
    body = sse(message_start(), message_delta("end_turn", output_tokens=2), MESSAGE_STOP)
    return ScriptedResponse(headers=SSE_HEADERS, body=body)


def json_error(status: int, body: bytes, **headers: str) -> ScriptedResponse:
    return ScriptedResponse(status=status, headers={"content-type": "application/json", **headers}, body=body)


def block_start(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, **delta: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


# -- checking outcomes against meta.expected ---------------------------------------------


def check_block_order(outcome: Outcome) -> None:
    """Each block: one start, then its deltas, then at most one end; indexes in order."""
    state: dict[int, str] = {}
    starts: list[int] = []
    for event in outcome.events:
        if isinstance(event, BlockStart):
            assert event.index not in state
            state[event.index] = "open"
            starts.append(event.index)
        elif isinstance(event, BlockDelta):
            assert state.get(event.index) == "open" and event.delta
        elif isinstance(event, BlockEnd):
            assert state.get(event.index) == "open"
            state[event.index] = "closed"
    assert starts == sorted(starts)
    if outcome.error is None:
        assert set(state.values()) <= {"closed"}
        assert outcome.stops and outcome.events[-1] is outcome.stops[0] and len(outcome.stops) == 1


def check_against_meta(outcome: Outcome, meta: dict[str, Any]) -> None:
    expected = meta["expected"]
    error = expected.get("error")
    if error is not None and "partial" not in expected:  # rejected before streaming
        assert outcome.events == []
        assert outcome.error is not None
        assert outcome.error.kind == error["type"]
        assert outcome.error.status == error["http_status"]
        assert outcome.error.retryable is error["retryable"]
        assert outcome.error.retry_after == error["retry_after_seconds"]
        return
    check_block_order(outcome)
    assert outcome.streamed("thinking") == expected["thinking"]
    assert outcome.streamed("text") == expected["text"]
    calls = [p for p in outcome.ends() if p.type == "tool_call"]
    assert [(p.call_id, p.name, p.arguments) for p in calls] == [
        (c["id"], c["name"], c["arguments"]) for c in expected["tool_calls"]
    ]
    assert outcome.streamed("tool_call") == "".join(c["arguments_raw"] for c in expected["tool_calls"])
    redacted = [p.provider_data["data"] for p in outcome.ends() if p.redacted and p.provider_data]
    assert redacted == expected.get("redacted_thinking", [])
    assert outcome.usage is not None
    got_usage = msgspec.structs.asdict(outcome.usage)
    assert got_usage == {
        "input_tokens": expected["usage"]["input_tokens"],
        "output_tokens": expected["usage"]["output_tokens"],
        "reasoning_tokens": expected["usage"]["reasoning_tokens"],
        "cache_read_tokens": expected["usage"]["cache_read_tokens"],
        "cache_write_tokens": expected["usage"]["cache_write_tokens"],
    }
    if error is None:
        assert outcome.error is None
        assert [wire_from_part(p) for p in outcome.ends()] == expected["blocks"]
        for part in outcome.ends():
            if part.type == "thinking":  # round-trip data is tagged with its owner
                assert (part.provider, part.model) == ("anthropic", meta["expected"]["model"])
        assert outcome.stops[0].raw == expected["stop_reason"]
        assert outcome.stops[0].reason == {"end_turn": "end_turn", "tool_use": "tool_use"}[expected["stop_reason"]]
    else:  # failed mid-stream: the partial output was seen, then the error
        assert outcome.error is not None and outcome.stops == []
        assert outcome.error.kind == error["type"]
        assert outcome.error.retryable is error["retryable"]
        assert error["message"] in outcome.error.message


def check_request(server: ReplayServer, name: str, meta: dict[str, Any]) -> None:
    assert len(server.requests) == 1
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    for header, value in meta["request"]["headers"].items():
        assert sent.headers[header] == (FAKE_KEY if value == "<ANTHROPIC_API_KEY>" else value)
    assert "anthropic-beta" not in sent.headers  # no fixture uses budget thinking with tools
    assert sent.json() == expected_body(name)


# -- every fixture, split at awkward places -----------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("every", [None, 7], ids=["utf8-offsets", "every-7-bytes"])
@pytest.mark.parametrize("name", FIXTURES)
async def test_fixture_replay(replay_server: ReplayServer, name: str, every: int | None) -> None:
    meta = enqueue(replay_server, name, every=every)
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case(name))
    check_against_meta(outcome, meta)
    check_request(replay_server, name, meta)


@pytest.mark.anyio
async def test_fixture_replay_byte_by_byte(replay_server: ReplayServer) -> None:
    meta = enqueue(replay_server, "thinking-text", every=1)
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("thinking-text"))
    check_against_meta(outcome, meta)
    # the ZWJ emoji split across two text_delta events arrives intact once joined
    assert outcome.streamed("text").endswith("🧑\u200d🍳☕.")


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_tool_loop_turn2_echoes_signed_thinking_unchanged(replay_server: ReplayServer) -> None:
    enqueue(replay_server, "adaptive-thinking-tool-use", every=7)
    meta2 = enqueue(replay_server, "adaptive-thinking-tool-use-turn2", every=7)
    async with anthropic(replay_server.url) as provider:
        first = fixture_case("adaptive-thinking-tool-use")
        turn1 = await run(provider, first)
        assert turn1.error is None and turn1.stops[0].reason == "tool_use"
        call = next(p for p in turn1.ends() if p.type == "tool_call")
        history = [*first.messages, msg("assistant", *turn1.ends()), tool_result(call.call_id or "", WEATHER_RESULT)]
        second = request(OPUS_46, first.thinking, history, tools=first.tools, max_output_tokens=16000)
        assert provider.adjust_thinking(second) is None
        turn2 = await run(provider, second)
    check_against_meta(turn2, meta2)
    sent = replay_server.requests[1].json()
    expected = expected_body("adaptive-thinking-tool-use-turn2")
    assert sent["messages"] == expected["messages"]
    assert sent == expected
    # and the same thinking config as turn 1: one thinking mode per assistant turn
    first_sent = replay_server.requests[0].json()
    assert (sent["thinking"], sent["output_config"]) == (first_sent["thinking"], first_sent["output_config"])


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["thinking-text", "redacted-thinking", "adaptive-display-omitted"])
async def test_assistant_message_round_trips_verbatim(replay_server: ReplayServer, name: str) -> None:
    """Signed thinking, redacted thinking and signature-only (display omitted) blocks are
    stored from the stream and sent back exactly as the API produced them."""
    meta = enqueue(replay_server, name, every=7)
    replay_server.enqueue(minimal_stream())
    async with anthropic(replay_server.url) as provider:
        first = fixture_case(name)
        outcome = await run(provider, first)
        assert outcome.error is None
        history = [*first.messages, msg("assistant", *outcome.ends()), user("Thanks! One more?")]
        await run(provider, request(first.model, first.thinking, history))
    sent = replay_server.requests[1].json()
    assert sent["messages"][1] == meta["expected"]["assistant_message_for_roundtrip"]
    assert sent["messages"][2] == {"role": "user", "content": "Thanks! One more?"}


@pytest.mark.anyio
async def test_display_omitted_block_is_stored_with_its_signature(replay_server: ReplayServer) -> None:
    meta = enqueue(replay_server, "adaptive-display-omitted")
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("adaptive-display-omitted"))
    thinking = outcome.ends()[0]
    assert thinking.type == "thinking" and thinking.text == "" and not thinking.redacted
    assert thinking.signature == meta["expected"]["blocks"][0]["signature"]
    assert not [e for e in outcome.events if isinstance(e, BlockDelta) and e.index == 0]


@pytest.mark.anyio
async def test_redacted_block_opens_and_closes_at_once(replay_server: ReplayServer) -> None:
    meta = enqueue(replay_server, "redacted-thinking")
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("redacted-thinking"))
    i = next(n for n, e in enumerate(outcome.events) if isinstance(e, BlockStart) and e.index == 1)
    start, end = outcome.events[i], outcome.events[i + 1]
    assert start == BlockStart(index=1, kind="thinking")
    assert isinstance(end, BlockEnd) and end.part == Part(
        type="thinking",
        redacted=True,
        text="",
        provider="anthropic",
        model=SONNET_45,
        provider_data={"data": meta["expected"]["redacted_thinking"][0]},
    )


SIGNED = Part(type="thinking", text="ponder the weather", signature="EsigOpus46", provider="anthropic", model=OPUS_46)
REDACTED = Part(
    type="thinking", redacted=True, provider="anthropic", model=OPUS_46, provider_data={"data": "EredOpus46"}
)
CALL = Part(type="tool_call", call_id="toolu_1", name="get_weather", arguments={"city": "Lyon"})
SAID = Part(type="text", text="Let me look.")


@pytest.mark.anyio
async def test_thinking_from_other_models_is_dropped_not_pasted(replay_server: ReplayServer) -> None:
    foreign = [
        Part(type="thinking", text="sonnet's thoughts", signature="EsigSonnet", provider="anthropic", model=SONNET_45),
        Part(type="thinking", text="gpt's reasoning", provider="openai", model=OPUS_46, provider_data={"id": "rs_1"}),
        Part(type="thinking", redacted=True, provider="anthropic", model=SONNET_45, provider_data={"data": "Ered"}),
        Part(type="thinking", text="no owner at all"),
    ]
    replay_server.enqueue(minimal_stream())
    history = [user("hi"), msg("assistant", *foreign, SAID), user("and?")]
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(OPUS_46, adaptive("high", "high"), history))
    assert outcome.error is None
    sent = replay_server.requests[0].json()
    assert sent["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}]},
        {"role": "user", "content": "and?"},
    ]
    raw = replay_server.requests[0].body.decode()
    assert "thoughts" not in raw and "reasoning" not in raw and "no owner" not in raw


@pytest.mark.anyio
async def test_thinking_without_signature_is_dropped(replay_server: ReplayServer) -> None:
    interrupted = Part(type="thinking", text="I was cut off mid-", provider="anthropic", model=OPUS_46)
    replay_server.enqueue(minimal_stream())
    history = [user("hi"), msg("assistant", interrupted, SAID), user("go on")]
    async with anthropic(replay_server.url) as provider:
        await run(provider, request(OPUS_46, adaptive("high", "high"), history))
    assert replay_server.requests[0].json()["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Let me look."}],
    }


def test_same_model_thinking_keeps_its_bytes_and_order() -> None:
    odd = "tabs\tand “quotes” and \\backslashes\\ and 🧑\u200d🍳 and trailing space "
    signed = Part(type="thinking", text=odd, signature="Esig==", provider="anthropic", model=OPUS_46)
    history = [user("q"), msg("assistant", signed, REDACTED, SAID, CALL), tool_result("toolu_1", "sunny")]
    messages = build_messages(request(OPUS_46, adaptive("high", "high"), history))
    assert messages[1]["content"] == [
        {"type": "thinking", "thinking": odd, "signature": "Esig=="},
        {"type": "redacted_thinking", "data": "EredOpus46"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lyon"}},
    ]


def test_history_merges_same_role_messages_and_maps_tool_results() -> None:
    calls = [CALL, Part(type="tool_call", call_id="toolu_2", name="read", arguments={})]
    history = [
        user("first"),
        user("second"),
        msg("assistant", SAID, Part(type="text", text=""), *calls),
        tool_result("toolu_1", "sunny"),
        tool_result("toolu_2", "no such file", is_error=True),
        user("also, hurry"),
        msg("assistant"),  # an empty (cancelled) reply leaves no trace
        msg("tool", Part(type="tool_result", call_id="toolu_3", text="")),
    ]
    assert build_messages(request(OPUS_46, thinking_off(), history)) == [
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lyon"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": True},
                {"type": "text", "text": "also, hurry"},
                {"type": "tool_result", "tool_use_id": "toolu_3"},
            ],
        },
    ]


# -- request bodies per thinking level ------------------------------------------------------

LEVEL_CASES = [
    ("off", thinking_off(), None, {}),
    ("adaptive-low", adaptive("low", "low"), None, {"thinking": ADAPTIVE_WIRE, "output_config": {"effort": "low"}}),
    (
        "adaptive-minimal",
        adaptive("minimal", "low"),
        None,
        {"thinking": ADAPTIVE_WIRE, "output_config": {"effort": "low"}},
    ),
    (
        "adaptive-medium",
        adaptive("medium", "medium"),
        None,
        {"thinking": ADAPTIVE_WIRE, "output_config": {"effort": "medium"}},
    ),
    ("adaptive-high", adaptive("high", "high"), None, {"thinking": ADAPTIVE_WIRE, "output_config": {"effort": "high"}}),
    ("adaptive-max", adaptive("max", "max"), None, {"thinking": ADAPTIVE_WIRE, "output_config": {"effort": "max"}}),
    ("budget-minimal", budget("minimal", 1024, 17024), 17024, {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("budget-low", budget("low", 4096, 20096), 20096, {"thinking": {"type": "enabled", "budget_tokens": 4096}}),
    ("budget-medium", budget("medium", 10000, 26000), 26000, {"thinking": {"type": "enabled", "budget_tokens": 10000}}),
    ("budget-high", budget("high", 32000, 48000), 48000, {"thinking": {"type": "enabled", "budget_tokens": 32000}}),
    ("budget-max", budget("max", 63000, 64000), 64000, {"thinking": {"type": "enabled", "budget_tokens": 63000}}),
]


@pytest.mark.anyio
@pytest.mark.parametrize("with_tools", [False, True], ids=["no-tools", "tools"])
@pytest.mark.parametrize(
    ("thinking", "max_tokens", "fragment"), [c[1:] for c in LEVEL_CASES], ids=[c[0] for c in LEVEL_CASES]
)
async def test_request_body_per_level(
    replay_server: ReplayServer, thinking: Thinking, max_tokens: int | None, fragment: dict[str, Any], with_tools: bool
) -> None:
    replay_server.enqueue(minimal_stream())
    tools = [weather_tool()] if with_tools else []
    req = request(
        SONNET_45, thinking, [user("hello")], system_prompt="You are terse.", tools=tools, max_output_tokens=8000
    )
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, req)
    assert outcome.error is None and outcome.stops[0].reason == "end_turn"
    sent = replay_server.requests[0]
    expected: dict[str, Any] = {
        "model": SONNET_45,
        # budget mode: the fragment's max_tokens (budget + answer room) beats the request's cap
        "max_tokens": max_tokens or 8000,
        "messages": [{"role": "user", "content": "hello"}],
        "system": "You are terse.",
        "stream": True,
        **fragment,
    }
    if with_tools:
        spec = tools[0]
        expected["tools"] = [{"name": spec.name, "description": spec.description, "input_schema": spec.input_schema}]
    assert sent.json() == expected
    budget_mode = fragment.get("thinking", {}).get("type") == "enabled"
    assert sent.headers.get("anthropic-beta") == (INTERLEAVED_THINKING_BETA if budget_mode and with_tools else None)
    assert not {"temperature", "top_p", "top_k"} & set(sent.json())


def test_default_max_tokens_and_extra_headers() -> None:
    provider = AnthropicProvider(
        ProviderConfig(
            name="anthropic",
            api="anthropic",
            base_url="http://127.0.0.1:9",
            api_key=Secret(FAKE_KEY),
            headers={"anthropic-beta": "context-1m-2025-08-07", "x-team": "ponder"},
        )
    )
    req = request(SONNET_45, budget("low", 4096, 20096), [user("x")], tools=[weather_tool()])
    assert provider.build_body(request(OPUS_46, adaptive("high", "high"), [user("x")]))["max_tokens"] == BASE_MAX_TOKENS
    headers = provider.build_headers(provider.build_body(req))
    assert headers["anthropic-beta"] == f"context-1m-2025-08-07,{INTERLEAVED_THINKING_BETA}"
    assert headers["x-team"] == "ponder" and headers["x-api-key"] == FAKE_KEY


# -- adjust_thinking -------------------------------------------------------------------------


def loop(*assistant_parts: Part) -> list[ChatMessage]:
    return [user("weather?"), msg("assistant", *assistant_parts), tool_result("toolu_1", "sunny")]


OTHER_MODEL_SIGNED = Part(type="thinking", text="t", signature="EsigSonnet", provider="anthropic", model=SONNET_45)
UNSIGNED = Part(type="thinking", text="cut off", provider="anthropic", model=OPUS_46)
SIGNED_46 = Part(type="thinking", text="t", signature="Esig46", provider="anthropic", model=OPUS_46)


@pytest.mark.parametrize(
    ("history", "adjusted"),
    [
        (loop(OTHER_MODEL_SIGNED, SAID, CALL), True),  # model switch mid tool loop
        (loop(UNSIGNED, CALL), True),  # interrupted before the signature arrived
        (loop(SAID, CALL), True),  # the tool call was made with thinking off
        (loop(SIGNED_46, SAID, CALL), False),
        (loop(REDACTED, CALL), False),
        ([*loop(SIGNED_46, CALL), user("new question")], False),  # a fresh user turn
        ([user("weather?")], False),
        # A steer after the results shares their user message: still the answer to the call.
        ([*loop(SAID, CALL), user("use the other file")], True),
        ([*loop(SIGNED_46, CALL), user("use the other file")], False),
        ([user("weather?"), msg("assistant", SAID), user("and tomorrow?")], False),  # no tool loop at all
    ],
    ids=[
        "model-switch",
        "interrupted",
        "no-thinking",
        "signed",
        "redacted",
        "new-turn",
        "first-turn",
        "steer-after-results",
        "steer-after-signed",
        "no-loop",
    ],
)
def test_adjust_thinking_in_budget_mode(history: list[ChatMessage], adjusted: bool) -> None:
    provider = AnthropicProvider(ProviderConfig(name="anthropic", api="anthropic", base_url="http://127.0.0.1:9"))
    thinking = budget("high", 32000, 48000)
    result = provider.adjust_thinking(request(OPUS_46, thinking, history, tools=[weather_tool()]))
    if not adjusted:
        assert result is None
        return
    assert result is not None
    assert (result.requested, result.effective, result.request_params, result.budget_tokens) == (
        "high",
        "off",
        {},
        None,
    )
    assert result.supported == thinking.supported
    assert result.reason and OPUS_46 in result.reason and result.reason.count(". ") == 0
    assert thinking.effective == "high"  # the request's own Thinking is left alone


@pytest.mark.parametrize("thinking", [thinking_off(), adaptive("high", "high")], ids=["off", "adaptive"])
def test_adjust_thinking_leaves_off_and_adaptive_alone(thinking: Thinking) -> None:
    # Adaptive mode accepts a tool loop whose last assistant step has no thinking (the
    # model may skip thinking by itself), so there is nothing to fix.
    provider = AnthropicProvider(ProviderConfig(name="anthropic", api="anthropic", base_url="http://127.0.0.1:9"))
    assert provider.adjust_thinking(request(OPUS_46, thinking, loop(OTHER_MODEL_SIGNED, CALL))) is None


@pytest.mark.anyio
async def test_stream_sends_the_thinking_it_is_given(replay_server: ReplayServer) -> None:
    # The agent asks adjust_thinking once per request (agent.call_thinking) and tells the client;
    # the adapter sends what it is given, and never adjusts a second time behind its back.
    replay_server.enqueue(minimal_stream())
    replay_server.enqueue(minimal_stream())
    history = loop(OTHER_MODEL_SIGNED, SAID, CALL)
    req = request(OPUS_46, budget("high", 32000, 48000), history, tools=[weather_tool()], max_output_tokens=12000)
    async with anthropic(replay_server.url) as provider:
        adjusted = provider.adjust_thinking(req)
        assert adjusted is not None and adjusted.effective == "off"
        as_decided = await run(provider, req)
        outcome = await run(provider, msgspec.structs.replace(req, thinking=adjusted))
    assert as_decided.error is None and outcome.error is None
    assert replay_server.requests[0].json()["thinking"] == {"type": "enabled", "budget_tokens": 32000}
    sent = replay_server.requests[1]
    body = sent.json()
    assert "thinking" not in body and "anthropic-beta" not in sent.headers
    assert body["max_tokens"] == 12000
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lyon"}},
    ]


# -- errors ----------------------------------------------------------------------------------


def assert_no_secret(exc: BaseException) -> None:
    text = f"{exc} {exc!r} {getattr(exc, 'data', '')} {exc.__cause__!r}"
    assert FAKE_KEY not in text


@pytest.mark.anyio
async def test_overloaded_midstream_keeps_partial_output(replay_server: ReplayServer) -> None:
    meta = enqueue(replay_server, "overloaded-midstream", every=7)
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("overloaded-midstream"))
    assert outcome.error is not None and outcome.error.retryable and outcome.error.kind == "overloaded_error"
    assert outcome.streamed("text") == meta["expected"]["text"]
    assert not [e for e in outcome.events if isinstance(e, (BlockEnd, Stop))]
    assert_no_secret(outcome.error)


@pytest.mark.anyio
async def test_429_is_retryable_after_retry_after(replay_server: ReplayServer) -> None:
    enqueue(replay_server, "rate-limit-429")
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("rate-limit-429"))
    error = outcome.error
    assert error is not None and type(error) is ProviderError
    assert (error.status, error.retryable, error.retry_after, error.kind) == (429, True, 23.0, "rate_limit_error")
    assert "30,000 input tokens per minute" in error.message
    assert_no_secret(error)


@pytest.mark.anyio
async def test_529_is_retryable_without_retry_after(replay_server: ReplayServer) -> None:
    enqueue(replay_server, "overloaded-529")
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("overloaded-529"))
    error = outcome.error
    assert error is not None and (error.status, error.retryable, error.retry_after) == (529, True, None)
    assert error.kind == "overloaded_error"


def error_body(kind: str, message: str, **extra: Any) -> bytes:
    error = {"type": kind, "message": message, **extra}
    return json.dumps({"type": "error", "error": error, "request_id": "req_1"}).encode()


@pytest.mark.anyio
@pytest.mark.parametrize("status", [401, 403])
async def test_auth_errors_say_how_to_fix_them(replay_server: ReplayServer, status: int) -> None:
    replay_server.enqueue(json_error(status, error_body("authentication_error", "invalid x-api-key")))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    error = outcome.error
    assert isinstance(error, ProviderAuthError) and not error.retryable and error.status == status
    assert "invalid x-api-key" in error.message and "set ANTHROPIC_API_KEY" in error.message
    assert replay_server.requests[0].headers["x-api-key"] == FAKE_KEY
    assert_no_secret(error)


@pytest.mark.anyio
async def test_missing_key_fails_before_any_request(replay_server: ReplayServer) -> None:
    async with anthropic(replay_server.url, api_key=None) as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    assert isinstance(outcome.error, ProviderAuthError) and "ANTHROPIC_API_KEY" in outcome.error.message
    assert replay_server.requests == []


@pytest.mark.anyio
async def test_400_shows_the_api_message(replay_server: ReplayServer) -> None:
    text = (
        "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest assistant message"
        " cannot be modified."
    )
    replay_server.enqueue(json_error(400, error_body("invalid_request_error", text)))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    error = outcome.error
    assert error is not None and not error.retryable and error.status == 400 and text in error.message
    assert error.kind == "invalid_request_error"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "headers", "body", "retryable"),
    [
        (
            429,
            {"retry-after": "5"},
            error_body("rate_limit_error", "cap", details={"error_code": "enforced_spend_limit_reached"}),
            False,
        ),
        (500, {"x-should-retry": "false"}, error_body("api_error", "boom"), False),
        (409, {"x-should-retry": "true"}, error_body("conflict_error", "busy"), True),
        (500, {}, error_body("api_error", "Internal server error"), True),
    ],
    ids=["spend-limit", "should-retry-false", "should-retry-true", "plain-500"],
)
async def test_retry_signals(
    replay_server: ReplayServer, status: int, headers: dict[str, str], body: bytes, retryable: bool
) -> None:
    replay_server.enqueue(json_error(status, body, **headers))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    assert outcome.error is not None and outcome.error.retryable is retryable
    if not retryable:
        assert outcome.error.retry_after is None


@pytest.mark.anyio
async def test_stream_without_message_stop_ended_early(replay_server: ReplayServer) -> None:
    _, body = load_fixture("anthropic", "thinking-text")
    cut = body.index(b"event: message_delta")
    replay_server.enqueue(ScriptedResponse(headers=SSE_HEADERS, body=body[:cut], split_at=list(range(5, cut, 5))))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("thinking-text"))
    # retryable like every adapter's early end: the agent retries only if nothing was shown yet
    assert outcome.error is not None and outcome.error.retryable
    assert outcome.error.kind == "stream_ended_early" and "ended early" in outcome.error.message
    assert len(outcome.ends()) == 2 and outcome.stops == []


@pytest.mark.anyio
async def test_connection_dropped_mid_body(replay_server: ReplayServer) -> None:
    _, body = load_fixture("anthropic", "thinking-text")
    cut = body.index(b"event: content_block_stop")
    replay_server.enqueue(ScriptedResponse(headers=SSE_HEADERS, body=body[:cut], content_length=len(body)))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("thinking-text"))
    assert outcome.error is not None and outcome.error.retryable and outcome.error.kind == "connection_error"
    assert "mid-stream" in outcome.error.message
    assert outcome.streamed("thinking").startswith("The user wants one café")
    assert_no_secret(outcome.error)


@pytest.mark.anyio
async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with anthropic(f"http://127.0.0.1:{port}") as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    assert outcome.error is not None and outcome.error.retryable and outcome.error.kind == "connection_error"
    assert outcome.events == []
    assert_no_secret(outcome.error)


@pytest.mark.anyio
async def test_non_sse_200_is_an_error(replay_server: ReplayServer) -> None:
    replay_server.enqueue(ScriptedResponse(headers={"content-type": "text/html"}, body=b"<html>captive portal</html>"))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    assert (
        outcome.error is not None and outcome.error.kind == "invalid_response" and "text/html" in outcome.error.message
    )


# -- stream grammar details ------------------------------------------------------------------


@pytest.mark.anyio
async def test_comments_retry_blocks_unknown_events_and_server_blocks_are_skipped(replay_server: ReplayServer) -> None:
    body = b": keep-alive\n\nretry: 3000\n\n" + sse(
        message_start(input_tokens=40, cache_read_input_tokens=7, cache_creation_input_tokens=3),
        block_start(0, type="server_tool_use", id="srvtoolu_1", name="web_search", input={}),
        block_delta(0, type="input_json_delta", partial_json='{"q":1}'),
        {"type": "content_block_stop", "index": 0},
        {"type": "brand_new_event", "whatever": True},
        block_start(1, type="text", text=""),
        block_delta(1, type="citations_delta", citation={}),
        block_delta(1, type="text_delta", text="hi"),
        {"type": "ping"},
        {"type": "content_block_stop", "index": 1},
        message_delta("pause_turn", output_tokens=9),  # older streams: only output_tokens here
        MESSAGE_STOP,
    ).replace(b"event: ping\n", b": comment glued to an event\nevent: ping\n")
    replay_server.enqueue(ScriptedResponse(headers=SSE_HEADERS, body=body, split_at=list(range(3, len(body), 3))))
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(SONNET_45, thinking_off(), [user("hi")]))
    assert outcome.error is None
    assert outcome.events[1:] == [
        BlockStart(index=1, kind="text"),
        BlockDelta(index=1, delta="hi"),
        BlockEnd(index=1, part=Part(type="text", text="hi")),
        UsageUpdate(
            # Anthropic's input_tokens (40) leaves out cache reads (7) and writes (3); ours includes them.
            usage=Usage(
                input_tokens=50, output_tokens=9, reasoning_tokens=None, cache_read_tokens=7, cache_write_tokens=3
            )
        ),
        Stop(reason="end_turn", raw="pause_turn"),
    ]


def parse(*events: dict[str, Any], model: str = OPUS_46) -> list[ProviderEvent]:
    parser = StreamParser(provider="anthropic", request=request(model, thinking_off(), []))
    out: list[ProviderEvent] = []
    for event in events:
        out.extend(parser.feed(event["type"], json.dumps(event)))
    return out


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("pause_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("tool_use", "tool_use"),
        ("refusal", "refusal"),
        ("something_new", "end_turn"),
    ],
)
def test_stop_reason_mapping(raw: str, kind: str) -> None:
    events = parse(message_start(), message_delta(raw, output_tokens=3), MESSAGE_STOP)
    assert events[-1] == Stop(reason=kind, raw=raw)  # type: ignore[arg-type]


def test_tool_calls_mean_tool_use_and_truncated_arguments_do_not_run() -> None:
    start = block_start(0, type="tool_use", id="toolu_9", name="ls", input={})
    stop = {"type": "content_block_stop", "index": 0}
    whole = parse(message_start(), start, stop, message_delta("end_turn"), MESSAGE_STOP)
    assert [e for e in whole if isinstance(e, BlockEnd)] == [
        BlockEnd(index=0, part=Part(type="tool_call", call_id="toolu_9", name="ls", arguments={}))
    ]
    assert whole[-1] == Stop(reason="tool_use", raw="end_turn")
    fragment = block_delta(0, type="input_json_delta", partial_json='{"path": "/tm')
    cut = parse(message_start(), start, fragment, stop, message_delta("max_tokens"), MESSAGE_STOP)
    end = next(e for e in cut if isinstance(e, BlockEnd))
    assert end.part.arguments == {} and end.part.provider_data == {"invalid_arguments": '{"path": "/tm'}
    assert cut[-1] == Stop(reason="max_tokens", raw="max_tokens")


def test_thinking_without_signature_delta_has_none_not_empty() -> None:
    start = block_start(0, type="thinking", thinking="", signature="")
    delta = block_delta(0, type="thinking_delta", thinking="hmm")
    events = parse(start, delta, {"type": "content_block_stop", "index": 0})
    assert events[-1] == BlockEnd(index=0, part=Part(type="thinking", text="hmm", provider="anthropic", model=OPUS_46))
    assert events[-1].part.signature is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kind", "retryable"), [("overloaded_error", True), ("api_error", True), ("invalid_request_error", False)]
)
def test_error_event_raises(kind: str, retryable: bool) -> None:
    with pytest.raises(ProviderError) as caught:
        parse(message_start(), {"type": "error", "error": {"type": kind, "message": "nope"}})
    assert (caught.value.kind, caught.value.retryable) == (kind, retryable)


# -- leaving early: no hang, no leaked generators (trio warns about those, and warnings are errors)


def hanging(name: str, upto: bytes | None = None) -> ScriptedResponse:
    """Fixture ``name`` (cut before ``upto``), then a connection that stays open and silent."""
    _, body = load_fixture("anthropic", name)
    if upto is not None:
        body = body[: body.index(upto)]
    return ScriptedResponse(headers=SSE_HEADERS, body=body, content_length=len(body) + 1000, hang_after_s=5.0)


@pytest.mark.anyio
async def test_consumer_breaking_off_mid_stream_closes_at_once(replay_server: ReplayServer) -> None:
    replay_server.enqueue(hanging("thinking-text", upto=b"event: message_delta"))
    started = anyio.current_time()
    async with anthropic(replay_server.url) as provider, provider.stream(fixture_case("thinking-text")) as events:
        async for event in events:
            if isinstance(event, BlockDelta):
                break
    assert anyio.current_time() - started < 2.0


@pytest.mark.anyio
async def test_stop_arrives_without_waiting_for_the_connection_to_close(replay_server: ReplayServer) -> None:
    replay_server.enqueue(hanging("adaptive-display-omitted"))
    started = anyio.current_time()
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, fixture_case("adaptive-display-omitted"))
    assert outcome.error is None and outcome.stops == [Stop(reason="end_turn", raw="end_turn")]
    assert anyio.current_time() - started < 2.0


@pytest.mark.anyio
async def test_cancelling_a_silent_stream(replay_server: ReplayServer) -> None:
    replay_server.enqueue(hanging("thinking-text", upto=b"event: content_block_stop"))
    seen: list[ProviderEvent] = []
    started = anyio.current_time()
    async with anthropic(replay_server.url) as provider:
        with anyio.move_on_after(0.5) as scope:
            async with provider.stream(fixture_case("thinking-text")) as events:
                async for event in events:
                    seen.append(event)
    assert scope.cancelled_caught and anyio.current_time() - started < 2.0
    assert any(isinstance(e, BlockDelta) for e in seen)


@pytest.mark.anyio
async def test_usage_input_includes_cache_reads_and_writes(replay_server: ReplayServer) -> None:
    """Anthropic's input_tokens leaves out cache reads and writes; Usage.input_tokens is
    every input token the model read (PROTOCOL.md), as for the other providers."""
    meta = enqueue_local(replay_server, "anthropic", "prompt-cache-read-write")
    expected = meta["expected"]
    async with anthropic(replay_server.url) as provider:
        outcome = await run(provider, request(SONNET_45, budget("high", 2048, 4096), [user("Squash three commits?")]))
    assert outcome.error is None
    assert (outcome.streamed("thinking"), outcome.streamed("text")) == (expected["thinking"], expected["text"])
    assert outcome.usage == Usage(**expected["usage"])
    assert [u.usage.input_tokens for u in outcome.events if isinstance(u, UsageUpdate)] == [22030, 22030]
