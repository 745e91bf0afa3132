"""The offline ``mock`` provider: deterministic models that stream like real ones.

- ``mock/echo``: no thinking; answers with the prompt.
- ``mock/thinker``: streams a thinking passage whose length grows with the effective
  level, then an answer.
- ``mock/tools``: asks for tool calls, then answers with what they returned. By default it
  lists the session's files; a prompt can script the calls, one step per line::

      tool: read_file {"path": "README.md"}
      parallel: [{"name": "read_file", "arguments": {"path": "a"}}, {"name": "list_files", "arguments": {}}]

Everything is streamed in small deltas with a delay (``PONDER_MOCK_DELAY_MS``), and goes
through exactly the same agent, store and event path as a real provider. Thinking parts
carry a signature so the round-trip path is exercised too.
"""

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel

from daemon.conversation import ChatMessage, Part
from daemon.providers.base import (
    BlockDelta,
    BlockEnd,
    BlockKind,
    BlockStart,
    Provider,
    ProviderEvent,
    ProviderRequest,
    Stop,
    UsageUpdate,
)
from protocol.objects import Usage

# How many thinking sentences each level produces (the passage grows with the level).
SENTENCES_PER_LEVEL = {"off": 0, "minimal": 1, "low": 2, "medium": 4, "high": 8, "max": 16}
THOUGHTS = [
    "Let me restate the question to be sure I understand it — “{topic}”.",
    "The key facts: what is asked, what is known, and what would make a good answer.",
    "I could answer at once, but checking an edge case first is cheap… café, naïve, 東京 ✓.",
    "A second angle: how would a careful reviewer poke holes in the first idea?",
    "Weighing both, the simpler explanation covers every case I can think of.",
    "I should keep the answer short and concrete, with one example.",
    "Double-checking the wording so nothing is overstated.",
    "Good: the plan holds up; time to write it down.",
]
# A pattern, compiled (and cached) by ``re`` with the first scripted prompt, not at import.
_STEP_RE = r"(?m)^\s*(tool|parallel):\s*(.+)$"


