"""A WebSocket client for JSON-RPC, one message per text frame: what ``ponder attach --url``
(and ``ponder acp --attach --url``) speak to a listening daemon. wsproto drives the protocol, as
on the daemon's side (``daemon.server.websocket``), so it runs on anyio under asyncio and trio.

The handshake sends ``Authorization: Bearer TOKEN``; a daemon that refuses it (401, 403) is
``WebSocketRefused`` with the status and the daemon's one-sentence reason. Pings are answered;
a close from the daemon ends ``receive`` (its code and reason are kept: a daemon that dropped a
client says why).
"""

import ssl
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

READ_CHUNK = 256 * 1024
CONNECT_S = 10.0  # the TCP connection and the handshake together
REFUSAL_BODY_MAX = 4096


class WebSocketRefused(Exception):
    """The daemon refused the handshake (``status``: 401 no or wrong token, 403 Host or Origin)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


class WebSocketClient:
    """One open WebSocket: text messages out, whole text messages in."""

    def __init__(self, stream: ByteStream, ws: WSConnection) -> None:
        self._stream = stream
        self._ws = ws
        self._lock = anyio.Lock()  # the sender and the reader's pongs share the stream
        self._parts: list[str] = []
        self._pending: list[str] = []
        self.close_code: int | None = None
        self.close_reason: str | None = None

    async def _send(self, event: object) -> None:
        data = self._ws.send(event)  # type: ignore[arg-type]
        async with self._lock:
            await self._stream.send(data)

    async def send_text(self, text: str) -> None:
        await self._send(TextMessage(data=text))

    async def receive(self) -> str | None:
        """The next whole text message; None once the daemon closed the connection (or it broke)."""
        while True:
            await self._take_events()  # also those that came with the handshake's answer
            if self._pending:
                return self._pending.pop(0)
            if self.close_code is not None:
                return None
            try:
                data = await self._stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.close_code = self.close_code or 1006
                return None
            self._ws.receive_data(data)

    async def _take_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, TextMessage):
                self._parts.append(event.data)
                if event.message_finished:
                    self._pending.append("".join(self._parts))
                    self._parts = []
            elif isinstance(event, BytesMessage):
                pass  # the daemon sends text only
            elif isinstance(event, Ping):
                await self._send(event.response())
            elif isinstance(event, CloseConnection):
                self.close_code, self.close_reason = event.code, event.reason or None
                try:
                    await self._send(event.response())
                except (LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass

    async def aclose(self, code: int = 1000) -> None:
        """Close politely (a close frame) if still open, then the stream."""
        with anyio.move_on_after(1.0, shield=True):
            try:
                if self.close_code is None:
                    await self._send(CloseConnection(code=code))
            except (LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass
            await self._stream.aclose()


async def connect_websocket(url: str, token: str | None) -> WebSocketClient:
    """Open ``url`` (``ws://`` or ``wss://``) presenting ``token``; ``WebSocketRefused`` when the
    daemon says no, ``OSError`` when nothing answers (``TimeoutError`` after ``CONNECT_S``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"{url} is not a ws:// or wss:// URL")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    with anyio.fail_after(CONNECT_S):
        stream: ByteStream
        if secure:  # the system's trust store (SSL_CERT_FILE and SSL_CERT_DIR are honoured)
            context = ssl.create_default_context()
            stream = await anyio.connect_tcp(parts.hostname, port, ssl_context=context, tls_standard_compatible=False)
        else:
            stream = await anyio.connect_tcp(parts.hostname, port)
        try:
            ws = WSConnection(ConnectionType.CLIENT)
            headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
            await stream.send(ws.send(Request(host=host_header, target=target, extra_headers=headers)))
            status: int | None = None
            body = bytearray()
            while True:
                try:
                    data = await stream.receive(READ_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                    if status is not None:
                        raise WebSocketRefused(status, body.decode("utf-8", "replace").strip()) from None
                    raise ConnectionResetError("the daemon closed the connection during the handshake") from exc
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, AcceptConnection):
                        client = WebSocketClient(stream, ws)
                        return client
                    if isinstance(event, RejectConnection):
                        status = event.status_code
                        if not event.has_body:
                            raise WebSocketRefused(status, "")
                    elif isinstance(event, RejectData):
                        if len(body) < REFUSAL_BODY_MAX:
                            body += event.data[: REFUSAL_BODY_MAX - len(body)]
                        if event.body_finished:
                            assert status is not None
                            raise WebSocketRefused(status, body.decode("utf-8", "replace").strip())
        except BaseException:
            await stream.aclose()
            raise
