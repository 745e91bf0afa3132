"""ACP on a listening daemon: one connection (``ponder acp --attach`` relays an editor to it) served
in ACP on the daemon's shared core, beside the ponder-dialect clients (PROTOCOL.md "Transports and
several clients", "ACP mode in an editor").

The ACP adapter is the one ``ponder acp`` runs (``AcpServer`` and its own ``AcpBridge``); what
differs is where the events come from. The daemon's ``ClientBridge`` is the shared ``RpcBridge``:
this connection is a ``Peer`` of it that follows the sessions it opens or prompts, and the events
of those sessions are queued to it unencoded (bounded: a client that stops reading is dropped,
as a ponder client is) and translated here, in the connection's own task, into ``session/update``.
Permission requests reach it through its ``AcpBridge`` (``session/request_permission``) and race
the other controllers' answers; the first wins, and the others' questions are withdrawn.

Unlike ``ponder acp`` on stdio: the file tools use the disk (not the editor's ``fs``), a client
that leaves (or is dropped) cancels nothing (its open prompts' turns go on), and ``session/close``
cancels only this client's prompts, not a turn another client started.
"""

import logging
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.acp.bridge import AcpBridge
from daemon.acp.server import AcpServer, _cancel_prompts_after
from daemon.jsonrpc.connection import Connection
from daemon.jsonrpc.framing import Outgoing, _Overlong
from daemon.server.listen import Clients, Drop, FirstAgain, Incoming
from daemon.server.rpc_bridge import TransportKind
from protocol.objects import Session

log = logging.getLogger("ponder.acp")

EVENT_QUEUE = 4096  # events waiting for their translation before the client counts as not reading


async def serve_attached_acp(
    clients: Clients,
    kind: TransportKind,
    incoming: FirstAgain | Incoming,
    outgoing: MemoryObjectSendStream[Outgoing],
    drop: Drop,
) -> None:
    """Serve one ACP connection on the listening daemon until it goes away or is dropped."""
    daemon, shared = clients.daemon, clients.bridge
    connection = Connection(
        outgoing, cancel_method="$/cancel_request", cancel_id_field="requestId", backlog=drop.backlog
    )
    bridge = AcpBridge(connection)
    bridge.attached = True
    bridge.attach(daemon.sessions)
    relay_send, relay_receive = anyio.create_memory_object_stream[object](EVENT_QUEUE)

    def dropped(reason: str) -> None:
        bridge.detached = True  # its prompts are cancelled with the connection: their turns go on
        drop(reason)

    peer = shared.add_peer(connection, kind, dropped, dialect=bridge, relay=relay_send)
    bridge.following = lambda session_id: shared.follow_in_dialect(peer, session_id)
    bridge.unfollowing = lambda session_id: shared.unfollow_in_dialect(peer, session_id)
    server = AcpServer(daemon, bridge)
    server.register()
    with clients.tracked(connection, peer, drop):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_translate, bridge, relay_receive)
            tg.start_soon(_cancel_prompts_after, daemon.shutdown_requested, server)
            await connection.serve(_Detaching(incoming, bridge))
            tg.cancel_scope.cancel()


class _Detaching:
    """The incoming messages; at their end (the client left) the bridge is marked ``detached``
    before the connection cancels the requests still in flight."""

    def __init__(self, incoming: FirstAgain | Incoming, bridge: AcpBridge) -> None:
        self._incoming = incoming
        self._bridge = bridge

    async def __aenter__(self) -> "_Detaching":
        await self._incoming.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._incoming.__aexit__(*exc_info)

    def __aiter__(self) -> "_Detaching":
        return self

    async def __anext__(self) -> bytes | _Overlong:
        try:
            return await self._incoming.__anext__()
        except StopAsyncIteration:
            self._bridge.detached = True
            raise

    def receive_nowait(self) -> bytes | _Overlong:
        return self._incoming.receive_nowait()  # its end is seen (and marked) by the next ``__anext__``


async def _translate(bridge: AcpBridge, receive: MemoryObjectReceiveStream[object]) -> None:
    """The queued events (and changed sessions), in order, as this client's ACP updates: all those
    queued at once before it looks again (each look yields to the loop, and a turn streaming a
    burst yields only every few hundred events)."""
    async with receive:
        async for first in receive:
            item = first
            while True:
                if isinstance(item, Session):
                    await bridge.session_updated(item)
                else:
                    await bridge.emit(item)  # type: ignore[arg-type]  # an agent event
                try:
                    item = receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
