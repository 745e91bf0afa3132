"""``ponder serve --listen``: one daemon, many clients (PROTOCOL.md "Transports and several clients").

Each accepted connection gets its own ``Connection``, its own handlers (its ``initialize``, its
role) and a ``Peer`` in the shared ``RpcBridge``. A client that goes away cancels nothing but
its own requests in flight; the daemon stays up without clients until SIGTERM or SIGINT, then
shuts down as a stdio daemon does (running turns cancelled and persisted, the store closed).
stdin is not read.

A connection speaks the ponder protocol unless its first message chooses another dialect
(``daemon.jsonrpc.dialect``: ``ponder acp --attach`` chooses ``acp``); a dialect the daemon was
given (``serve_listening(dialects=...)``, from above: ``daemon.acp.attached``) then serves it on the
same core and the same ``RpcBridge``.

The transports: ``unix`` (``daemon.server.unix_socket``: NDJSON over a 0600 socket) and
``websocket`` (``daemon.server.websocket``: one message per text frame, token first), both
imported only when listened on.
"""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.config.settings import Config
from daemon.errors import InvalidRequest
from daemon.jsonrpc.backlog import Backlog
from daemon.jsonrpc.connection import Connection, encode_error
from daemon.jsonrpc.dialect import chosen_dialect
from daemon.jsonrpc.framing import Outgoing, _Overlong
from daemon.server.core import Daemon, open_daemon
from daemon.server.lifecycle import watch_signals
from daemon.server.routes import SharedHandlers, register_methods
from daemon.server.rpc_bridge import Peer, RpcBridge, TransportKind

log = logging.getLogger("ponder.server")

CLOSE_ANSWERED_S = 0.5  # a closing connection's answers in flight get this long to go out


@dataclass(eq=False)
class Drop:
    """What waits for a client (``backlog``: bounded in bytes, ``[serve] client_queue_bytes``);
    how its transport learns that it is dropped (it read too slowly), and why."""

    backlog: Backlog
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    reason: str | None = None

    def __call__(self, reason: str) -> None:
        self.reason = reason
        self.scope.cancel()


Incoming = MemoryObjectReceiveStream[bytes | _Overlong]


class DialectServer(Protocol):
    """Serves one connection in another dialect (its ``Connection``, its ``Peer`` in
    ``clients.bridge``, ``clients.tracked``) until it goes away or is dropped."""

    async def __call__(
        self,
        clients: "Clients",
        kind: TransportKind,
        incoming: "FirstAgain | Incoming",
        outgoing: MemoryObjectSendStream[Outgoing],
        drop: Drop,
    ) -> None: ...


