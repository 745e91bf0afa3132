"""``--listen ws://127.0.0.1:PORT``: JSON-RPC over WebSocket, one message per text frame, with
the handshake checked before anything else (PROTOCOL.md "Transports and several clients").

The WebSocket protocol is wsproto's (python-hyper: sans-I/O, so it runs on anyio's streams under
asyncio and trio alike; the handshake is parsed by h11, which bounds its size). A handshake is
refused 403 when its ``Host`` is not loopback (or a name ``--allow-host`` gave with
``--allow-remote``: DNS rebinding) or it carries an ``Origin`` that ``--allow-origin`` did not
name (a web page), and 401 without ``Authorization: Bearer`` and the home's ``serve.token``
(compared in constant time). A text message longer than ``--max-line-bytes`` is discarded as it
streams in, never held whole, and answered ``-32600`` like an over-long line; a binary message
too; the connection stays open. Messages go out through the connection's bounded queue: a
client that stops reading is dropped with a close frame saying why (1008).
"""

import ipaddress
import logging
import math
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream, SocketListener, TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.tls import TLSStream
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from daemon.errors import ListenRefused
from daemon.jsonrpc.backlog import Backlog
from daemon.jsonrpc.framing import BINARY_FRAME, OVERLONG, Outgoing, _Overlong
from daemon.jsonrpc.streams import DRAIN_S, READ_CHUNK, write_batches
from daemon.server.listen import Clients, Listener
from daemon.server.token import ensure_token, read_token, token_matches

log = logging.getLogger("ponder.server")

HANDSHAKE_S = 10.0  # a client that has not finished its handshake by then is closed
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
POLICY_VIOLATION = 1008


@dataclass
class WebSocketOptions:
    host: str
    port: int
    home: Path
    tls: ssl.SSLContext | None = None
    allow_remote: bool = False
    allow_origins: frozenset[str] = frozenset()
    allow_hosts: frozenset[str] = frozenset()
    max_message_bytes: int = 32 * 1024 * 1024
    bound_port: int = field(default=0)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        home: Path,
        allow_remote: bool,
        tls_cert: str | None,
        tls_key: str | None,
        allow_origins: list[str],
        allow_hosts: list[str],
        max_message_bytes: int,
    ) -> "WebSocketOptions":
        """The options ``--listen URL`` and its companions give; a mistake is ``ListenRefused``."""
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            raise ListenRefused(f"--listen {url}: the port is not a number between 0 and 65535.") from None
        host = parts.hostname
        if not host or port is None:
            raise ListenRefused(f"--listen {url}: give an address and a port, as in ws://127.0.0.1:8765.")
        secure = parts.scheme == "wss"
        if not _is_loopback(host) and not allow_remote:
            raise ListenRefused(
                f"--listen {url}: {host} is not a loopback address; listening beyond this machine needs "
                "--allow-remote (with wss:// and --tls-cert/--tls-key)."
            )
        if allow_remote and not (secure and tls_cert and tls_key):
            raise ListenRefused("--allow-remote needs wss:// with --tls-cert FILE and --tls-key FILE.")
        if secure and not (tls_cert and tls_key):
            raise ListenRefused(f"--listen {url}: wss:// needs --tls-cert FILE and --tls-key FILE.")
        context = None
        if secure:
            assert tls_cert is not None and tls_key is not None
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            try:
                context.load_cert_chain(tls_cert, tls_key)
            except (OSError, ssl.SSLError) as exc:
                raise ListenRefused(f"Cannot use --tls-cert {tls_cert} / --tls-key {tls_key}: {exc}.") from None
        ensure_token(home)  # made now (0600) so that a client can read it as soon as the daemon listens
        return cls(
            host=host,
            port=port,
            home=home,
            tls=context,
            allow_remote=allow_remote,
            allow_origins=frozenset(allow_origins),
            allow_hosts=frozenset(h.lower() for h in allow_hosts) if allow_remote else frozenset(),
            max_message_bytes=max_message_bytes,
        )

    def shown(self) -> str:
        scheme = "wss" if self.tls is not None else "ws"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.bound_port or self.port}"

    def refusal(self, request: Request) -> tuple[int, str] | None:
        """(status, why) when the handshake must be refused, else None."""
        headers = {name.lower(): value for name, value in request.extra_headers}
        host = _host_name(request.host)
        if not (_is_loopback(host) or host in self.allow_hosts):
            return 403, "This Host is not served here (only loopback, or a name given with --allow-host)."
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1") not in self.allow_origins:
            return 403, "Requests from this Origin are not accepted (see ponder serve --allow-origin)."
        expected = read_token(self.home)
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, presented = authorization.partition(" ")
        if expected is None or scheme.lower() != "bearer" or not token_matches(presented.strip(), expected):
            return 401, "Missing or wrong token: send Authorization: Bearer with the token in serve.token in the home."
        return None


