"""The Google Gemini adapter: ``models/{model}:streamGenerateContent?alt=sse``.

It owns three things: turning stored history into Gemini ``contents`` (with thought
signatures put back on the very parts they arrived on), parsing the CRLF-framed SSE
stream into normalized events, and mapping Gemini's gRPC-style errors (``RetryInfo``,
``API_KEY_INVALID``) onto ``ProviderError``.

Wire facts this module relies on (WIRE-FORMATS.md §4, fixtures in ``gemini/``):

* Streamed parts are fragments: consecutive text (or thought) parts continue one block,
  which is what clients see, however the signatures cut it. A ``thoughtSignature`` ends
  the part it rides on (Gemini 2.5 signs the first part, mid-sentence); an *empty* text
  part carrying one (Gemini 3's last part) is a part of its own. Both go back exactly as
  they came (``assembler.BlockAssembler`` records the cuts), and no empty block is shown.
* ``functionCall`` parts arrive whole. Gemini 3 gives each an ``id``; it goes back on the
  ``functionCall`` and on its ``functionResponse``, so parallel calls of one function pair
  by id rather than by position. Older models send none: the adapter then derives a call
  id from the response id and the call's position, and sends neither back.
* ``finishReason`` is ``STOP`` for tool-calling turns too; the presence of calls decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx_sse

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderAuthError, ProviderError
from daemon.providers.assembler import BlockAssembler, pieces_of
from daemon.providers.base import (
    BlockKind,
    KeepAlive,
    Provider,
    ProviderEvent,
    ProviderRequest,
    Stop,
    StopKind,
    UsageUpdate,
    image_base64,
    replayable,
    sendable_image,
    whole_arguments,
)
from daemon.providers.http import (
    LazyClient,
    aiter_sse,
    close_response,
    connection_error,
    deep_merge,
    error_message_from_body,
    open_stream,
    status_error,
)
from daemon.providers.usage import count, normalized_usage
from daemon.util.clock import new_id
from daemon.vendors.level_rejections import parse_level_rejection
from daemon.vendors.structured_output import gemini_schema
from protocol.objects import Usage

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
# Gemini 3 rejects a current-turn step whose first functionCall has no signature. For calls
# it did not generate itself (history from another model) Google documents this stand-in.
DUMMY_SIGNATURE = "skip_thought_signature_validator"

_REFUSAL_REASONS = frozenset(
    {"SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY", "LANGUAGE"}
)
# The model tried to call a tool and botched it; sampling again usually works.
_RETRYABLE_FINISH = frozenset({"MALFORMED_FUNCTION_CALL"})
_ERROR_FINISH = frozenset({"UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)s\s*$")


class GeminiProvider(Provider):
    """Streams one Gemini response per ``stream()``; the HTTP client is made on first use."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self._base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._clients = LazyClient()

    def structured_output(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        return gemini_schema(schema)

    async def aclose(self) -> None:
        await self._clients.aclose()

    def url(self, model: str) -> str:
        return f"{self._base_url}/v1beta/models/{model.removeprefix('models/')}:streamGenerateContent?alt=sse"

    @asynccontextmanager
    async def stream(self, request: ProviderRequest) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
        if self.config.api_key is None:
            raise ProviderAuthError(f"{self.name} has no API key: {self.config.key_hint}.", provider=self.name)
        key = self.config.api_key.reveal()
        headers = {
            **self.config.headers,
            "x-goog-api-key": key,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        content = json.dumps(build_body(request), ensure_ascii=False).encode("utf-8")
        async with open_stream(
            self._clients,
            self.url(request.model),
            provider=self.name,
            headers=headers,
            content=content,
            map_error=self._status_error,
            secrets=(key,),
        ) as response:
            source = aiter_sse(response, self.name, request.limits)
            events = self._events(source, request)
            try:
                yield events
            finally:
                await events.aclose()
                await close_response(response, source)

    def _status_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        # A refused thinking level (Gemini names the level, not the ones it takes).
        rejected = parse_level_rejection("gemini", response.status_code, body, provider=self.name)
        return rejected or gemini_status_error(
            self.name, response.status_code, response.headers, body, self.config.key_hint
        )

    async def _events(
        self, source: AsyncIterator[httpx_sse.ServerSentEvent | None], request: ProviderRequest
    ) -> AsyncGenerator[ProviderEvent, None]:
        parser = _StreamParser(request)
        try:
            async for sse in source:
                if sse is None:  # a comment line: the connection is alive
                    yield KeepAlive()
                    continue
                if not sse.data:  # httpx-sse dispatches retry-only blocks with empty data
                    continue
                try:
                    chunk = json.loads(sse.data)
                except ValueError:
                    raise ProviderError(
                        f"{self.name} sent an unreadable stream frame.",
                        provider=self.name,
                        retryable=True,
                        kind="bad_frame",
                    ) from None
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:
                    # Undocumented for this endpoint; if Google ever sends one, read it like an HTTP error body.
                    error = chunk["error"] if isinstance(chunk["error"], dict) else {}
                    status = _int(error.get("code")) or 500
                    raise gemini_status_error(
                        self.name, status, httpx.Headers(), json.dumps(chunk).encode(), self.config.key_hint
                    )
                for event in parser.feed(chunk):
                    yield event
        except httpx.TransportError as exc:
            raise connection_error(self.name, exc, midstream=True) from None
        except httpx_sse.SSEError as exc:
            raise ProviderError(
                f"{self.name} did not answer with an event stream: {exc}", provider=self.name, kind="bad_stream"
            ) from None
        for event in parser.finish(self.name):
            yield event


def gemini_status_error(
    provider: str, status: int, headers: httpx.Headers, body: bytes, key_hint: str
) -> ProviderError:
    """A non-2xx answer (or an error frame) as a ``ProviderError``, with Gemini's own retry and auth signals."""
    details = _error_details(body)
    # A wrong key is a 400 INVALID_ARGUMENT with reason API_KEY_INVALID, not a 401.
    if status == 400 and any(d.get("reason") == "API_KEY_INVALID" for d in details):
        message, _ = error_message_from_body(body)
        return ProviderAuthError(
            f"{provider} rejected the API key ({message or 'API key not valid'}). Check the credentials ({key_hint}).",
            provider=provider,
            status=status,
            kind="API_KEY_INVALID",
        )
    error = status_error(provider, status, headers, body, hint=key_hint)
    if error.retryable and error.retry_after is None:
        for detail in details:
            if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
                error.retry_after = parse_duration(detail.get("retryDelay"))
    return error


def parse_duration(value: Any) -> float | None:
    """Seconds from a protobuf JSON duration such as ``"34s"`` or ``"0.5s"``."""
    match = _DURATION.match(value) if isinstance(value, str) else None
    return float(match.group(1)) if match else None


def _error_details(body: bytes) -> list[dict[str, Any]]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return []
    if isinstance(data, list) and data:  # the non-SSE endpoint wraps errors in an array
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- request body


def build_body(request: ProviderRequest) -> dict[str, Any]:
    """The JSON body for ``request``: contents, system instruction, tools, generation config."""
    body: dict[str, Any] = {"contents": build_contents(request)}
    if request.system_prompt:
        body["systemInstruction"] = {"parts": [{"text": request.system_prompt}]}
    if request.tools:
        body["tools"] = [
            {
                "functionDeclarations": [
                    {"name": t.name, "description": t.description, **_parameters(t.input_schema)} for t in request.tools
                ]
            }
        ]
    if request.max_output_tokens is not None:
        body["generationConfig"] = {"maxOutputTokens": request.max_output_tokens}
    if request.output_schema is not None:
        body.setdefault("generationConfig", {}).update(
            {"responseMimeType": "application/json", "responseJsonSchema": request.output_schema}
        )
    return deep_merge(body, request.thinking.request_params)


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    # Gemini's OpenAPI-subset ``parameters`` rejects the JSON Schema dialect marker.
    return {k: v for k, v in schema.items() if k != "$schema"}


# JSON Schema that Gemini's OpenAPI-subset ``parameters`` cannot hold (a Pydantic model's ``$defs``
# and ``$ref``s, ``const``, type lists): such a tool's schema goes as ``parametersJsonSchema``.
_BEYOND_OPENAPI = ("$ref", "$defs", "definitions", "const", "additionalProperties", "prefixItems", "allOf", "oneOf")


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(schema)
    if any(f'"{word}"' in text for word in _BEYOND_OPENAPI) or '"type": [' in text:
        return {"parametersJsonSchema": _schema(schema)}
    return {"parameters": _schema(schema)}


def build_contents(request: ProviderRequest) -> list[dict[str, Any]]:
    """History as Gemini contents; adjacent same-role contents are merged (FC1, FC2 then FR1, FR2)."""
    calls = [p for m in request.messages if m.role == "assistant" for p in m.parts if p.type == "tool_call"]
    call_names = {p.call_id: p.name for p in calls if p.name}
    call_ids = {p.call_id: _gemini_call_id(p, request) for p in calls}
    contents: list[dict[str, Any]] = []
    for message in request.messages:
        role = "model" if message.role == "assistant" else "user"
        parts = _model_parts(message, request) if role == "model" else _user_parts(message, call_names, call_ids)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    _sign_current_turn_calls(contents)
    return contents


def _model_parts(message: ChatMessage, request: ProviderRequest) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        own = replayable(part, request)
        signature = part.signature if own else None
        out: dict[str, Any]
        if part.type == "tool_call":
            call: dict[str, Any] = {"name": part.name or "", "args": part.arguments or {}}
            gemini_id = _gemini_call_id(part, request)
            if gemini_id is not None:
                call["id"] = gemini_id
            out = {"functionCall": call}
        elif part.type in ("thinking", "text") and not part.redacted:
            pieces = pieces_of(part) if own else None
            for text, kind, piece_signature in pieces or [(part.text, part.type, signature)]:
                parts += _text_part(text, kind, piece_signature)
            continue
        else:
            continue
        if signature is not None:
            out["thoughtSignature"] = signature
        parts.append(out)
    return parts


def _text_part(text: str, kind: str, signature: str | None) -> list[dict[str, Any]]:
    """A text or thought part as Gemini sent it; nothing where nothing needs to go back."""
    if kind == "thinking" and signature is None:
        return []  # thought summaries are not needed back; only a signature that rode on one is
    if not text and signature is None:
        return []
    out: dict[str, Any] = {"text": text}
    if kind == "thinking":
        out["thought"] = True
    if signature is not None:
        out["thoughtSignature"] = signature
    return [out]


def _gemini_call_id(part: Part, request: ProviderRequest) -> str | None:
    """The id Gemini gave a call, when it is sent back (to the model that made the call)."""
    gemini_id = (part.provider_data or {}).get("id")
    return gemini_id if isinstance(gemini_id, str) and gemini_id and replayable(part, request) else None


def _user_parts(
    message: ChatMessage, call_names: Mapping[str | None, str | None], call_ids: Mapping[str | None, str | None]
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if part.type == "text" and part.text:
            parts.append({"text": part.text})
        elif sendable_image(part):  # raw base64, no data: prefix; a tool's image follows its functionResponse
            parts.append({"inlineData": {"mimeType": part.mime_type, "data": image_base64(part)}})
        elif part.type == "tool_result":
            name = part.name or call_names.get(part.call_id) or "tool"
            response: dict[str, Any] = {"name": name, "response": _function_response(part)}
            gemini_id = call_ids.get(part.call_id)
            if gemini_id is not None:  # the same id its functionCall went back with
                response["id"] = gemini_id
            parts.append({"functionResponse": response})
    return parts


def _function_response(part: Part) -> dict[str, Any]:
    """A tool result as the ``response`` object Gemini wants (a JSON object, never a bare value)."""
    try:
        value: Any = json.loads(part.text)
    except ValueError:
        value = part.text
    if part.is_error:
        return {"error": value}
    return value if isinstance(value, dict) else {"output": value}


def _sign_current_turn_calls(contents: list[dict[str, Any]]) -> None:
    """Give Google's stand-in signature to current-turn steps that carry none of their own.

    Only steps without any signature are touched (history from another model, or from a
    run that gave none); a step whose signature rode on another part (Gemini 2.5 signs the
    first part, thought or not) is sent exactly as received. The current turn starts after
    the last user content with ordinary content (not only function responses); earlier
    turns are not validated, so they are left alone.
    """
    start = 0
    for i, content in enumerate(contents):
        if content["role"] == "user" and any("functionResponse" not in p for p in content["parts"]):
            start = i + 1
    for content in contents[start:]:
        if content["role"] != "model" or any("thoughtSignature" in p for p in content["parts"]):
            continue
        first_call = next((p for p in content["parts"] if "functionCall" in p), None)
        if first_call is not None:
            first_call["thoughtSignature"] = DUMMY_SIGNATURE


# --------------------------------------------------------------------------- stream parsing


class _StreamParser:
    """Turns decoded ``GenerateContentResponse`` chunks into normalized events."""

    def __init__(self, request: ProviderRequest) -> None:
        self.provider = request.provider
        self.model = request.model
        self.blocks = BlockAssembler(request.provider, request.model)
        self.calls = 0
        self.response_id: str | None = None
        self.finish_reason: str | None = None
        self.block_reason: str | None = None
        self.usage: Usage | None = None

    def feed(self, chunk: dict[str, Any]) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        self.response_id = self.response_id or chunk.get("responseId")
        candidates = chunk.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        for part in (candidate.get("content") or {}).get("parts") or []:
            events.extend(self._part(part))
        if candidate.get("finishReason"):
            self.finish_reason = candidate["finishReason"]
        block_reason = (chunk.get("promptFeedback") or {}).get("blockReason")
        if block_reason:
            self.block_reason = block_reason
        if isinstance(chunk.get("usageMetadata"), dict):
            usage = _usage(chunk["usageMetadata"])
            if usage != self.usage:
                self.usage = usage
                events.append(UsageUpdate(usage=usage))
        return events

    def finish(self, provider_name: str) -> list[ProviderEvent]:
        events = self.blocks.finish()
        reason = self.finish_reason or self.block_reason
        if reason is None:
            raise ProviderError(
                f"{provider_name} ended the stream before a finish reason.",
                provider=provider_name,
                retryable=True,
                kind="incomplete_stream",
            )
        if reason in _RETRYABLE_FINISH or reason in _ERROR_FINISH:
            raise ProviderError(
                f"{provider_name} stopped with {reason}: the model produced a tool call it could not complete.",
                provider=provider_name,
                retryable=reason in _RETRYABLE_FINISH,
                kind=reason,
            )
        events.append(Stop(reason=self._stop_kind(reason), raw=reason))
        return events

    def _stop_kind(self, reason: str) -> StopKind:
        if self.block_reason and not self.finish_reason:
            return "refusal"
        if reason in _REFUSAL_REASONS:
            return "refusal"
        if self.calls:
            return "tool_use"
        if reason == "MAX_TOKENS":
            return "max_tokens"
        return "end_turn"

    def _part(self, part: dict[str, Any]) -> list[ProviderEvent]:
        signature = part.get("thoughtSignature") or None
        if isinstance(part.get("functionCall"), dict):
            return self._call(part["functionCall"], signature)
        text = part.get("text")
        if not isinstance(text, str):
            return []  # executable code, inline data, ...: not modelled
        kind: BlockKind = "thinking" if part.get("thought") else "text"
        # One block per contiguous run of a kind; the assembler keeps where the signatures rode.
        return self.blocks.append(kind, text, signature)

    def _call(self, call: dict[str, Any], signature: str | None) -> list[ProviderEvent]:
        name = str(call.get("name") or "")
        raw_args = call.get("args")
        args, data = whole_arguments(raw_args if isinstance(raw_args, dict) else {})
        gemini_id = call.get("id") or None
        call_id = gemini_id or self._call_id()
        self.calls += 1
        part = Part(
            type="tool_call",
            call_id=call_id,
            name=name,
            arguments=args,
            provider=self.provider,
            model=self.model,
            signature=signature,
            provider_data={**({"id": gemini_id} if gemini_id else {}), **(data or {})} or None,
        )
        return self.blocks.call(part, json.dumps(args, ensure_ascii=False))

    def _call_id(self) -> str:
        # Deterministic for a given response, so a replayed stream yields the same ids.
        if self.response_id:
            return f"call_{self.response_id}_{self.calls}"
        return f"{new_id('call')}_{self.calls}"


def _usage(meta: dict[str, Any]) -> Usage:
    # promptTokenCount includes cached content; candidatesTokenCount leaves out thoughts
    # (totalTokenCount = prompt + toolUsePrompt + candidates + thoughts). Proto3 JSON omits
    # zero counts, so a missing candidates or thoughts count is 0; cached tokens are only
    # reported when caching applied, so absent means unknown.
    return normalized_usage(
        input_tokens=_sum(meta.get("promptTokenCount"), meta.get("toolUsePromptTokenCount")),
        output_tokens=_int(meta.get("candidatesTokenCount")) or 0,
        reasoning_tokens=_int(meta.get("thoughtsTokenCount")) or 0,
        cache_read_tokens=meta.get("cachedContentTokenCount"),
        output_excludes_reasoning=True,
    )


def _sum(prompt: Any, tool_use_prompt: Any) -> int | None:
    """The prompt count plus the results of Gemini's built-in tools, read as input too."""
    prompt_n = count(prompt)
    if prompt_n is None:
        return None
    return prompt_n + (count(tool_use_prompt) or 0)
