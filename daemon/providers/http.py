"""HTTP plumbing shared by the provider adapters: clients with explicit timeouts, the one
stream opener (``open_stream``: connection failures and non-2xx answers become
``ProviderError``s there), status → ``ProviderError`` mapping, ``retry-after`` parsing, and
SSE/NDJSON line iteration with bounded memory (event size, decompressed size; see
``StreamLimits``).

Imported only when a real provider is used, so that httpx never slows start-up.
"""

import asyncio
import email.utils
import functools
import json
import ssl
import time
import urllib.request
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator
from contextlib import aclosing, asynccontextmanager, contextmanager
from typing import Any

import anyio
import httpx
from httpx_sse import ServerSentEvent, SSEError

from daemon.errors import ProviderAuthError, ProviderError, ProviderModelNotFound
from daemon.providers.base import StreamLimits
from daemon.util import foreground
from daemon.util.redact import scrub

CONNECT_TIMEOUT_S = 15.0
# The read timeout is a backstop; the agent's stall watchdog (keep-alives count as life)
# is what aborts a silent stream.
READ_TIMEOUT_S = 300.0
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


# Streams one client carries at once before the next one is used (see ``LazyClient``).
STREAMS_PER_CLIENT = 16
# URLs and header sets a ``Route`` keeps built (an adapter uses one or two of each).
ROUTE_CACHE_SIZE = 8


class LazyClient:
    """An adapter's httpx clients, made on first use and closed with the adapter.

    One client is enough while few streams run at once. But httpcore's pool (httpx's own way: on
    trio, or through a proxy) goes over all its connections each time a request is sent or a
    response closed, so 200 sessions streaming at once through one client cost O(n²): ~1.4 ms of
    CPU per request, a tenth of a burst's turn starts. (``asyncio_net``'s pool keeps only idle
    connections and takes one in O(1).) A stream therefore takes the first client carrying fewer than
    ``STREAMS_PER_CLIENT`` streams (a new client when none is): one after another, turns keep
    reusing the first client's kept-alive connections; a burst spreads over small pools.
    """

    def __init__(self) -> None:
        self._routes: list[Route] = []
        self._streams: list[int] = []  # streams open through each client

    @contextmanager
    def lease(self) -> Iterator["Route"]:
        """A client for one stream, counted as carrying it until the block ends."""
        i = next((i for i, count in enumerate(self._streams) if count < STREAMS_PER_CLIENT), None)
        if i is None:
            i = len(self._routes)
            self._routes.append(Route())
            self._streams.append(0)
        self._streams[i] += 1
        try:
            yield self._routes[i]
        finally:
            self._streams[i] -= 1

    async def aclose(self) -> None:
        routes, self._routes, self._streams = self._routes, [], []
        for route in routes:
            await route.aclose()


