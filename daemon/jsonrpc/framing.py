"""NDJSON framing, independent of where the bytes come from: ``LineSplitter`` cuts a byte
stream into lines (``\\n`` only; a trailing ``\\r`` is dropped; U+2028 inside a string is just
a character; blank lines are skipped), and a line longer than the limit is discarded as it
streams past — never buffered whole — and reported as ``OVERLONG``.

Also the vocabulary of the outgoing stream, shared by the writers (``daemon.jsonrpc.stdio``,
``daemon.jsonrpc.streams``), the ``Connection`` and the client: messages, encoded whole or made
in ``Pieces`` while they are written (a long history's reply), and after a big one (a
``text_end`` or ``message_end`` can hold a whole reply) a ``Written`` mark, an ``anyio.Event``
the writer sets once everything queued before it is written and let go of, so the sender
encodes the next big message only then: one encoded copy of a reply in memory at a time, not two.
"""

import logging
from collections.abc import Iterable, Iterator
from typing import Any, Final

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream


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
MIN_PIECE = 64 * 1024  # a message in ``Pieces`` is written in pieces of at least this much (but its last)
log = logging.getLogger("ponder.rpc")


class Pieces:
    """One outgoing message made while it is written: the pieces of its encoding, each made when
    the writer is ready for it.

    Together the pieces are one JSON document (without the newline), so the client reads one
    line. A long history's reply goes out this way: the client reads its first pieces while the
    rest is still being encoded, instead of waiting until all of it is, and the whole of it is
    never in memory at once. Its size is not known before it is made: a ``Backlog`` counts each
    piece while it is being written. (A WebSocket writer makes it whole first: one message is one
    frame, and a frame's length goes before its payload.)

    Making a piece must not fail (what is encoded was built for the wire); if it does (a bug),
    the line is ended where it stands and ``failed`` (the request's error answer) follows as a
    line of its own: the client sees one line it cannot parse and then its answer.
    """

    __slots__ = ("_pieces", "failed")

    def __init__(self, pieces: Iterable[bytes], failed: bytes) -> None:
        self._pieces = pieces
        self.failed = failed

    def __iter__(self) -> Iterator[bytes]:
        """The pieces, those under ``MIN_PIECE`` joined to the next (a write each is not worth it)."""
        started = False
        pending: list[bytes] = []
        size = 0
        try:
            for piece in self._pieces:
                pending.append(piece)
                size += len(piece)
                if size >= MIN_PIECE:
                    started = True
                    yield pending[0] if len(pending) == 1 else b"".join(pending)
                    pending, size = [], 0
        except Exception:
            log.exception("could not encode the rest of a message already being written")
            yield b"\n" + self.failed if started else self.failed
            return
        if pending or not started:
            yield b"".join(pending)

    def joined(self) -> bytes:
        """All of it at once (where it cannot go out in pieces: inside a batch's answer)."""
        return b"".join(self)


PER_PIECE = 256  # elements of a long list encoded at a time: ~300 KB of a long history, under the 1 MiB pipe
_encoder = msgspec.json.Encoder()


class ResultInPieces:
    """A handler's result whose long lists are encoded a slice at a time while its answer is
    written (the ``Connection`` makes that answer ``Pieces``), the rest of it at once.

    ``lists`` gives, for each long list of ``value`` (by field name), its elements in consecutive
    slices (``in_slices`` cuts a list into slices of ``PER_PIECE``), taken and encoded one at a
    time as the answer is written; what ``value`` holds in those fields is not encoded. What the
    slices hold is encoded after the handler has returned, so it must not change meanwhile: give
    them values built for the wire (``session/resume`` gives the history's wire messages).
    """

    __slots__ = ("lists", "value")

    def __init__(self, value: msgspec.Struct, lists: dict[str, Iterable[list[Any]]]) -> None:
        self.value = value
        self.lists = lists

    def __iter__(self) -> Iterator[bytes]:
        # Each long list is encoded in its place as a mark that nothing else can produce (the
        # encoder escapes every control character inside strings): NUL, then the list's index.
        names = list(self.lists)
        marked = msgspec.structs.replace(
            self.value, **{name: msgspec.Raw(bytes([0, 1 + i])) for i, name in enumerate(names)}
        )
        head, *rest = _encoder.encode(marked).split(b"\0")
        del marked
        yield head
        # One buffer for every slice: encoding each into a fresh one would grow it from nothing
        # each time (a copy at every doubling: ~45 M instructions for a long history).
        buffer = bytearray()
        for segment in rest:
            yield from _list_in_pieces(self.lists[names[segment[0] - 1]], buffer)
            yield segment[1:]


def in_slices(values: list[Any]) -> Iterator[list[Any]]:
    """``values`` in consecutive slices of ``PER_PIECE`` (for ``ResultInPieces``)."""
    for start in range(0, len(values), PER_PIECE):
        yield values[start : start + PER_PIECE]


def _list_in_pieces(slices: Iterable[list[Any]], buffer: bytearray) -> Iterator[bytes]:
    """One JSON array from its consecutive slices: ``[a,b`` ``,c`` ... ``]``, each piece copied once
    out of ``buffer`` (the slice's own ``[``, or ``,`` in its place, and its items)."""
    opening = b"["
    for values in slices:
        if not values:
            continue
        _encoder.encode_into(values, buffer)  # [a,b,c]
        buffer[0] = opening[0]
        yield bytes(memoryview(buffer)[:-1])
        opening = b","
    yield b"[]" if opening == b"[" else b"]"


# What the outgoing stream carries: messages, and after a big one the mark its sender waits on.
Written = anyio.Event
Outgoing = bytes | Pieces | Written


def take_queued(
    first: Outgoing, receive: MemoryObjectReceiveStream[Outgoing]
) -> tuple[list[bytes | Pieces], list[Written]]:
    """``first`` and whatever else is queued behind it, for a writer to write together: the
    messages, and the ``Written`` marks to set once they are written (and let go of)."""
    batch = [first]
    while True:
        try:
            batch.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
    marks = [item for item in batch if isinstance(item, Written)]
    return [item for item in batch if not isinstance(item, Written)], marks


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
