"""The providers' HTTP on asyncio: an httpx transport that speaks HTTP/1.1 with h11 over
asyncio's own streams, keeping connections alive per origin (``AsyncioTransport``).

Every turn's request goes through here, and a burst of 200 turns started at once pays for each
before any first delta: through httpx's own transport (httpcore's pool, its connection and
HTTP/1.1 layers, anyio's streams with a cancel scope per read and write) a streamed POST to its
head and first chunk cost 5.3 M instructions, through this one 2.0 M (a microbenchmark on
127.0.0.1), and the bench's 200-session burst p50 went from ~350 to ~230 ms. What it leaves
out, ponder does not use: HTTP/2, proxies (a proxy named in the environment sends every request
through httpx's own way, ``http.Route``), request bodies that stream (every provider request is
one buffer), ``Expect: 100-continue``. On trio, httpx's own transport serves.

Errors are httpx's (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``, ...), each caused
by what happened underneath (a refused certificate is found there). A request is never sent
twice: a kept-alive connection the server closed meanwhile fails like any broken connection,
and the adapters' retries decide.
"""

import asyncio
import ipaddress
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

# What one read of a connection takes at most, and what its reader buffers before it pauses.
READ_BYTES = 64 * 1024
# What anyio's connect_tcp (httpx's own way) waits before trying a name's next address.
HAPPY_EYEBALLS_DELAY_S = 0.25

_Origin = tuple[bytes, bytes, int]


class _Connection:
    """One HTTP/1.1 connection: its streams and h11's state of it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    def reusable_at(self, now: float, expiry: float) -> bool:
        """Still open, unexpired, and nothing came from the server while it was idle (asyncio
        reads as data arrives, so a close shows in the reader at once)."""
        return now - self.idle_since < expiry and not (
            self.reader.at_eof() or self.reader.exception() is not None or self.writer.is_closing()
        )

    def close(self) -> None:
        self.writer.close()

    async def send(self, data: bytes, timeout: float | None) -> None:
        try:
            self.writer.write(data)
            async with asyncio.timeout(timeout):
                await self.writer.drain()  # no round of the loop unless the socket is full
        except TimeoutError as exc:
            raise httpx.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc)) from exc

    async def next_event(self, timeout: float | None) -> Any:
        """h11's next event from the server, reading as needed."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is not h11.NEED_DATA:
                return event
            try:
                async with asyncio.timeout(timeout):
                    data = await self.reader.read(READ_BYTES)
            except TimeoutError as exc:
                raise httpx.ReadTimeout(str(exc)) from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc)) from exc
            if not data and self.h11.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            self.h11.receive_data(data)


class _Body(httpx.AsyncByteStream):
    """A response's body as it arrives; its connection goes back to the pool at its end, or is
    closed when the body is left before it."""

    def __init__(self, pool: "AsyncioTransport", origin: _Origin, connection: _Connection, timeout: float | None):
        self._pool = pool
        self._origin = origin
        self._connection = connection
        self._timeout = timeout
        self._open = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while self._open:
            event = await connection.next_event(self._timeout)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._open = False
                self._pool.put_back(self._origin, connection)
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("The server closed the connection before the body ended.")

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._connection.close()


class AsyncioTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 requests over asyncio's streams, with idle connections kept per origin (at most
    ``limits.max_keepalive_connections`` each, for ``limits.keepalive_expiry`` seconds)."""

    def __init__(self, ssl_context: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._ssl = ssl_context
        self._ssl.set_alpn_protocols(["http/1.1"])  # as httpcore does for HTTP/1.1 only
        self._max_idle = limits.max_keepalive_connections if limits.max_keepalive_connections is not None else 20
        self._expiry = limits.keepalive_expiry if limits.keepalive_expiry is not None else 5.0
        self._idle: dict[_Origin, list[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.raw_scheme, url.raw_host, url.port or (443 if url.scheme == "https" else 80))
        timeouts = request.extensions.get("timeout", {})
        connection = self._take_idle(origin) or await self._connect(url, origin[2], timeouts.get("connect"))
        try:
            request_bytes = connection.h11.send(
                h11.Request(method=request.method, target=url.raw_path, headers=request.headers.raw)
            )
            body = await request.aread()
            if body:
                request_bytes += connection.h11.send(h11.Data(data=body))
            request_bytes += connection.h11.send(h11.EndOfMessage())
            await connection.send(request_bytes, timeouts.get("write"))  # the head and the body in one send
            while not isinstance(event := await connection.next_event(timeouts.get("read")), h11.Response):
                if not isinstance(event, h11.InformationalResponse):
                    raise httpx.RemoteProtocolError(f"Expected a response from the server, got {type(event).__name__}.")
        except h11.LocalProtocolError as exc:
            connection.close()
            raise httpx.LocalProtocolError(str(exc)) from exc
        except BaseException:
            connection.close()
            raise
        return httpx.Response(
            event.status_code,
            headers=event.headers.raw_items(),
            stream=_Body(self, origin, connection, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
            request=request,
        )

    def put_back(self, origin: _Origin, connection: _Connection) -> None:
        """A connection whose exchange ended: kept for the next request if both sides may go on."""
        if connection.h11.our_state is h11.DONE and connection.h11.their_state is h11.DONE:
            idle = self._idle.setdefault(origin, [])
            if len(idle) < self._max_idle:
                connection.h11.start_next_cycle()
                connection.idle_since = time.monotonic()
                idle.append(connection)
                return
        connection.close()

    def _take_idle(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used first
            if connection.reusable_at(now, self._expiry):
                return connection
            connection.close()
        return None

    async def _connect(self, url: httpx.URL, port: int, timeout: float | None) -> _Connection:
        https = url.scheme == "https"
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    url.host,
                    port,
                    ssl=self._ssl if https else None,
                    server_hostname=url.host if https else None,
                    # A name's addresses are raced as anyio does (a broken IPv6 route does not
                    # cost the whole connect timeout); an address has nothing to race.
                    happy_eyeballs_delay=None if _is_address(url.host) else HAPPY_EYEBALLS_DELAY_S,
                    limit=READ_BYTES,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc)) from exc
        except OSError as exc:  # refused, unreachable, unresolvable, TLS (ssl.SSLError is one)
            raise httpx.ConnectError(str(exc)) from exc
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