class Clients:
    """The connected clients of one listening daemon: serving each, closing all at shutdown."""

    def __init__(self, daemon: Daemon, bridge: RpcBridge, dialects: dict[str, DialectServer] | None = None) -> None:
        self.daemon = daemon
        self.bridge = bridge
        self.shared = SharedHandlers(daemon, bridge)
        self.dialects = dialects or {}
        self._open: set[tuple[Connection, anyio.CancelScope]] = set()

    def new_drop(self) -> Drop:
        """A new connection's ``Drop``, its backlog bounded as configured."""
        return Drop(Backlog(self.daemon.config.serve_client_queue_bytes))

    async def serve(
        self,
        kind: TransportKind,
        incoming: Incoming,
        outgoing: MemoryObjectSendStream[Outgoing],
        drop: Drop,
    ) -> None:
        """Serve one client's messages until it goes away, calls ``shutdown`` or is dropped."""
        try:
            first = await incoming.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return  # gone before saying anything
        dialect = chosen_dialect(first) if isinstance(first, bytes) else None
        if dialect is None:
            await self._serve_ponder(kind, FirstAgain(first, incoming), outgoing, drop)
        elif dialect == "ponder":
            await self._serve_ponder(kind, incoming, outgoing, drop)
        elif dialect in self.dialects:
            await self.dialects[dialect](self, kind, incoming, outgoing, drop)
        else:
            refusal = InvalidRequest(
                f"This daemon speaks {', '.join(['ponder', *self.dialects])}, not {dialect!r}.",
                reason="unknown_dialect",
            )
            with anyio.move_on_after(CLOSE_ANSWERED_S):
                await outgoing.send(encode_error(None, refusal))
            await incoming.aclose()

    async def _serve_ponder(
        self,
        kind: TransportKind,
        incoming: "FirstAgain | Incoming",
        outgoing: MemoryObjectSendStream[Outgoing],
        drop: Drop,
    ) -> None:
        connection = Connection(outgoing, backlog=drop.backlog)
        peer = self.bridge.add_peer(connection, kind, drop)
        register_methods(self.daemon, self.bridge, peer, self.shared)
        with self.tracked(connection, peer, drop):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._close_on_shutdown, peer, tg)
                await connection.serve(incoming)
                tg.cancel_scope.cancel()

    @contextmanager
    def tracked(self, connection: Connection, peer: Peer, drop: Drop) -> Iterator[None]:
        """One connection served: closed at shutdown; its peer removed when it ends."""
        log.info("connection %s (%s) opened", peer.connection_id, peer.kind)
        entry = (connection, drop.scope)
        self._open.add(entry)
        try:
            yield
        finally:
            self._open.discard(entry)
            self.bridge.remove_peer(peer)
            log.info("connection %s closed%s", peer.connection_id, f": {drop.reason}" if drop.reason else "")

    async def _close_on_shutdown(self, peer: Peer, tg: TaskGroup) -> None:
        """``shutdown`` from this client closes this connection only, once its answer is out."""
        await peer.close_requested.wait()
        peer.connection.shutting_down = True
        await peer.connection.wait_answered(CLOSE_ANSWERED_S)
        tg.cancel_scope.cancel()

    async def close_all(self) -> None:
        """Shutdown: new requests are refused, those in flight get a moment, then every connection closes."""
        for connection, _scope in self._open:
            connection.shutting_down = True
        with anyio.move_on_after(CLOSE_ANSWERED_S):
            for connection, _scope in list(self._open):
                await connection.wait_answered(CLOSE_ANSWERED_S)
        for _connection, scope in list(self._open):
            scope.cancel()


class FirstAgain:
    """The incoming messages with the first one (read to see the dialect) put back in front."""

    def __init__(self, first: bytes | _Overlong, rest: Incoming) -> None:
        self._first: list[bytes | _Overlong] = [first]
        self._rest = rest

    async def __aenter__(self) -> "FirstAgain":
        await self._rest.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._rest.__aexit__(*exc_info)

    def __aiter__(self) -> "FirstAgain":
        return self

    async def __anext__(self) -> bytes | _Overlong:
        if self._first:
            return self._first.pop()
        return await self._rest.__anext__()

    def receive_nowait(self) -> bytes | _Overlong:
        if self._first:
            return self._first.pop()
        return self._rest.receive_nowait()


class Listener(Protocol):
    """A transport: binds (then says it started), and hands each accepted client to
    ``Clients.serve`` in a task of ``tg``, until cancelled."""

    async def __call__(self, clients: Clients, tg: TaskGroup, *, task_status: TaskStatus[None]) -> None: ...


async def serve_listening(
    config: Config,
    listen: Listener,
    *,
    on_ready: Callable[[], None] | None = None,
    dialects: dict[str, DialectServer] | None = None,
) -> None:
    """Run one daemon for many clients until SIGTERM or SIGINT; ``dialects``: those served
    besides the ponder protocol (by name, as a connection's first message chooses them)."""
    bridge = RpcBridge(listening=True, approval_timeout_s=config.serve_approval_timeout_s)
    async with open_daemon(config, None, bridge) as daemon:
        clients = Clients(daemon, bridge, dialects)
        listening = anyio.CancelScope()

        async def listen_until_cancelled(*, task_status: TaskStatus[None]) -> None:
            with listening:
                async with anyio.create_task_group() as clients_tg:
                    await listen(clients, clients_tg, task_status=task_status)

        async with anyio.create_task_group() as tg:
            daemon.attach(tg)  # the parts (session manager, MCP) run here once built
            tg.start_soon(watch_signals, daemon.shutdown_requested)
            await tg.start(listen_until_cancelled)
            if on_ready is not None:
                on_ready()
            await daemon.shutdown_requested.wait()
            daemon.closing = True
            log.info("shutting down")
            await clients.close_all()
            listening.cancel()
            await daemon.close_parts()
            tg.cancel_scope.cancel()
