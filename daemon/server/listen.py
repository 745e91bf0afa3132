"""``ponder serve --listen``: one daemon, many clients (PROTOCOL.md "Transports and several clients").

Each accepted connection gets its own ``Connection``, its own handlers (its ``initialize``, its
role) and a ``Peer`` in the shared ``RpcBridge``. A client that goes away cancels nothing but
its own requests in flight; the daemon stays up without clients until SIGTERM or SIGINT, then
shuts down as a stdio daemon does (running turns cancelled and persisted, the store closed).
stdin is not read.

The transports: ``unix`` (``daemon.server.unix_socket``: NDJSON over a 0600 socket) and
``websocket`` (``daemon.server.websocket``: one message per text frame, token first), both
imported only when listened on.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.config.settings import Config
from daemon.jsonrpc.connection import Connection
from daemon.jsonrpc.framing import Outgoing, _Overlong
from daemon.server.core import Daemon, open_daemon
from daemon.server.lifecycle import watch_signals
from daemon.server.routes import SharedHandlers, register_methods
from daemon.server.rpc_bridge import Peer, RpcBridge, TransportKind

log = logging.getLogger("ponder.server")

CLOSE_ANSWERED_S = 0.5  # a closing connection's answers in flight get this long to go out


@dataclass(eq=False)
class Drop:
    """How a transport learns that its client is dropped (it read too slowly), and why."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    reason: str | None = None

    def __call__(self, reason: str) -> None:
        self.reason = reason
        self.scope.cancel()


class Clients:
    """The connected clients of one listening daemon: serving each, closing all at shutdown."""

    def __init__(self, daemon: Daemon, bridge: RpcBridge) -> None:
        self.daemon = daemon
        self.bridge = bridge
        self.shared = SharedHandlers(daemon, bridge)
        self._open: set[tuple[Connection, anyio.CancelScope]] = set()

    async def serve(
        self,
        kind: TransportKind,
        incoming: MemoryObjectReceiveStream[bytes | _Overlong],
        outgoing: MemoryObjectSendStream[Outgoing],
        drop: Drop,
    ) -> None:
        """Serve one client's messages until it goes away, calls ``shutdown`` or is dropped."""
        connection = Connection(outgoing)
        peer = self.bridge.add_peer(connection, kind, drop)
        register_methods(self.daemon, self.bridge, peer, self.shared)
        log.info("connection %s (%s) opened", peer.connection_id, kind)
        entry = (connection, drop.scope)
        self._open.add(entry)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._close_on_shutdown, peer, tg)
                await connection.serve(incoming)
                tg.cancel_scope.cancel()
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


class Listener(Protocol):
    """A transport: binds (then says it started), and hands each accepted client to
    ``Clients.serve`` in a task of ``tg``, until cancelled."""

    async def __call__(self, clients: Clients, tg: TaskGroup, *, task_status: TaskStatus[None]) -> None: ...


async def serve_listening(config: Config, listen: Listener, *, on_ready: Callable[[], None] | None = None) -> None:
    """Run one daemon for many clients until SIGTERM or SIGINT."""
    bridge = RpcBridge(listening=True, approval_timeout_s=config.serve_approval_timeout_s)
    async with open_daemon(config, None, bridge) as daemon:
        clients = Clients(daemon, bridge)
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
