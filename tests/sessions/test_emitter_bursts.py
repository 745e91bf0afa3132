"""A turn that emits thousands of events without awaiting anything (a provider whose data is all
buffered) still lets the clients' writers run: the emitter yields every ``YIELD_EVERY`` (256) events
(``daemon.sessions.emitter``), so on a listening daemon a client that reads keeps a small backlog
and is never dropped by the burst. In process: the real emitter, ``RpcBridge`` and ``Connection``
with its byte-bounded backlog, and a writer that takes everything queued whenever it runs."""

import math
from types import SimpleNamespace

import anyio
import msgspec

from daemon.jsonrpc.backlog import Backlog
from daemon.jsonrpc.connection import Connection
from daemon.jsonrpc.framing import Outgoing, Written
from daemon.server.rpc_bridge import RpcBridge
from daemon.sessions.emitter import EventNumbers
from protocol import events as ev

BOUND = 256 * 1024
EVENTS = 5000  # ~170 bytes each encoded: over 3 times the bound


async def test_a_burst_that_never_awaits_lets_a_reading_client_keep_up(anyio_backend):
    bridge = RpcBridge(listening=True)
    send, receive = anyio.create_memory_object_stream[Outgoing](math.inf)
    backlog = Backlog(BOUND)
    dropped: list[str] = []
    peer = bridge.add_peer(Connection(send, backlog=backlog), "unix", dropped.append)
    bridge.follow(peer, "ses_1")
    seqs: list[int] = []

    async def reading_client() -> None:
        async for first in receive:
            batch = [first]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            data = [item for item in batch if not isinstance(item, Written)]
            seqs.extend(msgspec.json.decode(item)["params"]["seq"] for item in data)
            backlog.written(sum(map(len, data)))

    live = SimpleNamespace(row=SimpleNamespace(id="ses_1"), emit_lock=anyio.Lock())
    emit = EventNumbers(bridge).emitter(live, "turn_1")  # type: ignore[arg-type]
    most = 0
    async with send, receive, anyio.create_task_group() as tg:
        tg.start_soon(reading_client)
        for i in range(EVENTS):
            await emit(ev.TextDelta, {"message_id": "msg_1", "index": 0, "delta": f"word{i} "})
            most = max(most, backlog.queued_bytes)
        with anyio.fail_after(10):
            while len(seqs) < EVENTS and not dropped:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    # Without the emitter's yields the whole burst waits at once and the client is dropped.
    assert dropped == [], f"a client that reads is not dropped by the burst (at most {most} bytes waited)"
    assert seqs == list(range(1, EVENTS + 1))
    assert most < BOUND
