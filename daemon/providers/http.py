"""HTTP plumbing shared by the provider adapters: clients with explicit timeouts, the one
stream opener (``open_stream``: connection failures and non-2xx answers become
``ProviderError``s there), status → ``ProviderError`` mapping, ``retry-after`` parsing, and
SSE/NDJSON line iteration.

Imported only when a real provider is used, so that httpx never slows start-up.
"""

import email.utils
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from httpx_sse import ServerSentEvent, SSEError
from httpx_sse._decoders import (  # the decoders aiter_sse uses, comments kept
    SSEDecoder,
    SSELineDecoder,
)

from daemon.errors import ProviderAuthError, ProviderError, ProviderModelNotFound

CONNECT_TIMEOUT_S = 15.0
# The read timeout is a backstop; the agent's stall watchdog (keep-alives count as life)
# is what aborts a silent stream.
READ_TIMEOUT_S = 300.0
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class LazyClient:
    """An adapter's one httpx client, made on first use and closed with the adapter."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = make_client()
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building it (loading the CA bundle) costs ~90 ms,
    which httpx would otherwise pay again for each client it creates."""
    return httpx.create_ssl_context()


def make_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S, write=30.0, pool=30.0),
        # Every live turn holds one streaming connection for its whole reply; httpx's default
        # pool of 100 would make the 101st concurrent session wait (and time out after 30 s).
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
        verify=ssl_context(),
        follow_redirects=False,
    )


