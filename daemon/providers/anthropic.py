"""The Anthropic Messages API adapter: request building, history replay, SSE parsing, errors.

Owns everything Anthropic-specific between a ``ProviderRequest`` and the normalized
events of ``daemon.providers.base``:

* the request body (``POST {base_url}/v1/messages``, ``stream: true``) with the resolved
  thinking fragment merged in as given, and the interleaved-thinking beta header for
  budget-mode requests with tools;
* turning stored ``ChatMessage`` history into Anthropic ``messages``, replaying signed
  ``thinking`` and ``redacted_thinking`` blocks byte-exact to the provider and model that
  produced them and to nobody else;
* ``adjust_thinking``: switching thinking off for a request the API would otherwise reject
  (asked once per request by ``daemon.agent.call_thinking``, which also tells the client);
* parsing the SSE stream (``message_start`` … ``message_stop``, ``ping``, ``error``) into
  ``BlockStart/BlockDelta/BlockEnd/UsageUpdate/Stop``;
* mapping HTTP and in-stream errors to ``ProviderError``.

Wire reference: ``tests/fixtures/providers/WIRE-FORMATS.md`` §1.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
from httpx_sse import SSEError

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderAuthError, ProviderError
from daemon.models.budgets import BASE_MAX_TOKENS
from daemon.providers.base import (
    BlockDelta,
    BlockEnd,
    BlockKind,
    BlockStart,
    KeepAlive,
    Provider,
    ProviderEvent,
    ProviderRequest,
    Stop,
    StopKind,
    UsageUpdate,
    decode_arguments,
    image_base64,
    replayable,
    sendable_image,
)
from daemon.providers.http import (
    LazyClient,
    aiter_sse,
    apply_retry_hint,
    close_response,
    connection_error,
    ended_early,
    open_stream,
    status_error,
)
from daemon.providers.usage import normalized_usage
from daemon.vendors.structured_output import anthropic_format
from protocol.objects import Thinking

log = logging.getLogger("ponder.providers.anthropic")

ANTHROPIC_VERSION = "2023-06-01"
INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"
# ``max_tokens`` is required. 16k sits inside the output cap of every current Claude model
# (64k/128k) and leaves room for a long answer; the catalog's thinking fragment or the
# request's own cap override it.

_STOP_REASONS: dict[str, StopKind] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    # pause_turn: a server tool paused a long turn; for us the response simply ended.
    "pause_turn": "end_turn",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "tool_use": "tool_use",
    "refusal": "refusal",
}
# In-stream error types worth retrying (the HTTP equivalents are 429/500/504/529).
_RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


class AnthropicProvider(Provider):
    """One configured Anthropic endpoint; holds one lazily created HTTP client."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self._clients = LazyClient()

    async def aclose(self) -> None:
        await self._clients.aclose()

    # -- thinking ---------------------------------------------------------------------

    def adjust_thinking(self, request: ProviderRequest) -> Thinking | None:
        """A copy of ``request.thinking`` switched off for this request, or None to keep it.

        In budget mode (``thinking.type == "enabled"``) the API requires the last assistant
        message of a tool loop to *start* with a thinking (or redacted_thinking) block when
        thinking is on. After a model switch, or when the stream that made the tool call was
        interrupted before the signature arrived, we have no such block to send back, so
        this one request must go without thinking (the API would otherwise reject it or
        silently disable thinking without telling the user).

        Adaptive mode is left alone on purpose: it accepts assistant turns without thinking
        (the model itself may skip thinking on a simple step, so "no thinking block" is the
        normal case there), and "off" cannot be honoured on always-thinking models anyway.
        """
        thinking = request.thinking
        config = thinking.request_params.get("thinking")
        if not isinstance(config, dict) or config.get("type") != "enabled":
            return None
        assistant = _tool_loop_assistant(request.messages)
        if assistant is None:
            return None
        blocks = _assistant_blocks(assistant, request)
        if blocks and blocks[0]["type"] in ("thinking", "redacted_thinking"):
            return None
        return msgspec.structs.replace(
            thinking,
            effective="off",
            budget_tokens=None,
            request_params={},
            reason=(
                "Thinking is off for this step because the tool call being answered has no signed "
                f"thinking block from {request.model} (model switch or interrupted stream), "
                "which Anthropic requires to continue a tool loop with thinking on."
            ),
        )

    # -- request ----------------------------------------------------------------------

    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        """The JSON body for ``request``. Its thinking is sent as given: the agent applied
        ``adjust_thinking`` once for this request and told the client (``agent.call_thinking``)."""
        thinking = request.thinking
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens or min(BASE_MAX_TOKENS, request.output_cap or BASE_MAX_TOKENS),
            "messages": build_messages(request),
        }
        if request.system_prompt:
            body["system"] = request.system_prompt
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools
            ]
        body["stream"] = True
        # The catalog's fragment is sent as given: its max_tokens (budget mode: budget plus
        # answer room) wins over ours. No sampling parameters, ever: thinking rejects them
        # and the newest models reject any non-default value.
        body.update(thinking.request_params)
        if request.output_schema is not None:  # beside the thinking's effort, in the same object
            output_config = dict(body.get("output_config") or {})
            output_config["format"] = {"type": "json_schema", "schema": request.output_schema}
            body["output_config"] = output_config
        return body

    def structured_output(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        return anthropic_format(schema)

    def build_headers(self, body: dict[str, Any]) -> dict[str, str]:
        headers = dict(self.config.headers)
        betas = [b.strip() for b in headers.pop("anthropic-beta", "").split(",") if b.strip()]
        thinking = body.get("thinking")
        # Budget mode interleaves thinking between tool calls only with this beta (adaptive
        # mode does it by itself); the API accepts the header on every model.
        if isinstance(thinking, dict) and thinking.get("type") == "enabled" and body.get("tools"):
            if INTERLEAVED_THINKING_BETA not in betas:
                betas.append(INTERLEAVED_THINKING_BETA)
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        headers.update(
            {
                "anthropic-version": ANTHROPIC_VERSION,
                "content-type": "application/json",
                "accept": "text/event-stream",
            }
        )
        if self.config.api_key is not None:
            headers["x-api-key"] = self.config.api_key.reveal()
        return headers

    # -- streaming --------------------------------------------------------------------

    @asynccontextmanager
    async def stream(self, request: ProviderRequest) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
        """Open one streamed response. HTTP errors raise here, on entry; stream errors
        raise from the iterator. Leaving the context closes the connection."""
        if self.config.api_key is None and self.config.needs_key:
            raise ProviderAuthError(
                f"{self.name} has no API key: {self.config.key_hint}.",
                provider=self.name,
            )
        body = self.build_body(request)
        headers = self.build_headers(body)
        url = self.config.base_url.rstrip("/") + "/v1/messages"
        key = self.config.api_key.reveal() if self.config.api_key is not None else ""
        async with open_stream(
            self._clients,
            url,
            provider=self.name,
            headers=headers,
            content=msgspec.json.encode(body),
            map_error=self._status_error,
            secrets=(key,),
        ) as response:
            events = self._events(response, request)
            try:
                yield events
            finally:
                await events.aclose()

    def _status_error(self, response: httpx.Response, raw: bytes) -> ProviderError:
        error = status_error(self.name, response.status_code, response.headers, raw, hint=self.config.key_hint)
        # Anthropic's own retry signal; and a monthly spend cap answers 429 but will not lift by waiting.
        return apply_retry_hint(error, response.headers, final=_error_code(raw) == "enforced_spend_limit_reached")

    async def _events(self, response: httpx.Response, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        parser = StreamParser(provider=self.name, request=request)
        sse = aiter_sse(response, self.name, request.limits)
        try:
            try:
                async for event in sse:
                    if event is None:  # a comment line: the connection is alive
                        yield KeepAlive()
                        continue
                    if not event.data:  # e.g. a bare ``retry:`` block; carries nothing
                        continue
                    for normalized in parser.feed(event.event, event.data):
                        yield normalized
                    if parser.finished:
                        return
            except SSEError as exc:  # (an httpx.TransportError subclass, so first)
                content_type = response.headers.get("content-type", "")
                raise ProviderError(
                    f"{self.name} answered with content-type {content_type!r} instead of an event stream.",
                    provider=self.name,
                    status=response.status_code,
                    kind="invalid_response",
                ) from exc
            except httpx.RequestError as exc:
                raise connection_error(self.name, exc, midstream=True) from exc
            raise ended_early(self.name, "message_stop")
        finally:
            # Unwinds httpx's nested body generators whether we finished, failed or were
            # abandoned; trio warns about any left suspended (see close_response).
            await close_response(response, sse)


# -- history ---------------------------------------------------------------------------


def build_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """Anthropic ``messages`` for the stored history of ``request``.

    Tool results become user messages of ``tool_result`` blocks; consecutive messages of
    the same role are merged (the API wants strict alternation); empty messages vanish.
    """
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "assistant":
            role, content = "assistant", _assistant_blocks(message, request)
        else:
            role, content = "user", _user_blocks(message.parts)
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    for entry in out:
        # A lone text block is written as a plain string, as the API docs do.
        blocks = entry["content"]
        if entry["role"] == "user" and len(blocks) == 1 and blocks[0]["type"] == "text":
            entry["content"] = blocks[0]["text"]
    return out


def _assistant_blocks(message: ChatMessage, request: ProviderRequest) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if part.type == "thinking":
            # Thinking is only ever replayed as itself, to the model that signed it:
            # another model cannot verify it, and pasting it as text would put words in
            # this model's mouth. Unsigned thinking (interrupted stream) is unusable.
            if not replayable(part, request):
                continue
            if part.redacted:
                data = (part.provider_data or {}).get("data")
                if isinstance(data, str) and data:
                    blocks.append({"type": "redacted_thinking", "data": data})
            elif part.signature is not None:
                blocks.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
        elif part.type == "text":
            if part.text:  # the API rejects empty text blocks
                blocks.append({"type": "text", "text": part.text})
        elif part.type == "tool_call":
            blocks.append(
                {"type": "tool_use", "id": part.call_id or "", "name": part.name or "", "input": part.arguments or {}}
            )
    return blocks


def _user_blocks(parts: list[Part]) -> list[dict[str, Any]]:
    """A user (or tool) message's blocks; an image a tool returned goes inside its ``tool_result``."""
    blocks: list[dict[str, Any]] = []
    results: dict[str, dict[str, Any]] = {}
    for part in parts:
        if sendable_image(part):
            image = {
                "type": "image",
                "source": {"type": "base64", "media_type": part.mime_type, "data": image_base64(part)},
            }
            result = results.get(part.call_id or "") if part.call_id else None
            if result is not None:
                text = result.pop("content", None)
                result["content"] = [
                    *([{"type": "text", "text": text}] if isinstance(text, str) else text or []),
                    image,
                ]
            else:
                blocks.append(image)
            continue
        block = _user_block(part)
        if block is not None:
            if block["type"] == "tool_result":
                results[block["tool_use_id"]] = block
            blocks.append(block)
    return blocks


def _user_block(part: Part) -> dict[str, Any] | None:
    if part.type == "text":
        return {"type": "text", "text": part.text} if part.text else None
    if part.type == "tool_result":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.call_id or ""}
        if part.text:  # content is optional; an empty string would be rejected as empty text
            block["content"] = part.text
        if part.is_error:
            block["is_error"] = True
        return block
    return None


def _tool_loop_assistant(messages: list[ChatMessage]) -> ChatMessage | None:
    """The assistant message whose tool calls the history's trailing tool results answer.

    User messages after those results (a steer that joined the turn) do not end the loop: they
    go in the same user message as the results (``build_messages`` merges them), which the API
    still reads as the answer to that assistant message's tool calls."""
    saw_result = False
    for message in reversed(messages):
        if message.role == "user" and not saw_result:
            continue
        if message.role == "tool":
            saw_result = True
            continue
        if message.role == "assistant" and saw_result and any(p.type == "tool_call" for p in message.parts):
            return message
        return None
    return None


def _error_code(raw: bytes) -> str | None:
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    details = data.get("error", {}).get("details") if isinstance(data, dict) else None
    if isinstance(details, dict) and isinstance(code := details.get("error_code"), str):
        return code
    return None


# -- stream parsing --------------------------------------------------------------------


@dataclass
class _Block:
    kind: BlockKind
    text: list[str] = field(default_factory=list)  # thinking/text, or raw JSON fragments
    signature: list[str] = field(default_factory=list)
    call_id: str | None = None
    name: str | None = None
    initial_input: dict[str, Any] | None = None
    open: bool = True


# Where each delta type carries its text.
_DELTA_FIELDS = {"thinking_delta": "thinking", "text_delta": "text", "input_json_delta": "partial_json"}


@dataclass
class StreamParser:
    """Anthropic SSE events in, normalized events out. Pure: no I/O, raises ProviderError."""

    provider: str
    request: ProviderRequest
    finished: bool = False
    _blocks: dict[int, _Block] = field(default_factory=dict)
    _usage: dict[str, int] = field(default_factory=dict)
    _stop_raw: str | None = None

    def feed(self, name: str, data: str) -> list[ProviderEvent]:
        try:
            payload = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                f"{self.provider} sent a stream event that is not valid JSON.",
                provider=self.provider,
                kind="invalid_event",
            ) from exc
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or name
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            log.debug("ignoring an unknown %s stream event %r", self.provider, kind)  # new event types
            return []
        try:
            return handler(self, payload)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # A field missing or of the wrong type (``"index": null``, ``"delta": "x"``).
            raise ProviderError(
                f"{self.provider} sent a malformed {kind} event.",
                provider=self.provider,
                kind="invalid_event",
            ) from exc

    def _on_ping(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        return [KeepAlive()]

    def _on_message_start(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        message = payload.get("message") or {}
        return self._usage_update(message.get("usage"))

    def _on_content_block_start(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        index = int(payload.get("index", len(self._blocks)))
        raw = payload.get("content_block") or {}
        block_type = raw.get("type")
        if block_type == "redacted_thinking":
            # Complete at start and never followed by deltas: open and close it at once.
            block = self._blocks[index] = _Block(kind="thinking", open=False)
            part = Part(
                type="thinking",
                redacted=True,
                text="",
                provider=self.request.provider,
                model=self.request.model,
                provider_data={"data": raw.get("data", "")},
            )
            return [BlockStart(index=index, kind="thinking"), BlockEnd(index=index, part=part)]
        if block_type == "thinking":
            block = _Block(kind="thinking")
            initial, signature = raw.get("thinking") or "", raw.get("signature") or ""
            if signature:
                block.signature.append(signature)
        elif block_type == "text":
            block = _Block(kind="text")
            initial = raw.get("text") or ""
        elif block_type == "tool_use":
            block = _Block(kind="tool_call", call_id=raw.get("id"), name=raw.get("name"))
            initial = ""
            if isinstance(raw.get("input"), dict) and raw["input"]:
                block.initial_input = raw["input"]
        else:
            return []  # server tools, fallback, future block types: not ours to show or replay
        self._blocks[index] = block
        events: list[ProviderEvent] = [BlockStart(index=index, kind=block.kind, call_id=block.call_id, name=block.name)]
        if initial:
            block.text.append(initial)
            events.append(BlockDelta(index=index, delta=initial))
        return events

    def _on_content_block_delta(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        index = int(payload.get("index", -1))
        block = self._blocks.get(index)
        if block is None or not block.open:
            return []
        delta = payload.get("delta") or {}
        delta_type = delta.get("type")
        if delta_type == "signature_delta":
            block.signature.append(delta.get("signature") or "")
            return []
        fragment = _DELTA_FIELDS.get(delta_type or "")
        if fragment is None:
            return []  # citations_delta and future delta types
        text = delta.get(fragment) or ""
        if not text:  # real streams send "" before the signature and as the first JSON piece
            return []
        block.text.append(text)
        return [BlockDelta(index=index, delta=text)]

    def _on_content_block_stop(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        index = int(payload.get("index", -1))
        block = self._blocks.get(index)
        if block is None or not block.open:
            return []
        block.open = False
        text = "".join(block.text)
        if block.kind == "thinking":
            part = Part(
                type="thinking",
                text=text,
                signature="".join(block.signature) or None,
                provider=self.request.provider,
                model=self.request.model,
            )
        elif block.kind == "text":
            part = Part(type="text", text=text)
        else:
            arguments, provider_data = self._arguments(block)
            part = Part(
                type="tool_call",
                call_id=block.call_id,
                name=block.name,
                arguments=arguments,
                provider_data=provider_data,
            )
        return [BlockEnd(index=index, part=part)]

    def _arguments(self, block: _Block) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(arguments, provider_data): the parsed input object, or {} plus the raw text."""
        raw = "".join(block.text)
        if not raw.strip():
            return dict(block.initial_input or {}), None
        arguments = decode_arguments(raw)
        if arguments is not None:
            return arguments, None
        # Only a truncated response (max_tokens in the middle of a call) gets here; its
        # Stop says max_tokens, so nothing runs the call. Keep the raw text for the record
        # instead of failing the whole response.
        return {}, {"invalid_arguments": raw}

    def _on_message_delta(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        stop_reason = (payload.get("delta") or {}).get("stop_reason")
        if stop_reason:
            self._stop_raw = stop_reason
        return self._usage_update(payload.get("usage"))

    def _on_message_stop(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        self.finished = True
        raw = self._stop_raw
        reason: StopKind = _STOP_REASONS.get(raw or "", "end_turn")
        if raw not in ("max_tokens", "model_context_window_exceeded", "refusal") and any(
            b.kind == "tool_call" for b in self._blocks.values()
        ):
            reason = "tool_use"  # the response asked for tools, whatever else it says
        return [Stop(reason=reason, raw=raw)]

    def _on_error(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        error = payload.get("error") or {}
        kind = str(error.get("type") or "error")
        message = str(error.get("message") or kind)
        raise ProviderError(
            f"{self.provider} stream failed: {message} ({kind}).",
            provider=self.provider,
            retryable=kind in _RETRYABLE_STREAM_ERRORS,
            kind=kind,
        )

    def _usage_update(self, raw: Any) -> list[ProviderEvent]:
        if not isinstance(raw, dict):
            return []
        # Usage is cumulative, but later events may omit fields (older streams send only
        # output_tokens in message_delta): keep the latest value of each field.
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            if isinstance(raw.get(key), int):
                self._usage[key] = raw[key]
        details = raw.get("output_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("thinking_tokens"), int):
            self._usage["thinking_tokens"] = details["thinking_tokens"]
        usage = normalized_usage(
            input_tokens=self._usage.get("input_tokens"),
            output_tokens=self._usage.get("output_tokens"),  # includes thinking
            reasoning_tokens=self._usage.get("thinking_tokens"),
            cache_read_tokens=self._usage.get("cache_read_input_tokens"),
            cache_write_tokens=self._usage.get("cache_creation_input_tokens"),
            input_excludes_cache=True,  # Anthropic's input_tokens leaves out cache reads and writes
        )
        return [UsageUpdate(usage=usage)]


# Anthropic's stream event types, by the ``type`` field; an unknown type is logged and skipped.
_HANDLERS: dict[str, Callable[[StreamParser, dict[str, Any]], list[ProviderEvent]]] = {
    "ping": StreamParser._on_ping,
    "message_start": StreamParser._on_message_start,
    "content_block_start": StreamParser._on_content_block_start,
    "content_block_delta": StreamParser._on_content_block_delta,
    "content_block_stop": StreamParser._on_content_block_stop,
    "message_delta": StreamParser._on_message_delta,
    "message_stop": StreamParser._on_message_stop,
    "error": StreamParser._on_error,
}


__all__ = ["AnthropicProvider", "StreamParser", "build_messages"]