def _sha256_hex(text: str) -> str:
    """The SHA-256 of ``text``, in hex. hashlib (OpenSSL's set-up: ~5 M instructions) loads with
    the first thinking signature or tool call id: a turn of mock/echo makes neither, and stands
    for the daemon's own cost (scripts/bench's cold start), not OpenSSL's."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


class MockProvider(Provider):
    def __init__(self, delay_ms: float = 15.0) -> None:
        self.name = "mock"
        self.delay_s = max(0.0, delay_ms) / 1000

    @asynccontextmanager
    async def stream(self, request: ProviderRequest) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
        events = self._events(request)
        try:
            yield events
        finally:
            await events.aclose()  # a cancelled turn must not leave the generator for the GC

    async def aclose(self) -> None:
        pass

    async def _events(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        prompt, turn = _current_turn(request.messages)
        index = 0
        output_words = 0
        level = request.thinking.effective
        if SENTENCES_PER_LEVEL.get(level, 0):
            text = _thinking_passage(prompt, level)
            async with aclosing(self._block(index, "thinking", text)) as block:
                async for event in block:
                    yield event
            signature = "mock-sig-" + _sha256_hex(text)[:32]
            yield BlockEnd(
                index=index,
                part=Part(
                    type="thinking", text=text, provider=request.provider, model=request.model, signature=signature
                ),
            )
            output_words += len(text.split())
            index += 1

        calls = _next_tool_calls(request.model, prompt, turn)
        if calls:
            for n, (name, arguments) in enumerate(calls):
                # Deterministic, and unique in the session like a real provider's ids: the
                # conversation grows with every request, so its length tells requests apart.
                call_id = f"call_{_sha256_hex(f'{len(request.messages)}:{n}:{name}')[:12]}"
                raw = json.dumps(arguments)
                yield BlockStart(index=index, kind="tool_call", call_id=call_id, name=name)
                for piece in _chunks(raw, 8):
                    await self._pause()
                    yield BlockDelta(index=index, delta=piece)
                yield BlockEnd(
                    index=index, part=Part(type="tool_call", call_id=call_id, name=name, arguments=arguments)
                )
                index += 1
            yield UsageUpdate(usage=_usage(request.messages, output_words + 10))
            yield Stop(reason="tool_use")
            return

        answer = _answer(request.model, prompt, turn)
        async with aclosing(self._block(index, "text", answer)) as block:
            async for event in block:
                yield event
        yield BlockEnd(index=index, part=Part(type="text", text=answer))
        output_words += len(answer.split())
        yield UsageUpdate(usage=_usage(request.messages, output_words))
        yield Stop(reason="end_turn")

    async def _block(self, index: int, kind: BlockKind, text: str) -> AsyncGenerator[ProviderEvent, None]:
        yield BlockStart(index=index, kind=kind)
        for n, piece in enumerate(_words(text)):
            if self.delay_s:
                await anyio.sleep(self.delay_s)
            elif n % 64 == 0:
                await anyio.lowlevel.checkpoint()
            yield BlockDelta(index=index, delta=piece)

    async def _pause(self) -> None:
        if self.delay_s:
            await anyio.sleep(self.delay_s)


def _current_turn(messages: list[ChatMessage]) -> tuple[str, list[ChatMessage]]:
    """The last user prompt and the messages after it (this turn's tool loop so far)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            # An image reaches the model as bytes: the mock names what it received.
            prompt = "".join(
                p.text if p.type == "text" else f"[image {p.mime_type} {p.width}x{p.height} {len(p.data or b'')} bytes]"
                for p in messages[i].parts
                if p.type == "text" or (p.type == "image" and p.data is not None)
            )
            return prompt, messages[i + 1 :]
    return "", []


def _thinking_passage(prompt: str, level: str) -> str:
    topic = " ".join(prompt.split()[:12]) or "(empty prompt)"
    count = SENTENCES_PER_LEVEL[level]
    return " ".join(THOUGHTS[i % len(THOUGHTS)].format(topic=topic) for i in range(count))


def _scripted_steps(prompt: str) -> list[list[tuple[str, dict[str, Any]]]]:
    steps: list[list[tuple[str, dict[str, Any]]]] = []
    for kind, rest in re.findall(_STEP_RE, prompt):
        try:
            if kind == "tool":
                name, _, raw = rest.strip().partition(" ")
                steps.append([(name, json.loads(raw) if raw.strip() else {})])
            else:
                calls = json.loads(rest)
                steps.append([(c["name"], c.get("arguments", {})) for c in calls])
        except (ValueError, KeyError, TypeError):
            continue  # a malformed script line is just text
    return steps


def _next_tool_calls(model: str, prompt: str, turn: list[ChatMessage]) -> list[tuple[str, dict[str, Any]]]:
    if model != "tools":
        return []
    steps = _scripted_steps(prompt) or [[("list_files", {})]]
    done = sum(1 for m in turn if m.role == "assistant" and any(p.type == "tool_call" for p in m.parts))
    return steps[done] if done < len(steps) else []


def _answer(model: str, prompt: str, turn: list[ChatMessage]) -> str:
    if model == "echo":
        return prompt
    if model == "tools":
        results = [p for m in turn if m.role == "tool" for p in m.parts if p.type == "tool_result"]
        if not results:
            return "I had no tool results to report."
        last = results[-1]
        status = "failed" if last.is_error else "returned"
        preview = last.text if len(last.text) <= 400 else last.text[:400] + "…"
        # Images the tools returned reach the model as bytes (or, for a model without vision, as notes).
        seen = [
            f"\n[image {p.mime_type} {p.width}x{p.height} {len(p.data)} bytes]"
            for m in turn
            if m.role == "tool"
            for p in m.parts
            if p.type == "image" and p.data is not None
        ]
        return f"I ran {len(results)} tool call(s). The last one {status}:\n{preview}" + "".join(seen)
    topic = " ".join(prompt.split()[:12]) or "your question"
    return (
        f"Here is my answer about “{topic}”: the short version is that it depends on the details, "
        "and the simplest explanation that fits every fact is usually right. ✓"
    )


def _words(text: str) -> list[str]:
    """Split into small deltas that concatenate back to exactly ``text``."""
    return re.findall(r"\S+\s*|\s+", text)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _usage(messages: list[ChatMessage], output_words: int) -> Usage:
    input_words = sum(len(p.text.split()) for m in messages for p in m.parts)
    return Usage(input_tokens=input_words, output_tokens=output_words, reasoning_tokens=None)