def parse_retry_after(headers: httpx.Headers | dict[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def error_message_from_body(body: bytes) -> tuple[str | None, str | None]:
    """(message, error type) from the usual JSON error shapes, or (None, None)."""
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        text = body.decode("utf-8", "replace").strip()
        return (text[:300] or None), None
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return None, None
    error = data.get("error", data)
    if isinstance(error, str):
        return error, None
    if isinstance(error, dict):
        kind = error.get("type") or error.get("status") or error.get("code")
        return (str(error.get("message")) if error.get("message") else None), (str(kind) if kind else None)
    return None, None


def status_error(provider: str, status: int, headers: httpx.Headers, body: bytes, hint: str = "") -> ProviderError:
    """Map a non-2xx response to the right ``ProviderError``."""
    message, kind = error_message_from_body(body)
    detail = message or f"HTTP {status}"
    text = f"{provider} answered HTTP {status}: {detail}"
    if status in (401, 403):
        return ProviderAuthError(
            f"{text}. Check the credentials{' (' + hint + ')' if hint else ''}.",
            provider=provider,
            status=status,
            kind=kind,
        )
    if status == 404:
        return ProviderModelNotFound(text, provider=provider, status=status, kind=kind)
    retryable = status in RETRYABLE_STATUSES or status >= 500
    return ProviderError(
        text,
        provider=provider,
        status=status,
        retryable=retryable,
        retry_after=parse_retry_after(headers) if retryable else None,
        kind=kind,
    )


async def read_error_body(response: httpx.Response, secrets: tuple[str, ...] = ()) -> bytes:
    """An error response's body with ``secrets`` masked, or ``b""`` if the connection drops.

    The body becomes the error message, and a provider may echo what it was sent.
    """
    try:
        body = await response.aread()
    except httpx.TransportError:
        return b""
    for secret in secrets:
        if len(secret) >= 8:  # shorter ones would mangle ordinary text
            body = body.replace(secret.encode(), b"***")
    return body


def apply_retry_hint(error: ProviderError, headers: httpx.Headers, *, final: bool = False) -> ProviderError:
    """``error`` with the server's own retry signal honoured (``x-should-retry``, as the
    vendors' SDKs do); ``final``: the body names a failure waiting will not lift (a quota)."""
    should_retry = headers.get("x-should-retry")
    if should_retry == "false" or final:
        error.retryable, error.retry_after = False, None
    elif should_retry == "true" and not isinstance(error, ProviderAuthError):
        error.retryable = True
    return error


# (the response, its body read bounded and with credentials masked) -> the error to raise
ErrorMapper = Callable[[httpx.Response, bytes], ProviderError]


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient,
    url: str,
    *,
    provider: str,
    headers: dict[str, str],
    content: bytes,
    map_error: ErrorMapper,
    secrets: Iterable[str] = (),
) -> AsyncIterator[httpx.Response]:
    """POST ``content`` to ``url`` and open the streamed answer, for every adapter.

    The one place where opening a stream fails: a server that cannot be reached is a
    retryable ``connection_error``; a non-2xx answer is ``map_error(response, body)``, the
    body read through ``read_error_body`` with ``secrets`` masked (a proxy may echo the
    key). Leaving the context closes the response.
    """
    try:
        response = await client.send(client.build_request("POST", url, headers=headers, content=content), stream=True)
    except httpx.RequestError as exc:
        raise connection_error(provider, exc) from exc
    try:
        if not response.is_success:
            raise map_error(response, await read_error_body(response, tuple(s for s in secrets if s)))
        yield response
    finally:
        await close_response(response)


def connection_error(provider: str, exc: Exception, *, midstream: bool = False) -> ProviderError:
    """A transport failure (refused, reset, timed out): always retryable, never with secrets.

    ``midstream``: the response had started and the connection broke while reading it.
    """
    kind = type(exc).__name__
    message = (
        f"The connection to {provider} broke mid-stream: {kind}." if midstream else f"Could not reach {provider}: {kind}."
    )
    return ProviderError(message, provider=provider, retryable=True, kind="connection_error")


async def iter_lines(response: httpx.Response) -> AsyncIterator[str]:
    """Lines of a streamed body, split on LF (CR stripped), decoded incrementally as UTF-8."""
    decoder_buffer = ""
    async for text in response.aiter_text():
        decoder_buffer += text
        *lines, decoder_buffer = decoder_buffer.split("\n")
        for line in lines:
            yield line.rstrip("\r")
    if decoder_buffer:
        yield decoder_buffer.rstrip("\r")


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, recursing into nested dicts; neither input is changed.

    Adapters use it to lay ``thinking.request_params`` (a provider-side body fragment) over
    the body they built, so that e.g. ``generationConfig.thinkingConfig`` joins an existing
    ``generationConfig`` instead of replacing it.
    """
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


async def close_response(response: httpx.Response, reader: AsyncIterator[Any] | None = None) -> None:
    """Close a streamed response and unwind ``reader``, the iterator that was reading its body.

    httpx reads bodies through nested async generators (httpx #3686). Closing only the
    outermost one, as ``aclose()`` or an abandoned ``async for`` does, leaves the inner ones
    suspended, and trio warns when the garbage collector finds them. Closing the connection
    first makes the reader's next read fail inside the innermost generator, so that failure
    unwinds (and finishes) every level. Bounded and shielded: it runs on cancel paths too.
    """
    with anyio.move_on_after(1.0, shield=True):
        await response.aclose()
        if reader is not None:
            try:
                while True:
                    await reader.__anext__()
            except Exception:  # StopAsyncIteration, or the read on the closed connection
                pass


async def aiter_sse(response: httpx.Response) -> AsyncIterator[ServerSentEvent | None]:
    """``EventSource(response).aiter_sse()``, plus ``None`` for every comment line.

    httpx-sse swallows comments (``: keep-alive``, OpenRouter's ``: OPENROUTER PROCESSING``),
    yet they are how a server says "still here" while a model thinks; adapters yield them as
    ``KeepAlive`` so the agent's stall watchdog does not abort a quiet but living stream.
    Lines and events are decoded by httpx-sse's own decoders, so nothing else changes.
    """
    content_type = response.headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in content_type:
        raise SSEError(f"Expected response header Content-Type to contain 'text/event-stream', got {content_type!r}")
    lines, events = SSELineDecoder(), SSEDecoder()
    async for text in response.aiter_text():
        for line in lines.decode(text):
            if line.startswith(":"):
                yield None
            elif (event := events.decode(line)) is not None:
                yield event
    for line in lines.flush():
        if not line.startswith(":") and (event := events.decode(line)) is not None:
            yield event


def ended_early(provider: str, terminal: str) -> ProviderError:
    # Retryable: a proxy or load balancer dropping a long stream is the usual cause, and
    # the agent only retries when nothing of the reply was shown yet.
    return ProviderError(
        f"The {provider} stream ended early (no {terminal}); the response is incomplete.",
        provider=provider,
        retryable=True,
        kind="stream_ended_early",
    )
