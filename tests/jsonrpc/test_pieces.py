"""A message made in ``Pieces`` while it is written (a long ``session/resume`` answer): the pieces
are exactly the whole encoding, the ``Connection`` wraps them in the answer's envelope (whole inside
a batch), the writers write them in order between the other messages, a ``Backlog`` counts the
piece being written, and a piece that cannot be made ends the line and answers the request."""

import functools
import itertools
import os

import anyio
import anyio.lowlevel
import msgspec
import pytest

from daemon.jsonrpc.backlog import Backlog
from daemon.jsonrpc.connection import Connection
from daemon.jsonrpc.framing import MIN_PIECE, PER_PIECE, Outgoing, Pieces, ResultInPieces, Written, in_slices
from daemon.jsonrpc.stdio import _Drain, _pump_output
from daemon.jsonrpc.streams import write_batches

pytestmark = pytest.mark.anyio


class Row(msgspec.Struct):
    n: int
    text: str


class Answer(msgspec.Struct, kw_only=True):
    title: str
    rows: list[Row]
    others: list[Row]
    count: int = 0


# Text a splitter could trip on: quotes, backslashes, control characters (NUL is the mark the
# pieces are cut at, escaped inside strings), U+2028, a character outside the BMP, brackets.
AWKWARD = 'a "quoted" \\ back\x00slash \x01 \u2028 \U0001f600 ],[ {"kind":"message"}'


def _rows(count: int) -> list[Row]:
    return [Row(n=i, text=f"{i} {AWKWARD}") for i in range(count)]


def _long_rows(count: int) -> list[Row]:
    """Rows whose first ``PER_PIECE`` make more than ``MIN_PIECE``: that piece goes out on its own."""
    return [Row(n=i, text=f"{i} " + "x" * 300) for i in range(count)]


