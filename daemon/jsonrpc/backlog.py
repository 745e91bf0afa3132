"""``Backlog``: what waits for one client, counted in bytes (the messages its connection queued
that its writer has not written yet), and the bound on it.

A listening daemon bounds each connection by this rather than by a count of messages: a
message is anything from a 100-byte delta to a long reply's ``message_end``, so a count bounds
neither memory nor the lag it allows (4,096 deltas are under 1 MB; 4,096 long replies could be
gigabytes). The queue itself is unbounded in count; ``Connection`` refuses (or waits) once the
backlog is at its bound, and the writer gives the bytes back once they are written.
"""

import anyio


class Backlog:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.queued_bytes = 0
        self.closed = False  # the writer is gone: nothing waits for room any more
        self._room: anyio.Event | None = None

    @property
    def full(self) -> bool:
        """At its bound (one message may take it past: a message bigger than the bound still goes)."""
        return self.queued_bytes >= self.limit_bytes and not self.closed

    def add(self, size: int) -> None:
        self.queued_bytes += size

    def written(self, size: int) -> None:
        """The writer is done with ``size`` bytes: those waiting for room may go on."""
        self.queued_bytes -= size
        if self._room is not None and self.queued_bytes < self.limit_bytes:
            self._room.set()
            self._room = None

    def close(self) -> None:
        self.closed = True
        if self._room is not None:
            self._room.set()
            self._room = None

    async def room(self) -> None:
        """Wait until the backlog is below its bound (or the writer is gone)."""
        while self.full:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
