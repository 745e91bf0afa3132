"""``session/resume``'s history in slices: ``messages`` and ``items`` are exactly what encoding them
whole gives, with and without compaction records, whichever is taken first; the items are made a
slice at a time as they are taken. (The whole answer through a real daemon: ``test_resume_in_pieces``.)"""

import msgspec
import pytest

from daemon.context.history import history_items
from daemon.jsonrpc.framing import PER_PIECE, ResultInPieces
from daemon.server import history_pieces
from daemon.server.history_pieces import history_in_slices
from protocol.objects import Compaction, HistoryItem, Message, TextBlock, ToolCallBlock, Usage

AWKWARD = 'a "quote" \\ \x00 \u2028 \U0001f600 {"message_id":"escaped here"} ],"items":['


class History(msgspec.Struct):
    """The history's part of a resume answer, in the same order, between other fields."""

    before: str
    messages: list[Message]
    items: list[HistoryItem]
    after: int


def _messages(count: int, nested_every: int = 0) -> list[Message]:
    out = []
    for seq in range(1, count + 1):
        content: list = [TextBlock(text=f"{seq} {AWKWARD}")]
        if nested_every and seq % nested_every == 0:  # the text a message starts with, unescaped, inside it
            content.append(ToolCallBlock(call_id=f"c{seq}", name="t", arguments={"message_id": f"nested {seq}"}))
        assistant = not seq % 2
        out.append(
            Message(
                message_id=f"msg_{seq}",
                session_id="ses",
                seq=seq,
                role="assistant" if assistant else "user",
                content=content,
                thinking="hm" if assistant else None,
                model_id="mock/echo" if assistant else None,
                thinking_level=None,
                stop_reason="end_turn" if assistant else None,
                usage=Usage(input_tokens=seq, output_tokens=1) if assistant else None,
                status="complete",
                created_at="2026-11-27T00:00:00Z",
                origin=None if assistant else "prompt",
            )
        )
    return out


def _compaction(seq: int) -> Compaction:
    return Compaction(
        compaction_id=f"cmp_{seq}",
        seq=seq,
        trigger="threshold",
        summary=f"summary {AWKWARD}",
        first_kept_seq=seq,
        tokens_before=1000,
        tokens_after=100,
        model_id="mock/echo",
        created_at="2026-11-27T00:00:00Z",
    )


def _in_slices(messages: list[Message], compactions: list[Compaction], items_first: bool = False) -> bytes:
    message_slices, item_slices = history_in_slices(messages, compactions)
    if items_first:  # taken out of the answer's order: still right
        item_slices = list(item_slices)
    value = History(before=AWKWARD, messages=[], items=[], after=7)
    return b"".join(ResultInPieces(value, {"messages": message_slices, "items": item_slices}))


def _whole(messages: list[Message], compactions: list[Compaction]) -> bytes:
    return msgspec.json.encode(
        History(before=AWKWARD, messages=messages, items=history_items(messages, compactions), after=7)
    )


@pytest.mark.parametrize("count", [0, 1, PER_PIECE, PER_PIECE + 1, 2 * PER_PIECE + 5])
@pytest.mark.parametrize("nested_every", [0, 97])
def test_messages_and_items_are_the_whole_encoding(count, nested_every):
    messages = _messages(count, nested_every)
    assert _in_slices(messages, []) == _whole(messages, [])
    assert _in_slices(messages, [], items_first=True) == _whole(messages, [])
    if count:
        compactions = [_compaction(1), _compaction(count)]
        assert _in_slices(messages, compactions) == _whole(messages, compactions)


def test_the_items_are_made_a_slice_at_a_time_as_they_are_taken(monkeypatch):
    made: list[int] = []

    def counted(messages, compactions):
        made.append(len(messages))
        return history_items(messages, compactions)

    monkeypatch.setattr(history_pieces, "history_items", counted)
    messages = _messages(2 * PER_PIECE + 5)
    message_slices, item_slices = history_in_slices(messages, [])
    assert len(list(message_slices)) == 3 and made == [], "no item is made before the items are taken"
    items = iter(item_slices)
    next(items)
    assert made == [PER_PIECE]
    assert len(list(items)) == 2 and made == [PER_PIECE, PER_PIECE, 5]
    made.clear()
    assert _in_slices(messages, [_compaction(5)]) == _whole(messages, [_compaction(5)])
    assert made == [len(messages)], "with compaction records (they sort in between): all the items at once"