def _host_name(host: str) -> str:
    """A Host header's name without its port (``[::1]:80`` → ``::1``), lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def websocket_listener(options: WebSocketOptions) -> Listener:
    async def listen(clients: Clients, tg: TaskGroup, *, task_status: TaskStatus[None]) -> None:
        bound = await anyio.create_tcp_listener(local_host=options.host, local_port=options.port)
        listener = bound.listeners[0]  # one address: one socket
        assert isinstance(listener, SocketListener)
        options.bound_port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        async with bound:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # EMFILE and the like: the clients already served go on
                    log.warning("could not accept a WebSocket connection: %s", exc)
                    await anyio.sleep(0.05)
                    continue
                tg.start_soon(_serve_one, clients, stream, options)

    return listen


class _Socket:
    """One client's WebSocket: wsproto's state, and the stream written under a lock (the writer
    and the reader's pongs and close answers share it)."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.SERVER)
        self.lock = anyio.Lock()

    async def send(self, *events: object) -> None:
        """``events`` in one write (a refusal's head and body reach the client as one segment)."""
        data = b"".join(self.ws.send(event) for event in events)  # type: ignore[arg-type]
        async with self.lock:
            await self.stream.send(data)

    async def send_messages(self, messages: list[bytes]) -> None:
        """Each message as a text frame, in one write."""
        await self.send(*(Message(data=message.decode("utf-8")) for message in messages))


async def _serve_one(clients: Clients, stream: ByteStream, options: WebSocketOptions) -> None:
    sock = _Socket(stream)
    try:
        request = None
        with anyio.move_on_after(HANDSHAKE_S):
            if options.tls is not None:  # here, not in the accept loop: a slow TLS client holds up only itself
                stream = await TLSStream.wrap(
                    stream, server_side=True, ssl_context=options.tls, standard_compatible=False
                )
                sock = _Socket(stream)
            request = await _handshake(sock)
        if request is None:
            return
        refusal = options.refusal(request)
        if refusal is not None:
            status, why = refusal
            headers = [(b"content-type", b"text/plain; charset=utf-8")]
            if status == 401:
                headers.append((b"www-authenticate", b'Bearer realm="ponder"'))
            await sock.send(
                RejectConnection(status_code=status, headers=headers, has_body=True), RejectData(data=why.encode())
            )
            return
        await sock.send(AcceptConnection())
        await _serve_messages(clients, sock, options)
    except Exception as exc:  # the client went away or broke the protocol: the daemon goes on
        if not _client_gone(exc):
            log.info("closed a WebSocket connection: %s", exc)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_S):
            await stream.aclose()


def _client_gone(exc: BaseException) -> bool:
    """Whether ``exc`` (or every part of a group) only says that the client went away."""
    gone = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError, ssl.SSLError)
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, gone)


async def _handshake(sock: _Socket) -> Request | None:
    """The client's upgrade request; None when it went away first or sent no valid one (then it
    was answered 400 when that could still be said)."""
    while True:
        try:
            data = await sock.stream.receive(READ_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
        try:
            sock.ws.receive_data(data)
            for event in sock.ws.events():
                if isinstance(event, Request):
                    return event
        except RemoteProtocolError as exc:
            hint = exc.event_hint
            if isinstance(hint, RejectConnection):
                await sock.stream.send(sock.ws.send(hint))
            return None


async def _serve_messages(clients: Clients, sock: _Socket, options: WebSocketOptions) -> None:
    in_send, in_receive = anyio.create_memory_object_stream[bytes | _Overlong](64)
    out_send, out_receive = anyio.create_memory_object_stream[Outgoing](math.inf)  # bounded by its backlog
    drop = clients.new_drop()
    with drop.scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_messages, sock, in_send, options.max_message_bytes)
            tg.start_soon(_write_messages, sock, out_receive, drop.backlog)
            try:
                await clients.serve("websocket", in_receive, out_send, drop)
            finally:
                out_send.close()
            tg.cancel_scope.cancel()
    if sock.ws.state is not ConnectionState.OPEN:
        return  # the client closed it (and was answered)
    # Dropped: say why, if the client still reads anything at all; else (shutdown) a normal close.
    closing = (
        CloseConnection(code=1000) if drop.reason is None else CloseConnection(POLICY_VIOLATION, drop.reason[:120])
    )
    with anyio.move_on_after(DRAIN_S, shield=True):
        await sock.send(closing)


async def _read_messages(sock: _Socket, send: MemoryObjectSendStream[bytes | _Overlong], limit: int) -> None:
    """Each text message, whole, to ``send``; one over ``limit`` (or a binary one) as a marker the
    connection answers -32600, discarded as it streams in."""
    parts: list[bytes] = []
    size = 0
    over = False
    async with send:
        while True:
            try:
                data = await sock.stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ssl.SSLError):
                return
            sock.ws.receive_data(data)
            for event in sock.ws.events():
                if isinstance(event, TextMessage):
                    if not over:
                        chunk = event.data.encode("utf-8", "surrogatepass")
                        size += len(chunk)
                        if size > limit:
                            over, parts = True, []
                        else:
                            parts.append(chunk)
                    if event.message_finished:
                        await send.send(OVERLONG if over else b"".join(parts))
                        parts, size, over = [], 0, False
                elif isinstance(event, BytesMessage):
                    if event.message_finished:
                        await send.send(BINARY_FRAME)
                elif isinstance(event, Ping):
                    await sock.send(event.response())
                elif isinstance(event, CloseConnection):
                    await sock.send(event.response())
                    return


async def _write_messages(sock: _Socket, receive: MemoryObjectReceiveStream[Outgoing], backlog: Backlog) -> None:
    """Each queued message as one text frame, those queued together in one write (``write_batches``).
    A message made in ``Pieces`` is made whole first: one JSON-RPC message is one text frame
    (PROTOCOL.md "Transports"), and a frame's length goes before its payload."""
    gone = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ssl.SSLError, LocalProtocolError)
    await write_batches(receive, sock.send_messages, gone, backlog)
