"""The providers' HTTP on asyncio's own streams (``providers/asyncio_net``): httpcore's network
backend, under httpx's transport, for requests that go straight to the server. Real servers on
127.0.0.1 (HTTP and, with a trustme authority, HTTPS) and real sockets; what trio uses instead."""

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import trustme

from daemon.providers.asyncio_net import WRITE_HOLD_BYTES, AsyncioStream, AsyncioTransport
from daemon.providers.http import CLIENT_LIMITS, direct_transport
from tests.support.replay import ReplayServer, ScriptedResponse

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the backend is asyncio's (trio: test_trio_keeps_httpx_own_transport)


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def _tls_server(authority: trustme.CA, *names: str) -> ReplayServer:
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(*names).configure_cert(served)
    return ReplayServer(tls=served)


def _trusting(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return context


async def _post(transport: httpx.AsyncBaseTransport, url: str, body: bytes = b'{"q":1}') -> httpx.Response:
    request = httpx.Request(
        "POST", url, content=body, extensions={"timeout": {"connect": 5, "read": 5, "write": 5, "pool": 5}}
    )
    return await transport.handle_async_request(request)


async def _read_all(response: httpx.Response) -> bytes:
    chunks = [chunk async for chunk in response.aiter_raw()]
    await response.aclose()
    return b"".join(chunks)


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


async def test_a_streamed_answer_over_https_names_the_host_and_reuses_its_connection(authority) -> None:
    with _tls_server(authority, "localhost", "127.0.0.1") as server:
        server.route("POST", "/v1/messages", lambda request: ScriptedResponse(body=b"one two three", split_at=[4, 8]))
        transport = AsyncioTransport(_trusting(authority), CLIENT_LIMITS)
        try:
            first = await _post(transport, f"{server.url}/v1/messages", b'{"n":1}')
            tls = first.extensions["network_stream"].get_extra_info("ssl_object")
            assert tls.server_hostname == "localhost" and tls.version().startswith("TLS")
            assert first.status_code == 200 and await _read_all(first) == b"one two three"
            second = await _post(transport, f"{server.url}/v1/messages", b'{"n":2}')
            assert await _read_all(second) == b"one two three"
        finally:
            await transport.aclose()
        assert [r.body for r in server.requests] == [b'{"n":1}', b'{"n":2}']


async def test_a_certificate_for_another_name_is_refused(authority) -> None:
    with _tls_server(authority, "elsewhere.example") as server:
        server.route("POST", "/", lambda request: ScriptedResponse(body=b"never"))
        transport = AsyncioTransport(_trusting(authority), CLIENT_LIMITS)
        try:
            with pytest.raises(httpx.ConnectError, match="certificate"):
                await _post(transport, f"{server.url}/")
        finally:
            await transport.aclose()
        assert server.requests == []


@asynccontextmanager
async def _http_server(handle) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering each connection with ``handle``; its URL. Every connection
    it accepted is closed when the block ends (asyncio's ``Server.close`` leaves them open)."""
    accepted: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        with contextlib.suppress(ConnectionError):
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


async def test_a_kept_alive_connection_the_server_closed_is_not_used_again() -> None:
    connections: list[int] = []

    async def answer_once_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")  # keep-alive by default...
        await writer.drain()
        writer.close()  # ...and closed at once, while the client keeps the connection

    transport = AsyncioTransport(ssl.create_default_context(), CLIENT_LIMITS)
    async with _http_server(answer_once_then_close) as url:
        try:
            assert await _read_all(await _post(transport, url)) == b"ok"
            await asyncio.sleep(0.1)  # the server's FIN arrives
            assert await _read_all(await _post(transport, url)) == b"ok"  # on a new connection, not a dead one
        finally:
            await transport.aclose()
    assert connections == [0, 1]


async def test_a_silent_server_times_out_and_a_closed_port_is_a_connect_error() -> None:
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await reader.read()  # until the client leaves

    transport = AsyncioTransport(ssl.create_default_context(), CLIENT_LIMITS)
    async with _http_server(never_answer) as url:
        try:
            timeouts = {"connect": 5, "read": 0.2, "write": 5, "pool": 5}
            request = httpx.Request("POST", url, content=b"{}", extensions={"timeout": timeouts})
            with anyio.fail_after(5):
                with pytest.raises(httpx.ReadTimeout):
                    await transport.handle_async_request(request)
            # Cancelled from outside (a turn's cancel scope), not by its own timeout: no error of its own.
            with anyio.move_on_after(0.2) as scope:
                await _post(transport, url)
            assert scope.cancelled_caught
            free = socket.socket()
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
            free.close()  # nothing listens there now
            with pytest.raises(httpx.ConnectError):
                await _post(transport, f"http://127.0.0.1:{port}/")
        finally:
            await transport.aclose()


async def test_a_request_goes_out_in_one_send_when_its_answer_is_read() -> None:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=ours)
    stream = AsyncioStream(reader, writer)
    try:
        await stream.write(b"POST / HTTP/1.1\r\n\r\n")
        await stream.write(b"body")
        await asyncio.sleep(0.05)
        with pytest.raises(BlockingIOError):
            theirs.recv(100)  # held: nothing sent yet
        theirs.send(b"answer")
        assert await stream.read(100) == b"answer"  # the read sends what was held first
        assert theirs.recv(100) == b"POST / HTTP/1.1\r\n\r\nbody"
        big = b"x" * WRITE_HOLD_BYTES
        await stream.write(big)  # a body this big goes as it comes
        await asyncio.sleep(0.05)
        assert len(theirs.recv(2 * WRITE_HOLD_BYTES)) > 0
    finally:
        await stream.aclose()
        theirs.close()
