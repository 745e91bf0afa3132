"""NDJSON framing, independent of where the bytes come from: ``LineSplitter`` cuts a byte
stream into lines (``\\n`` only; a trailing ``\\r`` is dropped; U+2028 inside a string is just
a character; blank lines are skipped), and a line longer than the limit is discarded as it
streams past — never buffered whole — and reported as ``OVERLONG``.

Also the vocabulary of the outgoing stream, shared by the writer (``daemon.jsonrpc.stdio``),
the ``Connection`` and the client: messages, and after a big one (a ``text_end`` or
``message_end`` can hold a whole reply) a ``Written`` mark, an ``anyio.Event`` the writer sets
once everything queued before it is written and let go of, so the sender encodes the next big
message only then: one encoded copy of a reply in memory at a time, not two.
"""

from typing import Final

import anyio


class _Overlong:
    """Marks an incoming message that was not read: a line that exceeded the limit and was
    discarded (``OVERLONG``), or a WebSocket frame of a kind no message comes in
    (``BINARY_FRAME``). It is answered ``-32600`` with ``reason`` and the connection goes on."""

    def __init__(self, name: str, reason: str, message: str) -> None:
        self.name = name
        self.reason = reason
        self.message = message

    def __repr__(self) -> str:
        return self.name


OVERLONG: Final = _Overlong("OVERLONG", "line_too_long", "Line too long; it was discarded.")
BINARY_FRAME: Final = _Overlong(
    "BINARY_FRAME", "binary_frame", "Binary frames are not read: send each JSON-RPC message as one text frame."
)
DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
BIG_MESSAGE = 1024 * 1024  # written without joining it to its newline (a copy of it), then waited for
# What the outgoing stream carries: messages, and after a big one the mark its sender waits on.
Written = anyio.Event
Outgoing = bytes | Written


class LineSplitter:
    """Incremental NDJSON splitter with bounded memory."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._discarding = False

    def feed(self, chunk: bytes) -> list[bytes | _Overlong]:
        out: list[bytes | _Overlong] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                break
            piece = chunk[start:newline]
            start = newline + 1
            if self._discarding:
                self._discarding = False
                self._buffer.clear()
                out.append(OVERLONG)
                continue
            if len(self._buffer) + len(piece) > self.max_line_bytes:
                self._buffer.clear()
                out.append(OVERLONG)
                continue
            if self._buffer:
                self._buffer += piece
                line = bytes(self._buffer)
                self._buffer.clear()
            else:
                line = piece
            self._emit(line, out)
        rest = chunk[start:]
        if rest and not self._discarding:
            if len(self._buffer) + len(rest) > self.max_line_bytes:
                self._buffer.clear()
                self._discarding = True
            else:
                self._buffer += rest
        return out

    def finish(self) -> list[bytes | _Overlong]:
        """End of input: a final line without a newline still counts."""
        out: list[bytes | _Overlong] = []
        if self._discarding:
            out.append(OVERLONG)
        elif self._buffer:
            self._emit(bytes(self._buffer), out)
        self._buffer.clear()
        self._discarding = False
        return out

    @staticmethod
    def _emit(line: bytes, out: list[bytes | _Overlong]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.strip():
            out.append(line)
