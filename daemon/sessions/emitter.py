"""Event numbering: every ``agent/event`` of a session gets the next ``seq`` (per session, no
gaps, wire order equal to seq order), delivered through the ``ClientBridge``; a long burst of
events yields to the loop now and then, so the clients' writers run while a turn streams."""

from typing import Any, cast

from anyio.lowlevel import cancel_shielded_checkpoint

from daemon import agent
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.live import LiveSession
from protocol import events as ev

# Events delivered without awaiting before the emitter yields to the loop once (so the writers of
# a listening daemon's connections drain their queues during a burst; ~0.1 µs an event).
YIELD_EVERY = 256


class EventNumbers:
    """The per-session event counters, and the ``emit`` a turn (or a dropped turn's bracket) uses."""

    def __init__(self, bridge: ClientBridge) -> None:
        self.bridge = bridge
        self._seq: dict[str, int] = {}

    async def queue_update(self, live: LiveSession) -> None:
        """Tell the client the session's waiting input changed (``queue_update``, in no turn)."""
        queue = live.queue()
        await self.emitter(live, None)(ev.QueueUpdate, {"steers": queue.steers, "queued": queue.queued})

    def emitter(self, live: LiveSession, turn_id: str | None) -> agent.Emit:
        """``emit`` for the events of turn ``turn_id`` (None: events of no turn, as ``queue_update``)."""
        session_id = live.row.id
        deliver = self.bridge.emit
        deliver_nowait = self.bridge.emit_nowait
        lock = live.emit_lock
        event_seq = self._seq
        # Only ``queue_update`` is emitted with no turn (its ``turn_id`` field is nullable).
        turn = cast(str, turn_id)
        burst = 0  # events delivered without yielding to the loop since it last ran others

        async def emit(kind: type[ev.BaseEvent], fields: dict[str, Any]) -> None:
            # The lock keeps seq order equal to wire order when tools emit concurrently.
            # Fast path (the common case): nobody else is emitting and the outgoing queue
            # has room, so the event is numbered and queued without yielding to the loop,
            # and no other task can run in between: the lock need not be taken. When the
            # queue is full it is taken (free: nothing ran since it was seen free) while
            # waiting. An event that was not delivered (cancelled while the client was not
            # reading, or unencodable) gives its seq back, so the client never sees a gap.
            nonlocal burst
            if not lock.locked():
                seq = event_seq[session_id] = event_seq.get(session_id, 0) + 1
                try:
                    event = kind(session_id=session_id, turn_id=turn, seq=seq, **fields)
                    delivered = deliver_nowait(event)
                except BaseException:
                    event_seq[session_id] = seq - 1
                    raise
                if delivered:
                    burst += 1
                    if burst >= YIELD_EVERY:
                        # A producer that never awaits (a provider whose data is all buffered)
                        # would keep the connections' writers from running: the events would
                        # pile up in their queues. Let them run; this event is out already, so
                        # nothing is cancelled here (the next emit that waits sees a cancel).
                        burst = 0
                        await cancel_shielded_checkpoint()
                    return
                lock.acquire_nowait()
                burst = 0
                try:
                    await deliver(event)  # queue full: wait, holding the lock
                except BaseException:
                    event_seq[session_id] = seq - 1
                    raise
                finally:
                    lock.release()
                return
            async with lock:
                seq = event_seq[session_id] = event_seq.get(session_id, 0) + 1
                try:
                    await deliver(kind(session_id=session_id, turn_id=turn, seq=seq, **fields))
                except BaseException:
                    event_seq[session_id] = seq - 1
                    raise

        return emit