class Route:
    """One httpx client and the way a streamed POST goes through it (``post_streaming``).

    ``client.send`` adds a third to the CPU of the exchange (building and merging the request's
    headers, the auth and redirect machinery, the cookie jar's urllib adapter on every response):
    a streamed POST and its short answer, with their local server, cost ~1.9 ms through it and
    ~1.4 ms without it, and each of 200 turns started at once pays it. When it has nothing to do
    (no proxy in the environment, no cookie to send back), the request goes straight to a
    transport built as the client's (TLS context, pool limits), the request built as httpx
    builds it: the client's default headers under the adapter's, its timeouts, the response bound
    to the request, a ``set-cookie`` kept in the client's jar (so the next request takes httpx's
    whole way and sends it back). A client given a transport of its own would ignore the
    environment's proxies: hence a transport beside it, not in it."""

    def __init__(self) -> None:
        self.client = make_client()
        # httpx reads the proxy variables when the client is made (``trust_env``): so does this.
        # With a proxy named, every request takes httpx's way (its mounts route it). ``no_proxy``
        # alone names none (it only exempts hosts from one), so it keeps the direct way.
        self.transport = direct_transport() if not proxy_named() else None
        self._headers = dict(self.client.headers.items())  # lower-case names: accept, user-agent, …
        self._timeout = self.client.timeout.as_dict()
        # What each request would parse and normalize again (an adapter sends the same URL and
        # headers every time): the URL parsed, and the client's defaults merged with the
        # adapter's headers, by their values. Two thirds of building an ``httpx.Request``.
        self._urls: dict[str, httpx.URL] = {}
        self._merged: dict[tuple[tuple[str, str], ...], httpx.Headers] = {}

    async def post_streaming(self, url: str, headers: dict[str, str], content: bytes) -> httpx.Response:
        """POST ``content`` and return the response with its body not read yet (httpx errors raised as httpx does)."""
        client, transport = self.client, self.transport
        if transport is None or client.cookies:
            request = client.build_request("POST", url, headers=headers, content=content)
            return await client.send(request, stream=True)
        request = httpx.Request(
            "POST",
            self._url(url),
            headers=self._headers_for(headers),
            content=content,
            extensions={"timeout": self._timeout},
        )
        response = await transport.handle_async_request(request)
        response.request = request
        if "set-cookie" in response.headers:
            client.cookies.extract_cookies(response)
        return response

    def _url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= ROUTE_CACHE_SIZE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _headers_for(self, headers: dict[str, str]) -> httpx.Headers:
        """The client's default headers with ``headers`` over them (``httpx.Request`` copies them)."""
        key = tuple(headers.items())
        merged = self._merged.get(key)
        if merged is None:
            if len(self._merged) >= ROUTE_CACHE_SIZE:
                self._merged.clear()  # an adapter whose headers change per request: start over
            values = self._headers.copy()
            values.update((name.lower(), value) for name, value in headers.items())
            merged = self._merged[key] = httpx.Headers(values)
        return merged

    async def aclose(self) -> None:
        await self.client.aclose()
        if self.transport is not None:
            await self.transport.aclose()


def proxy_named() -> bool:
    """Whether the environment names a proxy (``http_proxy``, ``HTTPS_PROXY``, ``all_proxy``, …,
    as httpx's ``trust_env`` reads them); ``no_proxy`` only says which hosts skip one."""
    return any(scheme != "no" for scheme in urllib.request.getproxies())


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building it (loading the CA bundle) costs ~90 ms,
    which httpx would otherwise pay again for each client it creates."""
    return httpx.create_ssl_context()


def direct_transport() -> httpx.AsyncBaseTransport:
    """The transport of requests that go straight to the server: on asyncio, HTTP/1.1 over
    asyncio's own streams (``asyncio_net``); on trio, httpx's own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop in this thread: trio's
        return httpx.AsyncHTTPTransport(verify=ssl_context(), limits=CLIENT_LIMITS)
    # Here, not at the top: h11 with it, as httpx loads httpcore only for a first transport (the
    # daemon's warm-up imports this module, and every ``ponder ask`` would pay ~7 ms for h11).
    from daemon.providers.asyncio_net import AsyncioTransport

    return AsyncioTransport(ssl_context(), CLIENT_LIMITS)


# Every live turn holds one streaming connection for its whole reply; httpx's default pool of
# 100 would make the 101st concurrent session wait (and time out after 30 s).
CLIENT_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=20)


