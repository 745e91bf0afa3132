"""The interface every provider adapter implements, and the normalized events it yields.

An adapter turns a ``ProviderRequest`` into a stream of normalized events::

    async with adapter.stream(request) as events:
        async for event in events:
            ...

Blocks are numbered by ``index`` in the order the model produced them (0, 1, 2, ...
within one response); deltas of different blocks may interleave. ``BlockEnd.part`` is
the complete block with its round-trip data. Failures are raised as
``daemon.errors.ProviderError`` (or a subclass), never yielded.
"""

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol

import msgspec

from daemon.conversation import ChatMessage, Part
from protocol.objects import Thinking, Usage

BlockKind = Literal["thinking", "text", "tool_call"]
# end_turn | max_tokens | tool_use | refusal; adapters report tool_use whenever the
# response asked for tools, whatever the provider's own finish value was.
StopKind = Literal["end_turn", "max_tokens", "tool_use", "refusal"]


class BlockStart(msgspec.Struct, kw_only=True):
    index: int
    kind: BlockKind
    call_id: str | None = None  # tool_call only
    name: str | None = None  # tool_call only


class BlockDelta(msgspec.Struct, kw_only=True):
    index: int
    delta: str  # new thinking/text, or a raw JSON fragment of tool arguments


class BlockEnd(msgspec.Struct, kw_only=True):
    index: int
    part: Part


class UsageUpdate(msgspec.Struct, kw_only=True):
    usage: Usage  # cumulative: replaces any earlier UsageUpdate of the same response


class Stop(msgspec.Struct, kw_only=True):
    reason: StopKind
    raw: str | None = None  # the provider's own value, for logs


class KeepAlive(msgspec.Struct, kw_only=True):
    """The stream is alive but carried nothing (Anthropic's ``ping``, an SSE keep-alive
    comment where the adapter's SSE layer exposes them). It only resets the agent's stall
    watchdog: a model thinking quietly behind keep-alives is not a stalled stream."""


ProviderEvent = BlockStart | BlockDelta | BlockEnd | UsageUpdate | Stop | KeepAlive


class ToolSpec(msgspec.Struct, kw_only=True):
    name: str
    description: str
    input_schema: dict[str, Any]


class ProviderRequest(msgspec.Struct, kw_only=True):
    provider: str  # provider name, e.g. "anthropic", "deepseek", "local"
    model: str  # the provider-side model name, e.g. "claude-sonnet-4-5"
    thinking: Thinking  # resolved; adapters send thinking.request_params as given
    messages: list[ChatMessage]
    system_prompt: str | None = None
    tools: list[ToolSpec] = []
    max_output_tokens: int | None = None


class Provider(Protocol):
    name: str

    def stream(self, request: ProviderRequest) -> AbstractAsyncContextManager[AsyncIterator[ProviderEvent]]:
        """Open one streamed response; leaving the context closes the connection."""
        ...


def decode_arguments(raw: str) -> dict[str, Any] | None:
    """A tool call's raw JSON arguments as an object; ``{}`` for empty text, None when the
    text is not a JSON object (a call cut off mid-way)."""
    if not raw.strip():
        return {}
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def replayable(part: Part, request: ProviderRequest) -> bool:
    """Whether a part's round-trip data may be sent in ``request`` (same provider and model)."""
    return part.belongs_to(request.provider, request.model)
