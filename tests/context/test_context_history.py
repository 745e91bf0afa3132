"""The history a request sends after a compaction: summary + kept messages, thinking stripped where bound."""

import itertools

import msgspec

from daemon.context.estimate import messages_tokens, request_estimate
from daemon.context.history import (
    SUMMARY_PREFIX,
    compaction_shrinks,
    history_for_request,
    history_items,
    without_thinking,
)
from protocol.objects import Compaction, Message, MessageItem, Usage
from tests.support.chat import Conversation

SUMMARY = "## Goal\nShip the parser fix."


def conversation() -> Conversation:
    chat = Conversation()
    chat.user("old question " + "o" * 4000)  # seq 1
    chat.assistant("old answer", thinking="old thoughts", signature="sig-1")  # seq 2
    chat.user("recent question")  # seq 3
    chat.assistant("reading", thinking="recent thoughts", signature="sig-2", calls=[("c1", "read_file", {"path": "a"})])
    chat.results(("c1", "contents"))  # seq 5
    chat.assistant("", thinking="only thinking", signature="sig-3")  # seq 6
    chat.assistant("final answer")  # seq 7
    return chat


def compaction(first_kept_seq: int = 3) -> Compaction:
    return Compaction(
        compaction_id="k1", seq=8, trigger="manual", summary=SUMMARY, first_kept_seq=first_kept_seq,
        tokens_before=2000, tokens_after=300, model_id="mock/echo", created_at="2026-11-24T00:00:00Z",
    )  # fmt: skip


def test_without_a_compaction_everything_is_sent_unchanged() -> None:
    chat = conversation()
    assert history_for_request(chat.messages, None) == chat.messages
    assert history_for_request(chat.messages, None, strip_thinking=True) == chat.messages  # nothing changed the prefix


def test_summary_rides_in_the_first_kept_user_message_and_nothing_older_is_sent() -> None:
    chat = conversation()
    history = history_for_request(chat.messages, compaction())
    assert [m.seq for m in history] == [3, 4, 5, 6, 7]
    first = history[0]
    assert first.role == "user" and first.message_id == "m3"
    assert first.parts[0].text == SUMMARY_PREFIX + SUMMARY + "\n</summary>"
    assert first.parts[1].text == "recent question"
    roles = [m.role for m in history]
    assert all(not (a == b == "user") for a, b in itertools.pairwise(roles))  # alternation kept
    assert chat.messages[2].parts[0].text == "recent question"  # the stored message is not rewritten


def test_thinking_kept_for_models_that_accept_it_after_a_prefix_change() -> None:
    history = history_for_request(conversation().messages, compaction(), strip_thinking=False)
    thinking = [p for m in history for p in m.parts if p.type == "thinking"]
    assert [(p.text, p.signature) for p in thinking] == [("recent thoughts", "sig-2"), ("only thinking", "sig-3")]


def test_thinking_stripped_with_its_round_trip_data_for_prefix_bound_models() -> None:
    chat = conversation()
    history = history_for_request(chat.messages, compaction(), strip_thinking=True)
    assert not [p for m in history for p in m.parts if p.type == "thinking"]
    assert not [p for m in history for p in m.parts if p.signature]
    assert [m.seq for m in history] == [3, 4, 5, 7]  # the reply that held only thinking goes entirely
    reply = history[1]
    assert [p.type for p in reply.parts] == ["text", "tool_call"]
    assert [p.type for p in chat.messages[3].parts] == ["thinking", "text", "tool_call"]  # the store keeps them


def test_without_thinking_returns_the_same_message_when_there_is_none() -> None:
    chat = conversation()
    assert without_thinking(chat.messages[0]) is chat.messages[0]
    assert without_thinking(chat.messages[5]) is None


def test_a_cut_not_at_a_user_message_gets_its_own_summary_message() -> None:
    history = history_for_request(conversation().messages, compaction(first_kept_seq=4))
    assert history[0].role == "user" and history[0].parts[0].text.startswith(SUMMARY_PREFIX)
    assert [m.seq for m in history[1:]] == [4, 5, 6, 7]


def test_a_compaction_never_increases_the_estimate() -> None:
    chat = conversation()
    before = request_estimate("system", [], chat.messages)
    after = request_estimate("system", [], history_for_request(chat.messages, compaction()))
    assert after < before and compaction_shrinks(before, after)
    # A summary longer than what it replaces must be refused.
    bloated = compaction()
    bloated.summary = "s" * 40_000
    bloated_after = request_estimate("system", [], history_for_request(chat.messages, bloated))
    assert bloated_after > before and not compaction_shrinks(before, bloated_after)
    assert not compaction_shrinks(before, before)
    assert messages_tokens(chat.messages[2:]) < messages_tokens(chat.messages)


def test_history_items_interleave_messages_and_compactions_by_seq() -> None:
    chat = conversation()
    wire = [m.to_wire() for m in chat.messages]
    record = compaction()  # seq 8: after the seven messages
    earlier = msgspec.structs.replace(record, compaction_id="k0", seq=2, first_kept_seq=1)
    items = history_items(wire, [record, earlier])
    assert [(type(i).__name__, i.seq) for i in items] == [
        ("MessageItem", 1), ("MessageItem", 2), ("CompactionItem", 2), *[("MessageItem", n) for n in range(3, 8)],
        ("CompactionItem", 8),
    ]  # fmt: skip
    encoded = msgspec.json.decode(msgspec.json.encode(items))
    assert encoded[0]["kind"] == "message" and encoded[0]["message_id"] == "m1"
    assert encoded[-1]["kind"] == "compaction" and encoded[-1]["summary"] == SUMMARY
    assert history_items([], []) == []


def test_a_message_item_carries_every_field_of_its_message() -> None:
    # history_items builds each MessageItem field by field (a resume makes ten thousand): a
    # field added to Message and forgotten there would vanish from ``items`` without this.
    wire = [m.to_wire() for m in conversation().messages]
    full = msgspec.structs.replace(
        wire[1],
        model_id="anthropic/claude-sonnet-4-5",
        thinking_level="high",
        stop_reason="end_turn",
        usage=Usage(input_tokens=10, output_tokens=5),
        status="interrupted",
        created_at="2026-11-26T12:00:00Z",
        origin="steer",
    )
    assert set(MessageItem.__struct_fields__) == set(Message.__struct_fields__)
    for message in (*wire, full):
        (item,) = history_items([message], [])
        assert isinstance(item, MessageItem)
        assert msgspec.structs.asdict(item) == msgspec.structs.asdict(message)
    assert all(getattr(full, name) is not None for name in Message.__struct_fields__)
