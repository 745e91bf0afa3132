"""Drive a provider adapter once and check the normalized events it produced.

Provider-neutral (written for the OpenAI adapters' tests): ``collect`` runs one
``adapter.stream(request)`` to its end or to its ``ProviderError``; ``Collected`` checks
the event grammar of ``daemon.providers.base`` (a block starts once, deltas only inside
a started block, ends at most once, its final text equals its deltas, no empty text
block) and sums the outcome up in the terms of a fixture's ``meta.expected``. Builders
for requests and stored messages keep the tests short.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderError
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
from protocol.objects import Thinking
from tests.support.replay import ReplayServer, ScriptedResponse

# ponder's own fixtures (tests/fixtures/<provider>/<name>.{sse,meta.json}), in the layout of the
# reference set in tests/fixtures/providers: wire features that set does not cover.
LOCAL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def local_fixture(provider: str, name: str) -> tuple[dict[str, Any], bytes]:
    """(meta, body bytes) of ``tests/fixtures/<provider>/<name>``."""
    folder = LOCAL_FIXTURES / provider
    meta = json.loads((folder / f"{name}.meta.json").read_text(encoding="utf-8"))
    return meta, (folder / f"{name}.sse").read_bytes()


def enqueue_local(server: ReplayServer, provider: str, name: str, *, split_every: int = 5) -> dict[str, Any]:
    """Queue a local fixture's response, cut every ``split_every`` bytes and inside every
    multi-byte UTF-8 character; returns its meta."""
    meta, body = local_fixture(provider, name)
    cuts = set(range(split_every, len(body), split_every))
    cuts |= {i for i, byte in enumerate(body) if byte & 0xC0 == 0x80}  # continuation bytes
    response = meta.get("response", {})
    server.enqueue(
        ScriptedResponse(
            status=int(response.get("status", 200)),
            headers=dict(response.get("headers", {})),
            body=body,
            split_at=sorted(cuts),
        )
    )
    return meta


def thinking(params: dict[str, Any] | None = None) -> Thinking:
    level = "high" if params else "off"
    return Thinking(
        requested=level,
        effective=level,
        supported=["off", "high"],
        reason=None,
        budget_tokens=None,
        request_params=dict(params or {}),
    )


_seq = iter(range(1, 1_000_000))


def user(*texts: str) -> ChatMessage:
    return ChatMessage(
        message_id=f"u{next(_seq)}",
        session_id="s1",
        seq=0,
        role="user",
        parts=[Part(type="text", text=t) for t in texts],
    )


def assistant(parts: list[Part]) -> ChatMessage:
    return ChatMessage(message_id=f"a{next(_seq)}", session_id="s1", seq=0, role="assistant", parts=parts)


def tool_results(*results: tuple[str, str]) -> ChatMessage:
    parts = [Part(type="tool_result", call_id=call_id, text=text) for call_id, text in results]
    return ChatMessage(message_id=f"t{next(_seq)}", session_id="s1", seq=0, role="tool", parts=parts)


def make_request(
    provider: str,
    model: str,
    messages: list[ChatMessage],
    *,
    params: dict[str, Any] | None = None,
    tools: list[ToolSpec] | None = None,
    system: str | None = None,
    max_output_tokens: int | None = None,
) -> ProviderRequest:
    return ProviderRequest(
        provider=provider,
        model=model,
        thinking=thinking(params),
        messages=messages,
        system_prompt=system,
        tools=list(tools or []),
        max_output_tokens=max_output_tokens,
    )


@dataclass
class Collected:
    events: list[ProviderEvent]
    error: ProviderError | None

    def __post_init__(self) -> None:
        check_grammar(self.events)

    def _blocks(self, kind: str) -> list[int]:
        return [e.index for e in self.events if isinstance(e, BlockStart) and e.kind == kind]

    def streamed(self, kind: str) -> str:
        """What a client adding up the deltas of ``kind`` blocks shows (partial text too)."""
        indexes = set(self._blocks(kind))
        return "".join(e.delta for e in self.events if isinstance(e, BlockDelta) and e.index in indexes)

    def starts(self, kind: str) -> int:
        return len(self._blocks(kind))

    @property
    def parts(self) -> list[Part]:
        ends = sorted((e for e in self.events if isinstance(e, BlockEnd)), key=lambda e: e.index)
        return [e.part for e in ends]

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [
            {"id": p.call_id, "name": p.name, "arguments": p.arguments} for p in self.parts if p.type == "tool_call"
        ]

    @property
    def stop(self) -> Stop | None:
        stops = [e for e in self.events if isinstance(e, Stop)]
        assert len(stops) <= 1, stops
        return stops[0] if stops else None

    @property
    def usage(self) -> dict[str, Any] | None:
        updates = [e for e in self.events if isinstance(e, UsageUpdate)]
        return msgspec.structs.asdict(updates[-1].usage) if updates else None

    def reply(self) -> ChatMessage:
        """The assistant message the agent would store from these events."""
        return assistant(self.parts)


def check_grammar(events: list[ProviderEvent]) -> None:
    started: dict[int, BlockStart] = {}
    ended: set[int] = set()
    deltas: dict[int, list[str]] = {}
    for position, event in enumerate(events):
        if isinstance(event, BlockStart):
            assert event.index not in started, f"block {event.index} started twice"
            assert event.index == len(started), f"blocks must be numbered in order: {event}"
            started[event.index] = event
        elif isinstance(event, BlockDelta):
            assert event.index in started and event.index not in ended, f"delta outside its block: {event}"
            assert event.delta, f"empty delta: {event}"
            deltas.setdefault(event.index, []).append(event.delta)
        elif isinstance(event, BlockEnd):
            assert event.index in started and event.index not in ended, f"bad end: {event}"
            ended.add(event.index)
            start, part, text = started[event.index], event.part, "".join(deltas.get(event.index, []))
            assert part.type == start.kind
            if part.type == "text":
                assert part.text, "a text block must never be empty"
                assert part.text == text
            elif part.type == "thinking":
                assert part.text == text
            else:
                assert (part.call_id, part.name) == (start.call_id, start.name)
                raw = (part.provider_data or {}).get("arguments_raw", "")
                assert text == raw or (not raw and text in ("", "{}")), (text, raw)
        elif isinstance(event, Stop):
            assert position == len(events) - 1, "Stop must be the last event"
            assert ended == set(started), "every block ends before Stop"


async def collect(adapter: Any, request: ProviderRequest) -> Collected:
    """Run one stream to the end. HTTP errors (raised on entry) and stream errors (raised
    while iterating) are both returned as ``error``; events seen before stay in ``events``."""
    events: list[ProviderEvent] = []
    try:
        async with adapter.stream(request) as stream:
            async for event in stream:
                if not isinstance(event, KeepAlive):  # comments only feed the agent's stall watchdog
                    events.append(event)
    except ProviderError as exc:
        return Collected(events, exc)
    return Collected(events, None)
