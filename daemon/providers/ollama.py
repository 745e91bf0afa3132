"""The Ollama adapter (native ``/api/chat``, NDJSON) and local model discovery.

It owns: turning stored history into Ollama chat messages (assistant ``thinking`` sent
back as plain text, tool results as ``role: tool`` with ``tool_name``), parsing the NDJSON
stream into normalized events, Ollama's error shapes (HTTP errors before the stream, an
``{"error": ...}`` line inside it, "model not found" → ``ProviderModelNotFound`` with an
``ollama pull`` hint), and ``discover_models``, which asks a running server what it has.

Wire facts this module relies on (WIRE-FORMATS.md §5, fixtures in ``ollama/``): tool calls
arrive whole (arguments are an object); ``done_reason`` stays ``stop`` after tool calls;
thinking is not counted separately (it is inside ``eval_count``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderError, ProviderModelNotFound
from daemon.providers.assembler import BlockAssembler
from daemon.providers.base import (
    BlockKind,
    Provider,
    ProviderEvent,
    ProviderRequest,
    Stop,
    UsageUpdate,
    image_base64,
    replayable,
    sendable_image,
    whole_arguments,
)
from daemon.providers.http import (
    LazyClient,
    close_response,
    connection_error,
    deep_merge,
    error_message_from_body,
    iter_lines,
    open_stream,
    ssl_context,
    status_error,
)
from daemon.providers.usage import normalized_usage

if TYPE_CHECKING:
    from daemon.models.spec import ModelSpec

DEFAULT_BASE_URL = "http://127.0.0.1:11434"
# gpt-oss takes a reasoning level instead of a boolean (booleans are ignored).
GPT_OSS_THINK_LEVELS = ["low", "medium", "high"]
DISCOVERY_TTL_S = 30.0
_DISCOVERY_CONCURRENCY = 8


def _base(base_url: str | None) -> str:
    return (base_url or DEFAULT_BASE_URL).rstrip("/")


def _not_found(
    provider: str, model: str, detail: str | None = None, status: int | None = None
) -> ProviderModelNotFound:
    return ProviderModelNotFound(
        f"{provider} does not have model {model!r}{f' ({detail})' if detail else ''}: run `ollama pull {model}`.",
        provider=provider,
        status=status,
        kind="model_not_found",
    )


def _is_model_not_found(message: str) -> bool:
    lowered = message.lower()
    return "not found" in lowered and "model" in lowered


class OllamaProvider(Provider):
    """Streams one ``/api/chat`` response per ``stream()``; the HTTP client is made on first use."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self._base_url = _base(config.base_url)
        self._clients = LazyClient()

    async def aclose(self) -> None:
        await self._clients.aclose()

    @asynccontextmanager
    async def stream(self, request: ProviderRequest) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
        headers = {**self.config.headers, "content-type": "application/json", "accept": "application/x-ndjson"}
        if self.config.api_key is not None:  # a proxy or ollama.com in front of the server
            headers["authorization"] = f"Bearer {self.config.api_key.reveal()}"
        content = json.dumps(build_body(request), ensure_ascii=False).encode("utf-8")
        async with open_stream(
            self._clients,
            f"{self._base_url}/api/chat",
            provider=self.name,
            headers=headers,
            content=content,
            map_error=lambda response, body: self._status_error(response, request.model, body),
            secrets=(self.config.api_key.reveal(),) if self.config.api_key else (),
        ) as response:
            lines = iter_lines(response, self.name, request.limits)
            events = self._events(lines, request, response.status_code)
            try:
                yield events
            finally:
                await events.aclose()
                await close_response(response, lines)

    def _status_error(self, response: httpx.Response, model: str, body: bytes) -> ProviderError:
        message, _ = error_message_from_body(body)
        if response.status_code == 404 or (message and _is_model_not_found(message)):
            return _not_found(self.name, model, message, response.status_code)
        return status_error(self.name, response.status_code, response.headers, body)

    async def _events(
        self, lines: AsyncIterator[str], request: ProviderRequest, status: int
    ) -> AsyncGenerator[ProviderEvent, None]:
        parser = _StreamParser(request)
        try:
            async for line in lines:
                if not line.strip():
                    continue
                try:
                    chunk = json.loads(line)
                except ValueError:
                    raise ProviderError(
                        f"{self.name} sent an unreadable stream line.",
                        provider=self.name,
                        retryable=True,
                        kind="bad_frame",
                    ) from None
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:
                    raise self._stream_error(chunk["error"], request.model, status)
                for event in parser.feed(chunk):
                    yield event
                if parser.done:
                    return
        except httpx.TransportError as exc:
            raise connection_error(self.name, exc, midstream=True) from None
        raise ProviderError(
            f"{self.name} ended the stream before it was done.",
            provider=self.name,
            retryable=True,
            kind="incomplete_stream",
        )

    def _stream_error(self, error: Any, model: str, status: int) -> ProviderError:
        detail = error.get("message") if isinstance(error, dict) else None
        message = error if isinstance(error, str) else str(detail or error)
        if _is_model_not_found(message):
            return _not_found(self.name, model, message, status)
        return ProviderError(
            f"{self.name} failed mid-stream: {message}", provider=self.name, status=status, kind="ollama_error"
        )


