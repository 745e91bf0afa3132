"""The providers' HTTP/1.1 on asyncio (``providers/asyncio_net.AsyncioTransport``): h11 over
asyncio's streams, connections kept alive per origin. Real servers on 127.0.0.1 (asyncio's, and
the replay server over HTTPS with a trustme authority); what trio uses instead."""

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import trustme

from daemon.providers.asyncio_net import AsyncioTransport
from daemon.providers.http import CLIENT_LIMITS, direct_transport
from tests.support.replay import ReplayServer, ScriptedResponse

pytestmark = pytest.mark.anyio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the transport is asyncio's (trio: test_trio_keeps_httpx_own_transport)


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def _transport(context: ssl.SSLContext | None = None) -> AsyncioTransport:
    return AsyncioTransport(context or ssl.create_default_context(), CLIENT_LIMITS)


async def _post(transport: httpx.AsyncBaseTransport, url: str, body: bytes = b'{"q":1}', read_s: float = 5):
    timeouts = {"connect": 5, "read": read_s, "write": 5, "pool": 5}
    return await transport.handle_async_request(
        httpx.Request("POST", url, content=body, extensions={"timeout": timeouts})
    )


async def _read_all(response: httpx.Response) -> bytes:
    try:
        return b"".join([chunk async for chunk in response.aiter_raw()])
    finally:
        await response.aclose()


@asynccontextmanager
async def _server(handle: Handler) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering each connection with ``handle``, and its URL. Every
    connection it accepted is closed at the end (asyncio's ``Server.close`` leaves them open)."""
    accepted: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await handle(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()
        for writer in accepted:
            writer.close()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


async def test_asyncio_gets_the_asyncio_transport() -> None:
    transport = direct_transport()
    try:
        assert isinstance(transport, AsyncioTransport)
    finally:
        await transport.aclose()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_keeps_httpx_own_transport() -> None:
    transport = direct_transport()
    try:
        assert type(transport) is httpx.AsyncHTTPTransport
    finally:
        await transport.aclose()


async def test_requests_one_after_another_share_one_kept_alive_connection() -> None:
    connections: list[list[bytes]] = []

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen: list[bytes] = []
        connections.append(seen)
        while True:
            seen.append(await _read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\none\r\n4\r\n two\r\n0\r\n\r\n")
            await writer.drain()

    transport = _transport()
    async with _server(keep_alive) as url:
        try:
            first = await _post(transport, url, b'{"n":1}')
            assert first.status_code == 200 and first.extensions["http_version"] == b"HTTP/1.1"
            assert await _read_all(first) == b"one two"
            assert await _read_all(await _post(transport, url, b'{"n":2}')) == b"one two"
        finally:
            await transport.aclose()
    assert len(connections) == 1 and len(connections[0]) == 2
    assert connections[0][0].endswith(b'{"n":1}') and connections[0][1].endswith(b'{"n":2}')
    head = connections[0][0].split(b"\r\n\r\n")[0].lower()
    assert b"post / http/1.1" in head and b"host: 127.0.0.1:" in head and b"content-length: 7" in head


async def test_a_connection_is_not_used_again_when_it_cannot_be() -> None:
    """Closed by the server while idle, answered with ``connection: close``, or left before its
    body ended: the next request gets a new connection, and succeeds."""
    connections: list[int] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        while True:
            request = await _read_request(reader)
            if request.endswith(b"close-after"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
                writer.close()  # keep-alive by its headers, closed at once
                return
            if request.endswith(b"say-close"):
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
            elif request.endswith(b"long"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n" + b"x" * 10)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    transport = _transport()
    async with _server(answer) as url:
        try:
            assert await _read_all(await _post(transport, url, b"close-after")) == b"ok"
            await asyncio.sleep(0.1)  # the server's FIN arrives
            assert await _read_all(await _post(transport, url, b"say-close")) == b"ok"
            long = await _post(transport, url, b"long")
            async for chunk in long.aiter_raw():
                assert chunk.startswith(b"x")
                break
            await long.aclose()  # left before its end
            assert await _read_all(await _post(transport, url, b"plain")) == b"ok"
        finally:
            await transport.aclose()
    assert connections == [0, 1, 2, 3]


async def test_timeouts_cancellation_and_broken_answers_are_httpx_errors() -> None:
    async def misbehave(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await _read_request(reader)
        if request.endswith(b"short"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            await writer.drain()
            writer.close()
        elif request.endswith(b"garbage"):
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
        elif request.endswith(b"hang-up"):
            writer.close()
        else:
            await reader.read()  # silent until the client leaves

    transport = _transport()
    async with _server(misbehave) as url:
        try:
            with anyio.fail_after(5), pytest.raises(httpx.ReadTimeout):
                await _post(transport, url, b"silent", read_s=0.2)
            # Cancelled from outside (a turn's cancel scope), not by its own timeout: no error of its own.
            with anyio.move_on_after(0.2) as scope:
                await _post(transport, url, b"silent")
            assert scope.cancelled_caught
            with pytest.raises(httpx.RemoteProtocolError):
                await _read_all(await _post(transport, url, b"short"))
            with pytest.raises(httpx.RemoteProtocolError):
                await _post(transport, url, b"garbage")
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await _post(transport, url, b"hang-up")
        finally:
            await transport.aclose()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    with pytest.raises(httpx.ConnectError):
        await _post(transport, f"http://127.0.0.1:{port}/")


def _tls_server(authority: trustme.CA, *names: str) -> ReplayServer:
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(*names).configure_cert(served)
    return ReplayServer(tls=served)


def _trusting(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return context


async def test_https_checks_the_certificate_against_the_host_name(authority) -> None:
    with _tls_server(authority, "localhost", "127.0.0.1") as server:
        server.route("POST", "/v1/messages", lambda request: ScriptedResponse(body=b"one two three", split_at=[4, 8]))
        transport = _transport(_trusting(authority))
        try:
            assert await _read_all(await _post(transport, f"{server.url}/v1/messages")) == b"one two three"
        finally:
            await transport.aclose()
        assert [r.body for r in server.requests] == [b'{"q":1}']
    with _tls_server(authority, "elsewhere.example") as server:
        transport = _transport(_trusting(authority))
        try:
            with pytest.raises(httpx.ConnectError, match="certificate") as refused:
                await _post(transport, f"{server.url}/")
        finally:
            await transport.aclose()
        assert isinstance(refused.value.__cause__, ssl.SSLCertVerificationError)
        assert server.requests == []