def make_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S, write=30.0, pool=30.0),
        limits=CLIENT_LIMITS,
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

    The body becomes the error message, and a provider may echo what it was sent. At most
    ``MAX_ERROR_BODY`` bytes are read (decompressed in bounded steps): an error page is not
    a reason to hold a large or bomb-sized body in memory.
    """
    chunks: list[bytes] = []
    size = 0
    reader = aiter_body(response, "", StreamLimits())
    try:
        async for chunk in reader:
            chunks.append(chunk[: MAX_ERROR_BODY - size])
            size += len(chunks[-1])
            if size >= MAX_ERROR_BODY:
                break
    except (httpx.TransportError, ProviderError):
        pass  # keep what arrived: a partial message beats none
    finally:
        await close_response(response, reader)
    return scrub(b"".join(chunks), secrets)


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
    clients: LazyClient,
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
    with clients.lease() as route:
        try:
            response = await route.post_streaming(url, headers, content)
        except httpx.RequestError as exc:
            raise connection_error(provider, exc) from exc
        try:
            if not response.is_success:
                raise map_error(response, await read_error_body(response, tuple(s for s in secrets if s)))
            yield response
        finally:
            await close_response(response)


def connection_error(provider: str, exc: Exception, *, midstream: bool = False) -> ProviderError:
    """A transport failure (refused, reset, timed out): retryable, but for a server certificate
    that is not trusted; never with secrets.

    ``midstream``: the response had started and the connection broke while reading it.
    """
    kind = type(exc).__name__
    message = (
        f"The connection to {provider} broke mid-stream: {kind}."
        if midstream
        else f"Could not reach {provider}: {kind}."
    )
    refused = _certificate_refusal(exc)
    if refused is not None:  # a setting to change, not a failure that passes: not retried
        message += (
            f" Its TLS certificate is not trusted ({refused}). Behind a TLS-inspecting proxy or with a"
            " private authority, name the authority's certificate in SSL_CERT_FILE."
        )
    return ProviderError(message, provider=provider, retryable=refused is None, kind="connection_error")


def _certificate_refusal(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, when that is why ``exc`` happened: the TLS error
    is among the causes (or the context) of httpx's and httpcore's own errors."""
    seen: BaseException | None = exc
    for _ in range(8):  # a few layers deep; never round a cycle
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or "certificate verify failed"
        seen = seen.__cause__ or seen.__context__
    return None


async def iter_lines(response: httpx.Response, provider: str, limits: StreamLimits) -> AsyncGenerator[str, None]:
    """NDJSON lines of a streamed body, split on LF (CR stripped) and decoded as UTF-8.

    A line longer than ``limits.max_event_bytes`` ends the response with a ``ProviderError``.
    """
    lines = _LineSplitter(provider, limits.max_event_bytes)
    async with aclosing(aiter_body(response, provider, limits)) as body:
        async for chunk in body:
            for line in lines.feed(chunk):
                yield line.rstrip(b"\r").decode("utf-8", "replace")
    if (last := lines.rest()) is not None:
        yield last.rstrip(b"\r").decode("utf-8", "replace")


class _LineSplitter:
    """Splits a byte stream on LF without ever holding a line longer than ``max_bytes``.

    Only the new chunk is searched for a line break, so a long line arriving in many
    chunks costs linear time; its pieces are joined once, when the line ends.
    """

    def __init__(self, provider: str, max_bytes: int) -> None:
        self.provider = provider
        self.max_bytes = max_bytes
        self._pieces: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            self._pieces.append(chunk)
            self._size += len(chunk)
            if self._size > self.max_bytes:
                raise event_too_large(self.provider, self.max_bytes)
            return []
        lines = chunk.split(b"\n")
        if self._pieces:
            lines[0] = b"".join([*self._pieces, lines[0]])
        tail = lines.pop()
        self._pieces, self._size = ([tail], len(tail)) if tail else ([], 0)
        for line in lines:
            if len(line) > self.max_bytes:
                raise event_too_large(self.provider, self.max_bytes)
        return lines

    def feed_block(self, chunk: bytes) -> bytes | None:
        """``feed``, with the complete lines given back as one block (their LFs kept between
        them, the last one dropped); None while no line is complete."""
        end = chunk.rfind(b"\n")
        if end < 0:
            self.feed(chunk)
            return None
        block = b"".join([*self._pieces, chunk[:end]]) if self._pieces else chunk[:end]
        tail = chunk[end + 1 :]
        self._pieces, self._size = ([tail], len(tail)) if tail else ([], 0)
        if len(block) > self.max_bytes and any(len(line) > self.max_bytes for line in block.split(b"\n")):
            raise event_too_large(self.provider, self.max_bytes)
        return block

    def rest(self) -> bytes | None:
        """What is left after the last line break at the end of the body, if anything."""
        return b"".join(self._pieces) if self._pieces else None


