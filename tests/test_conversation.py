"""``ChatMessage.to_wire``: the blocks in the parts' order and the thinking joined in one pass."""

import pytest

from daemon.conversation import ChatMessage, Part
from protocol.objects import TextBlock, ThinkingBlock, ToolCallBlock


def message(*parts: Part) -> ChatMessage:
    return ChatMessage(message_id="m1", session_id="s1", seq=1, role="assistant", parts=list(parts))


@pytest.mark.parametrize(
    ("parts", "thinking"),
    [
        ((), None),
        ((Part(type="text", text="answer"),), None),
        ((Part(type="thinking", text=""), Part(type="thinking", redacted=True)), None),
        ((Part(type="thinking", text="only"),), "only"),
        (
            (
                Part(type="thinking", text="first, "),
                Part(type="text", text="x"),
                Part(type="thinking", text=""),
                Part(type="tool_call", call_id="c", name="n", arguments={}),
                Part(type="thinking", text="then 🙂"),
            ),
            "first, then 🙂",
        ),
    ],
)
def test_the_wire_message_joins_every_thinking_text_and_keeps_every_block(
    parts: tuple[Part, ...], thinking: str | None
) -> None:
    chat = message(*parts)
    wire = chat.to_wire()
    assert wire.thinking == thinking == chat.thinking_text
    assert wire.content == [part.to_block() for part in parts]
    assert (wire.message_id, wire.session_id, wire.seq, wire.role) == ("m1", "s1", 1, "assistant")


def test_blocks_are_the_parts_kinds_in_order() -> None:
    wire = message(
        Part(type="thinking", text="t"), Part(type="text", text="x"), Part(type="tool_call", call_id="c", name="n")
    ).to_wire()
    assert [type(block) for block in wire.content] == [ThinkingBlock, TextBlock, ToolCallBlock]