@pytest.mark.parametrize("count", [0, 1, PER_PIECE - 1, PER_PIECE, PER_PIECE + 1, 3 * PER_PIECE + 7])
def test_the_pieces_are_the_whole_encoding(count):
    answer = Answer(title=AWKWARD, rows=_rows(count), others=_rows(count // 2 + 1), count=count)
    pieces = list(ResultInPieces(answer, {"rows": in_slices(answer.rows), "others": in_slices(answer.others)}))
    assert b"".join(pieces) == msgspec.json.encode(answer)
    # A piece per PER_PIECE rows of each list and its closing bracket (an empty list is one
    # piece), and the text around them.
    per_list = [-(-n // PER_PIECE) + 1 if n else 1 for n in (count, count // 2 + 1)]
    assert len(pieces) == 1 + per_list[0] + 1 + per_list[1] + 1
    # Each piece is whole UTF-8 (a WebSocket sends each as a frame of one text message).
    for piece in pieces:
        piece.decode("utf-8")


def test_only_the_named_lists_go_in_pieces_from_their_slices_in_the_structs_order():
    answer = Answer(title="t", rows=_rows(PER_PIECE + 1), others=_rows(2))
    pieces = list(ResultInPieces(answer, {"others": in_slices(answer.others)}))  # rows at once with the rest
    assert b"".join(pieces) == msgspec.json.encode(answer)
    assert len(pieces) == 4  # the text before ``others``, its one slice, its ``]``, the text after
    # The named lists are encoded from the slices given, not from what ``value`` holds there.
    given = [Row(n=-1, text="given")]
    assert b"".join(ResultInPieces(answer, {"others": in_slices(given)})) == msgspec.json.encode(
        msgspec.structs.replace(answer, others=given)
    )
    reversed_names = list(ResultInPieces(answer, {"others": in_slices(answer.others), "rows": in_slices(answer.rows)}))
    assert b"".join(reversed_names) == msgspec.json.encode(answer)


@pytest.fixture
def outgoing():
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    with send, receive:
        yield send, receive


async def _answers(connection: Connection, line: bytes, receive) -> list[Outgoing]:
    async with anyio.create_task_group() as tg:
        incoming_send, incoming_receive = anyio.create_memory_object_stream[bytes](1)
        tg.start_soon(connection.serve, incoming_receive)
        async with incoming_send:
            await incoming_send.send(line)
    out = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except anyio.WouldBlock:
            return out


async def test_the_connection_answers_in_pieces_with_the_envelope_and_a_written_mark(outgoing):
    send, receive = outgoing
    connection = Connection(send)
    answer = Answer(title=AWKWARD, rows=_rows(PER_PIECE * 2 + 1), others=[])

    async def handler(params: object) -> ResultInPieces:
        return ResultInPieces(answer, {"rows": in_slices(answer.rows), "others": in_slices(answer.others)})

    connection.register("long", dict, handler)
    reply, mark = await _answers(connection, b'{"jsonrpc":"2.0","id":"r-\\u0000","method":"long"}', receive)
    assert isinstance(reply, Pieces) and isinstance(mark, Written)
    whole = msgspec.json.encode({"jsonrpc": "2.0", "id": "r-\x00", "result": answer})
    assert reply.joined() == whole
    assert msgspec.json.decode(whole)["result"]["rows"][-1]["n"] == PER_PIECE * 2


async def test_inside_a_batch_an_answer_in_pieces_is_made_whole(outgoing):
    send, receive = outgoing
    connection = Connection(send)
    answer = Answer(title="t", rows=_rows(PER_PIECE + 3), others=_rows(1))

    async def handler(params: object) -> ResultInPieces:
        return ResultInPieces(answer, {"rows": in_slices(answer.rows)})

    connection.register("long", dict, handler)
    connection.register("short", dict, lambda params: _async({"ok": True}))
    batch = b'[{"jsonrpc":"2.0","id":1,"method":"long"},{"jsonrpc":"2.0","id":2,"method":"short"}]'
    [reply] = await _answers(connection, batch, receive)
    assert isinstance(reply, bytes)
    assert msgspec.json.decode(reply) == [
        {"jsonrpc": "2.0", "id": 1, "result": msgspec.to_builtins(answer)},
        {"jsonrpc": "2.0", "id": 2, "result": {"ok": True}},
    ]


async def _async(value):
    return value


class Unencodable:
    """Nothing msgspec can encode: making the piece that holds it fails."""


async def test_a_piece_that_cannot_be_made_ends_the_line_and_the_request_gets_an_error(outgoing, caplog):
    send, receive = outgoing
    connection = Connection(send)
    rows: list = _long_rows(PER_PIECE + 1)
    rows.append(Unencodable())  # in the second piece: the first is already on its way

    async def handler(params: object) -> ResultInPieces:
        return ResultInPieces(Answer(title="t", rows=rows, others=[]), {"rows": in_slices(rows)})

    connection.register("long", dict, handler)
    reply, _ = await _answers(connection, b'{"jsonrpc":"2.0","id":9,"method":"long"}', receive)
    assert isinstance(reply, Pieces)
    broken, error = reply.joined().split(b"\n")
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(broken)
    assert broken.startswith(b'{"jsonrpc":"2.0","id":9,"result":{"title":"t","rows":[{"n":0')
    assert msgspec.json.decode(error) == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32603, "message": "Internal error in the daemon; details are in its log.", "data": {}},
    }
    assert "could not encode the rest of a message" in caplog.text

    # Failing before anything went out, the answer is the error alone.
    rows[:] = [Unencodable()]
    first, _ = await _answers(connection, b'{"jsonrpc":"2.0","id":10,"method":"long"}', receive)
    assert msgspec.json.decode(first.joined())["error"]["code"] == -32603


def _counted(pieces: list[bytes], made: list[int]):
    for piece in pieces:
        made.append(len(piece))
        yield piece


class RecordingSink:
    """Writes that record what they are given and what the backlog counted meanwhile."""

    def __init__(self, backlog: Backlog, gone_after: int | None = None) -> None:
        self.backlog = backlog
        self.gone_after = gone_after
        self.sent: list[tuple[str, object, int]] = []

    async def send_messages(self, messages: list[bytes]) -> None:
        self.sent.append(("messages", list(messages), self.backlog.queued_bytes))

    async def send_piece(self, piece: bytes, last: bool) -> None:
        if self.gone_after is not None and len(self.sent) >= self.gone_after:
            raise anyio.BrokenResourceError
        await anyio.lowlevel.checkpoint()  # a write that waits: the loop goes round meanwhile
        self.sent.append(("piece", (piece, last), self.backlog.queued_bytes))


async def test_the_stream_writer_writes_pieces_in_order_counting_the_one_being_written():
    backlog = Backlog(1 << 20)
    made: list[int] = []
    one, two = b'{"a":[' + b"1," * MIN_PIECE + b"1", b"," + b"2," * MIN_PIECE + b"2"
    pieces = [one, two, b",3", b"]}"]  # the last two go as one: less than MIN_PIECE each
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    sink = RecordingSink(backlog)
    for item in (b"before", Pieces(_counted(pieces, made), failed=b"x"), b"after", b"too"):
        send.send_nowait(item)
        backlog.add(len(item) if isinstance(item, bytes) else 0)  # as Connection counts them
    mark = Written()
    send.send_nowait(mark)
    send.close()
    await write_batches(receive, sink.send_messages, (anyio.BrokenResourceError,), backlog, sink.send_piece)
    assert sink.sent == [
        ("messages", [b"before"], len(b"beforeaftertoo")),
        ("piece", (one, False), len(b"aftertoo") + len(one)),
        ("piece", (two, False), len(b"aftertoo") + len(two)),
        ("piece", (b",3]}", True), len(b"aftertoo") + 4),
        ("messages", [b"after", b"too"], len(b"aftertoo")),
    ]
    assert backlog.queued_bytes == 0 and mark.is_set()


async def test_a_client_gone_midway_stops_the_pieces_being_made_and_gives_every_byte_back():
    backlog = Backlog(1 << 20)
    made: list[int] = []
    pieces = [b"[" + b"1" * MIN_PIECE] + [b",2" * MIN_PIECE] * 20 + [b"]"]
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    sink = RecordingSink(backlog, gone_after=3)
    send.send_nowait(Pieces(_counted(pieces, made), failed=b"x"))
    mark = Written()
    send.send_nowait(mark)
    send.send_nowait(b"later")
    backlog.add(len(b"later"))
    send.close()
    await write_batches(receive, sink.send_messages, (anyio.BrokenResourceError,), backlog, sink.send_piece)
    assert [kind for kind, _, _ in sink.sent] == ["piece"] * 3, "nothing is written once the client is gone"
    # Made: the three written, the one that found the client gone and the one made ahead of it.
    assert len(made) == 5, "the pieces after those are never made"
    assert backlog.queued_bytes == 0 and mark.is_set()


async def test_a_writer_without_piece_writes_makes_the_message_whole_counting_it_while_it_is_written():
    backlog = Backlog(1 << 20)
    one, two = b'{"a":[' + b"1," * MIN_PIECE + b"1", b"]}"
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    sink = RecordingSink(backlog)
    send.send_nowait(b"before")
    send.send_nowait(Pieces(iter([one, two]), failed=b"x"))
    send.send_nowait(b"after")
    backlog.add(len(b"beforeafter"))
    send.close()
    await write_batches(receive, sink.send_messages, (anyio.BrokenResourceError,), backlog)  # (a WebSocket's)
    assert sink.sent == [
        ("messages", [b"before"], len(b"beforeafter")),
        ("messages", [one + two], len(b"after") + len(one + two)),
        ("messages", [b"after"], len(b"after")),
    ]
    assert backlog.queued_bytes == 0


async def test_stdout_gets_the_pieces_as_one_line_between_the_other_messages(anyio_backend):
    read_end, write_end = os.pipe()
    answer = Answer(title=AWKWARD, rows=_rows(3 * PER_PIECE), others=_rows(5))
    broken_rows: list = [*_long_rows(PER_PIECE), Unencodable()]

    def broken() -> ResultInPieces:
        return ResultInPieces(Answer(title="b", rows=[], others=[]), {"rows": in_slices(broken_rows)})

    # What went out of the broken one before the piece that fails: its text and first piece.
    started = b"".join(itertools.islice(broken(), 2))
    lines = [b'{"n":1}', msgspec.json.encode(answer), b'{"n":2}', started, b'{"failed":2}', b'{"n":3}']
    expected = b"\n".join(lines) + b"\n"
    received = bytearray()

    def read_all() -> None:
        while len(received) < len(expected):
            chunk = os.read(read_end, 1 << 12)  # a slow reader: 4 KiB at a time
            if not chunk:
                return
            received.extend(chunk)

    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump_output, write_end, receive, _Drain())
            tg.start_soon(functools.partial(anyio.to_thread.run_sync, read_all, abandon_on_cancel=True))
            async with send:
                await send.send(b'{"n":1}')
                await send.send(
                    Pieces(
                        ResultInPieces(answer, {"rows": in_slices(answer.rows), "others": in_slices(answer.others)}),
                        failed=b'{"failed":1}',
                    )
                )
                await send.send(b'{"n":2}')
                await send.send(Pieces(broken(), failed=b'{"failed":2}'))
                await send.send(b'{"n":3}')
    finally:
        os.close(write_end)
        os.close(read_end)
    assert bytes(received) == expected