def event_too_large(provider: str, max_bytes: int) -> ProviderError:
    return ProviderError(
        f"{provider} sent a stream event larger than {_size_text(max_bytes)}; the response was aborted "
        "(raise max_event_bytes in [reliability] of config.toml if such events are expected).",
        provider=provider,
        kind="event_too_large",
    )


def response_too_large(provider: str, max_bytes: int) -> ProviderError:
    return ProviderError(
        f"{provider} sent a response larger than {_size_text(max_bytes)} (decompressed); the response was aborted "
        "(raise max_response_bytes in [reliability] of config.toml if such responses are expected).",
        provider=provider,
        kind="response_too_large",
    )


def _size_text(size: int) -> str:
    for unit, name in ((1024 * 1024, "MiB"), (1024, "KiB")):
        if size >= unit:
            return f"{size / unit:g} {name}"
    return f"{size} bytes"


# Decompressed output per step: a small compressed chunk may expand a thousandfold
# (a gzip bomb), so it is inflated in steps of at most this much, each counted.
DECOMPRESS_STEP = 256 * 1024
# Error bodies become one-sentence messages: the first 64 KiB say all there is to say.
MAX_ERROR_BODY = 64 * 1024


class _Inflater:
    """gzip/deflate decoding in bounded steps (httpx inflates a whole chunk at once)."""

    def __init__(self, encoding: str) -> None:
        # 32 + MAX_WBITS: a gzip or zlib header, detected; "deflate" may also be raw.
        self._raw_fallback = encoding == "deflate"
        self._zlib = zlib.decompressobj(32 + zlib.MAX_WBITS)
        self._started = False

    def steps(self, data: bytes) -> Iterator[bytes]:
        while data:
            try:
                out = self._zlib.decompress(data, DECOMPRESS_STEP)
            except zlib.error:
                if self._started or not self._raw_fallback:
                    raise
                self._raw_fallback = False  # headerless deflate, as some servers send it
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self._started = True
            data = self._zlib.unconsumed_tail
            if out:
                yield out
            if self._zlib.eof:  # the end of a gzip member; another may follow
                data = self._zlib.unused_data + data
                self._zlib = zlib.decompressobj(32 + zlib.MAX_WBITS)

    def flush(self) -> bytes:
        return self._zlib.flush()


async def aiter_body(response: httpx.Response, provider: str, limits: StreamLimits) -> AsyncGenerator[bytes, None]:
    """The body's bytes, decompressed here in bounded steps, at most ``limits.max_response_bytes``.

    Encodings other than gzip and deflate pass through as they came (like httpx does).
    """
    encoding = response.headers.get("content-encoding", "").strip().lower()
    inflater = _Inflater(encoding) if encoding in ("gzip", "x-gzip", "deflate") else None
    total = 0
    raw_reader = response.aiter_raw()
    finished = False
    try:
        async for raw in raw_reader:
            for out in inflater.steps(raw) if inflater is not None else (raw,):
                total += len(out)
                if total > limits.max_response_bytes:
                    raise response_too_large(provider, limits.max_response_bytes)
                yield out
            # A reply already relaying gives way to starting turns before its next read.
            await foreground.step_back()
        if inflater is not None and (out := inflater.flush()):
            if total + len(out) > limits.max_response_bytes:
                raise response_too_large(provider, limits.max_response_bytes)
            yield out
        finished = True
    except zlib.error as exc:
        raise ProviderError(
            f"{provider} sent a {encoding} body that does not decompress: {exc}.",
            provider=provider,
            retryable=True,
            kind="bad_encoding",
        ) from None
    finally:
        if not finished:  # left early (a cap, an error, the consumer gone): unwind httpx's readers
            await close_response(response, raw_reader)


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


