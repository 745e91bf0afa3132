"""The ring of a session's recent events (``session/subscribe {after_seq}``): what a client that
reconnects missed, held encoded, as they went on the wire.

Bounded twice: at most ``RING_EVENTS`` events (PROTOCOL.md: the last 10,000) and ``RING_BYTES``
of them. An event bigger than ``RING_EVENT_MAX_BYTES`` (a ``message_end`` holding a whole long
reply) is not kept: the ring starts over after it, so a catch-up across it says
``snapshot_required`` (``session/resume`` has the message) instead of holding a second copy of
every big reply in memory.
"""

from collections import deque
from typing import Literal

RING_EVENTS = 10_000
RING_BYTES = 16 * 1024 * 1024
RING_EVENT_MAX_BYTES = 1024 * 1024

Catchup = Literal["events", "snapshot_required", "none"]


class EventRing:
    """One session's recent events as ``(seq, encoded notification)``, oldest first."""

    def __init__(self, max_events: int = RING_EVENTS, max_bytes: int = RING_BYTES) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._events: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        # Every event with a seq above ``floor`` is held (or still to come); 0: nothing lost yet.
        self.floor = 0
        self.last_seq = 0

    def append(self, seq: int, data: bytes) -> None:
        if self.last_seq == 0 and not self._events and seq > 1:
            # A ring made after the session's first events (the daemon let an idle session's ring
            # go, or loaded the session mid-way): what came before was never held here.
            self.floor = max(self.floor, seq - 1)
        self.last_seq = seq
        if len(data) > RING_EVENT_MAX_BYTES:
            self._events.clear()
            self._bytes = 0
            self.floor = seq
            return
        self._events.append((seq, data))
        self._bytes += len(data)
        while len(self._events) > self.max_events or self._bytes > self.max_bytes:
            old_seq, old = self._events.popleft()
            self._bytes -= len(old)
            self.floor = old_seq

    def catchup(self, after_seq: int | None) -> Catchup:
        """What a subscriber that has seen every event up to ``after_seq`` gets."""
        if after_seq is None or after_seq >= self.last_seq:
            return "none"
        if after_seq < self.floor:
            return "snapshot_required"
        return "events"

    def since(self, after_seq: int) -> list[bytes]:
        """The held events with ``seq > after_seq``, in order."""
        return [data for seq, data in self._events if seq > after_seq]

    def since_pairs(self, after_seq: int) -> list[tuple[int, bytes]]:
        """The held ``(seq, event)`` with ``seq > after_seq``, in order."""
        return [(seq, data) for seq, data in self._events if seq > after_seq]

    def since_until(self, after_seq: int, last_seq: int) -> list[bytes]:
        """The held events with ``after_seq < seq <= last_seq``, in order."""
        return [data for seq, data in self._events if after_seq < seq <= last_seq]

    @property
    def size_bytes(self) -> int:
        """The encoded events held (the deque's own overhead aside)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._events)
