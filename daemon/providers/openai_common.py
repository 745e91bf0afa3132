"""What the two OpenAI wire adapters share: connection, credentials, errors, SSE reading.

``OpenAIStyleProvider`` is the base of ``OpenAIChatProvider`` (Chat Completions and its
dialects) and ``OpenAIResponsesProvider`` (Responses API). It owns the lazy HTTP client,
the request headers (``Authorization: Bearer`` from the config, or whatever the wrapping
provider's ``extra_headers`` supplies, e.g. Copilot's short-lived token), opening the
stream, mapping HTTP/transport failures to ``ProviderError`` without ever echoing a
credential, and turning SSE events into parser calls. Each subclass brings its own body
builder and its own pure stream parser (``feed(name, data)`` → normalized events).

Also here: the error-type → retryable table and the 429 wait-time fallbacks of OpenAI's
error format (``{"error": {message, type, param, code}}``), which both APIs and every
OpenAI-compatible server reuse, and tool-argument parsing.

Wire reference: ``tests/fixtures/providers/WIRE-FORMATS.md`` §2.4, §3.4, §7.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Protocol

import httpx
import msgspec

from daemon.config.settings import ProviderConfig
from daemon.conversation import Part
from daemon.errors import ProviderAuthError, ProviderError
from daemon.providers.base import KeepAlive, Provider, ProviderEvent, ProviderRequest, StreamLimits, decode_arguments
from daemon.providers.http import (
    RETRYABLE_STATUSES,
    LazyClient,
    aiter_sse,
    apply_retry_hint,
    close_response,
    connection_error,
    ended_early,
    open_stream,
    read_error_body,
    status_error,
)
from daemon.util.redact import scrub
from daemon.vendors.level_rejections import parse_level_rejection

ExtraHeaders = Callable[[], Awaitable[dict[str, str]]]

# Error ``type``/``code`` values (OpenAI and the compatible servers) that a retry can cure.
# "tokens"/"requests" are the ``type`` OpenAI gives per-minute limit 429s.
_RETRYABLE_KINDS = frozenset(
    {
        "server_error",
        "internal_error",
        "internal_server_error",
        "api_error",
        "overloaded",
        "overloaded_error",
        "server_overloaded",
        "service_unavailable",
        "service_unavailable_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        "timeout",
        "timeout_error",
        "tokens",
        "requests",
    }
)
# Codes that look like rate limits or server trouble but will not lift by waiting.
_FINAL_CODES = frozenset(
    {
        "insufficient_quota",
        "billing_hard_limit_reached",
        "invalid_api_key",
        "context_length_exceeded",
        "invalid_prompt",
        "content_policy_violation",
    }
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)", re.IGNORECASE)


class StreamParser(Protocol):
    """A pure SSE-event → normalized-event translator; raises ``ProviderError`` on failures."""

    finished: bool

    def feed(self, name: str, data: str) -> list[ProviderEvent]: ...

    def at_eof(self) -> list[ProviderEvent]:
        """The stream ended without a terminal event: final events, or raise."""
        ...


class OpenAIStyleProvider(Provider):
    """One configured OpenAI-style endpoint; holds one lazily created HTTP client.

    ``extra_headers`` (awaited once per request) is how a wrapping provider such as
    Copilot supplies its own bearer token and headers; they override everything else.
    """

    endpoint: ClassVar[str]  # appended to config.base_url, e.g. "/chat/completions"

    def __init__(self, config: ProviderConfig, *, extra_headers: ExtraHeaders | None = None) -> None:
        self.config = config
        self.name = config.name
        self._extra_headers = extra_headers
        self._clients = LazyClient()

    async def aclose(self) -> None:
        await self._clients.aclose()

    # -- subclass hooks ----------------------------------------------------------------

    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        raise NotImplementedError

    def new_parser(self, request: ProviderRequest) -> StreamParser:
        raise NotImplementedError

    # -- request -----------------------------------------------------------------------

    @property
    def key_hint(self) -> str:
        return self.config.key_hint  # daemon.vendors.table.key_hint, filled by config

    async def build_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self.config.api_key is not None:
            headers["authorization"] = f"Bearer {self.config.api_key.reveal()}"
        headers.update({k.lower(): v for k, v in self.config.headers.items()})
        if self._extra_headers is not None:
            headers.update({k.lower(): v for k, v in (await self._extra_headers()).items()})
        return headers

    @asynccontextmanager
    async def stream(self, request: ProviderRequest) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
        """Open one streamed response. HTTP errors raise here, on entry; stream errors
        raise from the iterator. Leaving the context closes the connection."""
        if self.config.api_key is None and self.config.needs_key and self._extra_headers is None:
            raise ProviderAuthError(f"{self.name} has no API key: {self.key_hint}.", provider=self.name)
        body = self.build_body(request)
        headers = await self.build_headers()
        url = self.config.base_url.rstrip("/") + self.endpoint
        secrets = _secrets(headers)

        def map_error(response: httpx.Response, raw: bytes) -> ProviderError:
            error = http_error(self.name, response, raw, hint=self.key_hint, secrets=secrets)
            # A refused thinking level naming the levels it takes: the agent retries with one.
            rejected = parse_level_rejection(
                self.config.api, response.status_code, scrub(raw, secrets), provider=self.name
            )
            return rejected or error

        async with open_stream(
            self._clients,
            url,
            provider=self.name,
            headers=headers,
            content=msgspec.json.encode(body),
            map_error=map_error,
            secrets=secrets,
        ) as response:
            if response.headers.get("content-type", "").partition(";")[0].strip().lower() != "text/event-stream":
                raise await self._not_an_event_stream(response, secrets)
            events = self._events(response, self.new_parser(request), request.limits)
            try:
                yield events
            finally:
                await events.aclose()

    async def _events(
        self, response: httpx.Response, parser: StreamParser, limits: StreamLimits
    ) -> AsyncGenerator[ProviderEvent, None]:
        sse = aiter_sse(response, self.name, limits)
        try:
            async for event in sse:
                if event is None:  # a comment (``: keep-alive``, ``: OPENROUTER PROCESSING``)
                    yield KeepAlive()
                    continue
                # httpx-sse dispatches a block holding only ``retry:`` with empty data.
                if not event.data:
                    continue
                for normalized in parser.feed(event.event, event.data):
                    yield normalized
                if parser.finished:
                    return
        except httpx.RequestError as exc:  # SSEError is one too, but the content type was checked
            raise connection_error(self.name, exc, midstream=True) from exc
        finally:
            # However we leave (terminal event, error, consumer gone), unwind httpx's
            # nested body generators instead of abandoning them (see close_response).
            await close_response(response, sse)
        for normalized in parser.at_eof():
            yield normalized

    async def _not_an_event_stream(self, response: httpx.Response, secrets: list[str]) -> ProviderError:
        # Some OpenAI-compatible servers answer a failed streaming request with HTTP 200
        # and a plain JSON error body: report the error they meant.
        try:
            raw = scrub(await read_error_body(response), secrets)
        except httpx.RequestError:
            raw = b""
        error = _error_object(raw)
        if error is not None:
            return stream_error(self.name, error, status=response.status_code)
        content_type = response.headers.get("content-type", "")
        return ProviderError(
            f"{self.name} answered with content-type {content_type!r} instead of an event stream.",
            provider=self.name,
            status=response.status_code,
            kind="invalid_response",
        )


# -- errors ------------------------------------------------------------------------------


def error_retryable(kind: Any, code: Any) -> bool:
    """Whether an in-body error (``type``/``code``, either may be a number) is worth retrying."""
    values = {str(v).lower() for v in (kind, code) if v not in (None, "")}
    if values & _FINAL_CODES:
        return False
    for value in values:
        if value.isdigit():  # OpenRouter puts the HTTP status in ``code``
            status = int(value)
            if status in RETRYABLE_STATUSES or status >= 500:
                return True
    return bool(values & _RETRYABLE_KINDS)


def stream_error(provider: str, error: dict[str, Any], *, status: int | None = None) -> ProviderError:
    """A ``ProviderError`` for an error object found inside a response body or stream."""
    kind = error.get("type") or error.get("code") or "error"
    message = str(error.get("message") or kind)
    return ProviderError(
        f"{provider} stream failed: {message} ({kind}).",
        provider=provider,
        status=status,
        retryable=error_retryable(error.get("type"), error.get("code")),
        kind=str(kind),
    )


def http_error(provider: str, response: httpx.Response, raw: bytes, *, hint: str, secrets: list[str]) -> ProviderError:
    """``status_error`` plus OpenAI's own retry signals; the body is scrubbed of credentials."""
    raw = scrub(raw, secrets)
    error = status_error(provider, response.status_code, response.headers, raw, hint=hint)
    details = _error_object(raw) or {}
    # e.g. insufficient_quota comes back as 429 but waiting will not lift it.
    apply_retry_hint(error, response.headers, final=str(details.get("code") or "").lower() in _FINAL_CODES)
    if error.retryable and error.retry_after is None and response.status_code == 429:
        error.retry_after = rate_limit_wait(response.headers, str(details.get("message") or ""))
    return error