# --------------------------------------------------------------------------- request body


def build_body(request: ProviderRequest) -> dict[str, Any]:
    """The ``/api/chat`` body: model, messages, tools, then ``think`` exactly as resolved."""
    messages: list[dict[str, Any]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    call_names = {p.call_id: p.name for m in request.messages for p in m.parts if p.type == "tool_call"}
    for message in request.messages:
        messages.extend(_messages(message, request, call_names))
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in request.tools
        ]
    body = deep_merge(body, request.thinking.request_params)
    body["stream"] = True
    if request.max_output_tokens is not None:
        body = deep_merge(body, {"options": {"num_predict": request.max_output_tokens}})
    return body


def _messages(
    message: ChatMessage, request: ProviderRequest, call_names: dict[str | None, str | None]
) -> list[dict[str, Any]]:
    if message.role == "assistant":
        out: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(p.text for p in message.parts if p.type == "text"),
        }
        # Thinking is round-trip data like any other: only the model that wrote it gets it back.
        thinking = "".join(p.text for p in message.parts if p.type == "thinking" and replayable(p, request))
        if thinking:
            out["thinking"] = thinking
        calls = [p for p in message.parts if p.type == "tool_call"]
        if calls:
            out["tool_calls"] = [
                {"id": p.call_id, "function": {"index": i, "name": p.name, "arguments": p.arguments or {}}}
                for i, p in enumerate(calls)
            ]
        return [out]
    result: list[dict[str, Any]] = []
    text = "\n\n".join(p.text for p in message.parts if p.type == "text" and p.text)
    # Images ride on the message as raw base64 strings (``images``); a tool's go in a user
    # message after its results, as for Chat.
    images = [image_base64(p) for p in message.parts if sendable_image(p)]
    if message.role == "user" and (text or images):
        result.append({"role": "user", "content": text, **({"images": images} if images else {})})
    for part in message.parts:
        if part.type == "tool_result":
            result.append(
                {
                    "role": "tool",
                    "tool_name": part.name or call_names.get(part.call_id) or "",
                    "tool_call_id": part.call_id,
                    "content": part.text,
                }
            )
    if message.role == "tool" and (text or images):
        intro = "Attached image(s) from tool result:" if images else ""
        content = "\n\n".join(t for t in (intro, text) if t)
        result.append({"role": "user", "content": content, **({"images": images} if images else {})})
    return result


# --------------------------------------------------------------------------- stream parsing


class _StreamParser:
    """Turns decoded ``/api/chat`` chunks into normalized events."""

    def __init__(self, request: ProviderRequest) -> None:
        self.provider = request.provider
        self.model = request.model
        self.blocks = BlockAssembler(request.provider, request.model)
        self.calls = 0
        self.done = False

    def feed(self, chunk: dict[str, Any]) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        message = found if isinstance(found := chunk.get("message"), dict) else {}
        fields: tuple[tuple[BlockKind, str], ...] = (("thinking", "thinking"), ("text", "content"))
        for kind, key in fields:
            text = message.get(key)
            if isinstance(text, str) and text:
                events += self.blocks.append(kind, text)
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                events += self._call(call, chunk.get("created_at"))
        if chunk.get("done"):
            self.done = True
            events += self.blocks.close()
            # eval_count includes thinking (no separate reasoning count); prompt_eval_count is
            # the whole prompt on current servers (older ones left out a cached prefix).
            usage = normalized_usage(input_tokens=chunk.get("prompt_eval_count"), output_tokens=chunk.get("eval_count"))
            events.append(UsageUpdate(usage=usage))
            raw = chunk.get("done_reason")
            if self.calls:
                events.append(Stop(reason="tool_use", raw=raw))
            else:
                events.append(Stop(reason="max_tokens" if raw == "length" else "end_turn", raw=raw))
        return events

    def _call(self, call: dict[str, Any], created_at: Any) -> list[ProviderEvent]:
        function = found if isinstance(found := call.get("function"), dict) else {}
        name = str(function.get("name") or "")
        arguments = function.get("arguments")
        if isinstance(arguments, str):  # some templates leave the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        arguments, data = whole_arguments(arguments if isinstance(arguments, dict) else {})
        call_id = call.get("id") or _call_id(self.model, created_at, self.calls, name)
        self.calls += 1
        part = Part(
            type="tool_call",
            call_id=call_id,
            name=name,
            arguments=arguments,
            provider=self.provider,
            model=self.model,
            provider_data=data,
        )
        return self.blocks.call(part, json.dumps(arguments, ensure_ascii=False))


