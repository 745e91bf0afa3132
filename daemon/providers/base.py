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

import base64
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol

import msgspec

from daemon.conversation import ChatMessage, Part, ToolSpec
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


class StreamLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How much one streamed response may hold us to (``[reliability]`` in config.toml).

    A stream event (an SSE event or an NDJSON line) larger than ``max_event_bytes``, or a
    body that decompresses to more than ``max_response_bytes``, ends the response with a
    ``ProviderError``: a provider that never sends a line break, or a gzip bomb, must not
    grow the daemon without bound.
    """

    max_event_bytes: int = 16 * 1024 * 1024
    max_response_bytes: int = 1024 * 1024 * 1024


class ProviderRequest(msgspec.Struct, kw_only=True):
    provider: str  # provider name, e.g. "anthropic", "deepseek", "local"
    model: str  # the provider-side model name, e.g. "claude-sonnet-4-5"
    thinking: Thinking  # resolved; adapters send thinking.request_params as given
    messages: list[ChatMessage]
    system_prompt: str | None = None
    tools: list[ToolSpec] = []
    max_output_tokens: int | None = None
    # The model's own output limit: an adapter that must send some max_tokens never sends more.
    output_cap: int | None = None
    limits: StreamLimits = msgspec.field(default_factory=StreamLimits)
    # Native structured output: the schema the reply's text must match, as ``Provider.structured_output``
    # returned it for this API (None: none asked; a turn's ``final_output`` tool is then among ``tools``).
    output_schema: dict[str, Any] | None = None


class Provider(Protocol):
    """What the daemon asks of a provider adapter: all of it, so nobody probes for a method.

    Adapters subclass it explicitly, so the type checker holds each one to these signatures,
    and inherit the defaults of the members most of them need nothing of their own for.
    """

    name: str  # the provider's name in config.toml, e.g. "anthropic", "deepseek"

    def stream(self, request: ProviderRequest) -> AbstractAsyncContextManager[AsyncIterator[ProviderEvent]]:
        """Open one streamed response; leaving the context closes the connection.

        HTTP errors raise on entry, stream errors from the iterator, both as ``ProviderError``.
        """
        ...

    async def aclose(self) -> None:
        """Close the adapter's connections (the daemon is shutting down); it is not used again."""
        ...

    def adjust_thinking(self, request: ProviderRequest) -> Thinking | None:
        """The thinking this request really gets when the API cannot take ``request.thinking``
        for this history (a copy with the reason), or None to keep it as resolved.

        Most APIs take every resolved level whatever the history holds: by default, None.
        """
        return None

    def structured_output(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """``schema`` (an object root) as this API's native structured output is sent it
        (``ProviderRequest.output_schema``), or None when it has none or its strict mode cannot
        take this schema unchanged (``daemon.vendors.structured_output``); the agent then offers
        a ``final_output`` tool. By default, None."""
        return None


# Deeper arguments are refused: no tool takes them, and values nested close to Python's
# recursion limit would fail later, when encoded for the client or read back from the store.
MAX_ARGUMENT_DEPTH = 100


def decode_arguments(raw: str) -> dict[str, Any] | None:
    """A tool call's raw JSON arguments as an object; ``{}`` for empty text, None when the
    text is not a JSON object (a call cut off mid-way) or nests deeper than ``MAX_ARGUMENT_DEPTH``.

    Adapters keep such text as ``provider_data["invalid_arguments"]`` (see ``invalid_arguments``).
    """
    if not raw.strip():
        return {}
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or _nested_deeper_than(value, MAX_ARGUMENT_DEPTH):
        return None
    return value


def whole_arguments(value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(arguments, provider_data) for arguments that arrived as an object (Gemini, Ollama):
    themselves, or ``{}`` with their text kept as ``invalid_arguments`` when they nest deeper
    than ``MAX_ARGUMENT_DEPTH``, as ``decode_arguments`` refuses streamed ones."""
    if not _nested_deeper_than(value, MAX_ARGUMENT_DEPTH):
        return value, None
    return {}, {"invalid_arguments": json.dumps(value, ensure_ascii=False)}


def invalid_arguments(part: Part) -> str | None:
    """The raw text of a tool call whose arguments could not be decoded, else None."""
    raw = (part.provider_data or {}).get("invalid_arguments") if part.type == "tool_call" else None
    return raw if isinstance(raw, str) else None


def arguments_problem(raw: str) -> str:
    """What is wrong with raw tool-call arguments that ``decode_arguments`` refused, for the model."""
    try:
        value = msgspec.json.decode(raw)
        too_deep = isinstance(value, (dict, list)) and _nested_deeper_than(value, MAX_ARGUMENT_DEPTH)
    except RecursionError:
        too_deep = True
    except msgspec.DecodeError as exc:
        return f"The arguments of this call are not valid JSON ({exc}); call the tool again with a JSON object."
    if too_deep:
        return (
            f"The arguments of this call are nested more than {MAX_ARGUMENT_DEPTH} levels deep; "
            "call the tool again with simpler arguments."
        )
    return "The arguments of this call are not a JSON object; call the tool again with a JSON object."


def _nested_deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def image_base64(part: Part) -> str:
    """An image part's bytes as base64 (the agent fills ``data`` for the images a request sends)."""
    return base64.b64encode(part.data or b"").decode("ascii")


def sendable_image(part: Part) -> bool:
    """Whether ``part`` is an image whose bytes this request carries (the others arrive as text notes)."""
    return part.type == "image" and part.data is not None


def replayable(part: Part, request: ProviderRequest) -> bool:
    """Whether a part's round-trip data may be sent in ``request`` (same provider and model)."""
    return part.belongs_to(request.provider, request.model)