async def aiter_sse(
    response: httpx.Response, provider: str, limits: StreamLimits
) -> AsyncGenerator[ServerSentEvent | None, None]:
    """The server-sent events of a response, plus ``None`` for every comment line.

    httpx-sse swallows comments (``: keep-alive``, OpenRouter's ``: OPENROUTER PROCESSING``),
    yet they are how a server says "still here" while a model thinks; adapters yield them as
    ``KeepAlive`` so the agent's stall watchdog does not abort a quiet but living stream.
    Lines are split here (LF, CRLF or CR) on the bounded body of ``aiter_body``, and an event
    larger than ``limits.max_event_bytes`` ends the response with a ``ProviderError``. Every
    delta of a reply passes here, so a chunk's complete lines are decoded at once and read by
    ``_EventDecoder`` in one call, not one call per line.
    """
    content_type = response.headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in content_type:
        raise SSEError(f"Expected response header Content-Type to contain 'text/event-stream', got {content_type!r}")
    lines, events = _LineSplitter(provider, limits.max_event_bytes), _EventDecoder(provider, limits.max_event_bytes)
    async with aclosing(aiter_body(response, provider, limits)) as body:
        async for chunk in body:
            block = lines.feed_block(chunk)
            if block is None:
                continue
            if b"\r" in block:  # CR or CRLF line ends: each line on its own
                texts = [text for line in block.split(b"\n") for text in _sse_lines(line)]
            else:
                texts = block.decode("utf-8", "replace").split("\n")
            for event in events.feed(texts):
                yield event
    if (rest := lines.rest()) is not None:
        for event in events.feed(_sse_lines(rest)):
            if event is not None:
                yield event
    # Like httpx-sse: an event is dispatched by its blank line; one cut off at EOF is dropped.


class _EventDecoder:
    """SSE lines in, events out (``None`` for a comment line), with httpx-sse's reading of the
    fields (its ``SSEDecoder``, which ``EventSource`` uses): ``event``, ``data`` (joined by
    newlines), ``id`` (kept across events, ignored when it holds NUL), ``retry`` (an integer);
    a blank line dispatches. Also counts each event's size (comments aside) against ``max_bytes``."""

    def __init__(self, provider: str, max_bytes: int) -> None:
        self.provider = provider
        self.max_bytes = max_bytes
        self._event = ""
        self._data: list[str] = []
        self._last_id = ""
        self._retry: int | None = None
        self._size = 0

    def feed(self, texts: list[str]) -> list[ServerSentEvent | None]:
        out: list[ServerSentEvent | None] = []
        data = self._data
        for text in texts:
            if not text:
                self._size = 0
                if self._event or data or self._last_id or self._retry is not None:
                    out.append(ServerSentEvent(self._event, "\n".join(data), self._last_id, self._retry))
                    self._event, self._retry = "", None
                    data = self._data = []
                continue
            if text[0] == ":":
                out.append(None)
                continue
            self._size += len(text)
            if self._size > self.max_bytes:
                raise event_too_large(self.provider, self.max_bytes)
            field, _, value = text.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id":
                if "\0" not in value:
                    self._last_id = value
            elif field == "retry":
                try:
                    self._retry = int(value)
                except ValueError:
                    pass
        return out


def _sse_lines(line: bytes) -> list[str]:
    """One LF-terminated piece as SSE lines: CRLF's CR dropped, a lone CR ends a line too."""
    line = line.removesuffix(b"\r")
    text = line.decode("utf-8", "replace")
    return text.split("\r") if "\r" in text else [text]


def ended_early(provider: str, terminal: str) -> ProviderError:
    # Retryable: a proxy or load balancer dropping a long stream is the usual cause, and
    # the agent only retries when nothing of the reply was shown yet.
    return ProviderError(
        f"The {provider} stream ended early (no {terminal}); the response is incomplete.",
        provider=provider,
        retryable=True,
        kind="stream_ended_early",
    )