def _call_id(model: str, created_at: Any, position: int, name: str) -> str:
    """An id for a call Ollama sent without one (servers before 0.12), stable for a given stream.

    ``created_at`` carries nanoseconds, so ids from different responses do not collide.
    """
    digest = hashlib.sha256(f"{model}\0{created_at}\0{position}\0{name}".encode()).hexdigest()
    return f"call_{digest[:8]}"


# --------------------------------------------------------------------------- discovery

_clock = time.monotonic
_discovery_cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}


def clear_discovery_cache() -> None:
    _discovery_cache.clear()


async def discover_models(base_url: str, *, timeout_s: float = 0.5) -> list[dict[str, Any]]:
    """The models a running Ollama serves, or ``[]`` quickly when nothing answers.

    ``GET /api/tags`` lists them; ``POST /api/show`` per model (a few at a time) gives the
    capabilities and the context length. Results, empty ones included, are cached per base
    URL for ``DISCOVERY_TTL_S`` so that listing models never waits on a missing server twice.
    Each dict: ``{model, name, supports_thinking, think_levels, supports_tools, context_window}``;
    ``think_levels`` is ``["low", "medium", "high"]`` for gpt-oss and ``None`` where ``think``
    is a boolean.
    """
    base = _base(base_url)
    cached = _discovery_cache.get(base)
    if cached is not None and _clock() - cached[0] < DISCOVERY_TTL_S:
        return [dict(m) for m in cached[1]]
    models = await _discover(base, timeout_s)
    _discovery_cache[base] = (_clock(), models)
    return [dict(m) for m in models]


async def _discover(base: str, timeout_s: float) -> list[dict[str, Any]]:
    # The connect timeout is what makes an absent server cheap; once connected, a loaded
    # server may take a moment to read model files, so reads get longer.
    timeout = httpx.Timeout(connect=timeout_s, read=max(5.0, timeout_s), write=timeout_s, pool=timeout_s)
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=ssl_context()) as client:
            response = await client.get(f"{base}/api/tags")
            if response.status_code != 200:
                return []
            listed = response.json().get("models") or []
            tags = [m for m in listed if isinstance(m, dict) and (m.get("model") or m.get("name"))]
            models: list[dict[str, Any] | None] = [None] * len(tags)
            limiter = anyio.Semaphore(_DISCOVERY_CONCURRENCY)

            async def describe(i: int, tag: dict[str, Any]) -> None:
                async with limiter:
                    models[i] = await _describe(client, base, tag)

            async with anyio.create_task_group() as tg:
                for i, tag in enumerate(tags):
                    tg.start_soon(describe, i, tag)
    except (httpx.HTTPError, ValueError, AttributeError):
        return []
    return [m for m in models if m is not None]


async def _describe(client: httpx.AsyncClient, base: str, tag: dict[str, Any]) -> dict[str, Any] | None:
    """One discovered model, or None for one that cannot chat (an embedding model)."""
    model = str(tag.get("model") or tag.get("name"))
    show: dict[str, Any] = {}
    try:
        response = await client.post(f"{base}/api/show", json={"model": model})
        if response.status_code == 200 and isinstance(response.json(), dict):
            show = response.json()
    except (httpx.HTTPError, ValueError):
        pass  # listed but not describable: report it with no capabilities claimed
    capabilities = show.get("capabilities") or []
    if capabilities and "completion" not in capabilities:
        return None
    model_info = found if isinstance(found := show.get("model_info"), dict) else {}
    details = show.get("details") or tag.get("details") or {}
    supports_thinking = "thinking" in capabilities
    levels = list(GPT_OSS_THINK_LEVELS) if supports_thinking and _is_gpt_oss(model, model_info, details) else None
    return {
        "model": model,
        "name": str(tag.get("name") or model),
        "supports_thinking": supports_thinking,
        "think_levels": levels,
        "supports_tools": "tools" in capabilities,
        "supports_vision": "vision" in capabilities,
        "context_window": _context_length(model_info),
    }


def _is_gpt_oss(model: str, model_info: dict[str, Any], details: dict[str, Any]) -> bool:
    families = {str(model_info.get("general.architecture") or ""), str(details.get("family") or "")}
    return bool(families & {"gptoss", "gpt-oss"}) or model.startswith("gpt-oss")


def _context_length(model_info: dict[str, Any]) -> int | None:
    for key, value in model_info.items():
        if key.endswith(".context_length") and (length := _int(value)) is not None:
            return length
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def discover_specs(settings: ProviderConfig) -> list[ModelSpec]:
    """The catalogue specs of the models the Ollama at ``settings.base_url`` serves (``ProviderInfo.discovery``)."""
    from daemon.vendors.rows import ollama_spec

    found = await discover_models(settings.base_url)
    return [
        ollama_spec(
            m["model"],
            [
                c
                for c, on in (
                    ("thinking", m["supports_thinking"]),
                    ("tools", m["supports_tools"]),
                    ("vision", m["supports_vision"]),
                )
                if on
            ],
            context_window=m["context_window"],
            provider=settings.name,
        )
        for m in found
    ]