def rate_limit_wait(headers: httpx.Headers, message: str) -> float | None:
    """Seconds to wait on a 429 without ``retry-after``: the message's "try again in 1.608s",
    else the reset time of whichever ``x-ratelimit-remaining-*`` budget is exhausted."""
    match = _TRY_AGAIN.search(message)
    if match:
        return parse_duration(match.group(1))
    waits = [
        parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
        for kind in ("requests", "tokens")
        if headers.get(f"x-ratelimit-remaining-{kind}") == "0"
    ]
    known = [w for w in waits if w is not None]
    return max(known) if known else None


def parse_duration(text: str) -> float | None:
    """Go-style durations as in OpenAI's reset headers: ``120ms``, ``1.608s``, ``6m0s``, ``1h2m``."""
    text = text.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(number) * scale[unit] for number, unit in parts)


def _secrets(headers: dict[str, str]) -> list[str]:
    value = headers.get("authorization", "")
    token = value.split(" ", 1)[1] if value.lower().startswith("bearer ") else value
    return [token] if len(token) >= 8 else []  # too short to scrub without mangling text


def _error_object(raw: bytes) -> dict[str, Any] | None:
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return error
    if isinstance(error, str) and error:
        return {"message": error}
    return None


# -- payloads -----------------------------------------------------------------------------


