"""The network under the providers' HTTP on asyncio: httpcore's network backend made of
asyncio's own streams, and the httpx transport whose connection pool uses it.

httpcore's default backend goes through anyio: every read and write enters a cancel scope
(``fail_after``) and every connection a task group racing addresses (happy eyeballs). For a
streamed POST and its first chunk that is ~40 % of the exchange's CPU (~1.0 against ~0.6 ms
measured through ``Route`` on 127.0.0.1), and a burst of 200 turns pays it 200 times before
any first delta. asyncio's streams do the same work with its own timeouts (``asyncio.timeout``,
a timer handle) and ``create_connection`` (happy eyeballs only when a name resolves to several
addresses). On trio the default backend stays: this one is for asyncio only.

anyio's cancel scopes cancel an asyncio task with ``Task.cancel``, which these awaits honour,
and ``asyncio.timeout`` tells its own expiry from a cancellation that comes from outside.
"""

import asyncio
import ipaddress
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

# What anyio's connect_tcp waits before trying a name's next address (httpcore's default way).
HAPPY_EYEBALLS_DELAY_S = 0.25
# A connection's read buffer: reading from the socket pauses above twice this (asyncio's default).
READ_LIMIT = 64 * 1024
# Written bytes held for one send (``AsyncioStream``) at most this many: a bigger body goes as it comes.
WRITE_HOLD_BYTES = 64 * 1024


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection, as httpcore reads and writes it, with httpcore's errors.

    A request's writes (its head, then its body) are held until the first read, or until they
    fill ``WRITE_HOLD_BYTES``, and go out as one: httpcore writes the head and the body apart,
    and each write is a send of its own (~0.1 ms of a burst's loaded machine on 127.0.0.1) and a
    segment of its own to the server. HTTP/1.1 reads the answer after the request, so nothing
    waits on the held bytes in between."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._write_timeout: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            await self._flush()
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        self._write_timeout = timeout
        if self._held_bytes >= WRITE_HOLD_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        data = b"".join(self._held)
        self._held.clear()
        self._held_bytes = 0
        try:
            self._writer.write(data)
            async with asyncio.timeout(self._write_timeout):
                await self._writer.drain()  # no round of the loop unless the socket is full
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as exc:
            self._writer.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            self._writer.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return self  # the writer carries the TLS transport from here on

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # httpcore asks of an idle kept-alive connection whether the server closed it. asyncio
            # has already read whatever came (its transport reads as data arrives), so the
            # reader's state tells, not the socket's.
            return self._reader.at_eof() or self._reader.exception() is not None or self._writer.is_closing()
        names = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}
        return self._writer.get_extra_info(names[info]) if info in names else None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's way to open connections, on asyncio's streams."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                    # An address has nothing to race (and the race costs a task per try).
                    happy_eyeballs_delay=None if _is_address(host) else HAPPY_EYEBALLS_DELAY_S,
                    limit=READ_LIMIT,
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        _apply(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path, limit=READ_LIMIT)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        _apply(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _apply(writer: asyncio.StreamWriter, socket_options: Iterable[httpcore.SOCKET_OPTION] | None) -> None:
    sock = writer.get_extra_info("socket")
    for option in socket_options or ():
        sock.setsockopt(*option)


class AsyncioTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (its request and response mapping, its errors), its connection pool
    made with ``AsyncioBackend``. httpx takes no network backend, so the pool it made is
    replaced, before any use, by one with the same settings."""

    def __init__(self, ssl_context: ssl.SSLContext, limits: httpx.Limits) -> None:
        super().__init__(verify=ssl_context, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncioBackend(),
        )