def decode_event(provider: str, data: str) -> dict[str, Any] | None:
    """The JSON object of one SSE ``data`` field; None for non-objects; raises on bad JSON."""
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ProviderError(
            f"{provider} sent a stream event that is not valid JSON.", provider=provider, kind="invalid_event"
        ) from exc
    return payload if isinstance(payload, dict) else None


def parse_arguments(raw: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(arguments, provider_data) for a tool call's raw JSON argument string.

    The raw text is kept (``arguments_raw``) so the call is replayed to its own model
    byte-exact: re-serializing would change spacing and escapes, and with them the
    prompt-cache prefix. Unparseable text (a call cut off by the token limit) gives ``{}``
    and is kept as ``invalid_arguments``, as the Anthropic adapter does.
    """
    if not raw.strip():
        return {}, None
    arguments = decode_arguments(raw)
    if arguments is not None:
        return arguments, {"arguments_raw": raw}
    return {}, {"invalid_arguments": raw}


def tool_call_part(
    request: ProviderRequest, call_id: str | None, name: str | None, raw_arguments: str, **extra: Any
) -> Part:
    """The finished tool call of a response, with its raw arguments (and ``extra``) kept."""
    arguments, data = parse_arguments(raw_arguments)
    if extra:
        data = {**(data or {}), **extra}
    return Part(
        type="tool_call",
        call_id=call_id,
        name=name or "",
        arguments=arguments,
        provider=request.provider,
        model=request.model,
        provider_data=data,
    )


def replay_arguments(arguments: dict[str, Any] | None, provider_data: dict[str, Any] | None, same_model: bool) -> str:
    """The argument string to send back for a stored tool call."""
    data = provider_data or {}
    if same_model:
        for key in ("arguments_raw", "invalid_arguments"):
            if isinstance(value := data.get(key), str):
                return value
    return msgspec.json.encode(arguments or {}).decode()


__all__ = [
    "ExtraHeaders",
    "OpenAIStyleProvider",
    "StreamParser",
    "decode_event",
    "ended_early",
    "error_retryable",
    "http_error",
    "parse_arguments",
    "parse_duration",
    "rate_limit_wait",
    "replay_arguments",
    "stream_error",
    "tool_call_part",
]
