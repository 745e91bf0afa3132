"""The history a request sends once the session has been compacted.

Nothing stored changes: the request gets the latest compaction's summary plus the stored
messages from its ``first_kept_seq`` on. The summary rides in the first kept message,
which is always a user message (see ``daemon.context.cut``), as a text part before that
message's own text: a separate summary message would put two user messages in a row,
which providers that insist on user/assistant alternation refuse.

Thinking across a compaction: some models bind each thinking block's signature to
everything before it (system prompt, tools, earlier messages). A local summary changes
that prefix, so for those models the kept messages go without their thinking parts (and
the round-trip data those parts carry); the stored blocks stay in the store. Which models
those are is the caller's knowledge (the catalogue's), passed as ``strip_thinking``.
"""

from collections.abc import Sequence
from typing import Protocol

import msgspec

from daemon.conversation import ChatMessage, Part
from protocol.objects import Compaction, CompactionItem, HistoryItem, Message, MessageItem

SUMMARY_PREFIX = (
    "The conversation before this point was compacted into the following summary. "
    "Continue the work from it and from the messages after it.\n\n<summary>\n"
)
SUMMARY_SUFFIX = "\n</summary>"


class FoldPoint(Protocol):
    """What ``history_for_request`` needs of a compaction (``protocol.objects.Compaction`` is one)."""

    @property
    def summary(self) -> str: ...

    @property
    def first_kept_seq(self) -> int: ...


def summary_text(summary: str) -> str:
    return SUMMARY_PREFIX + summary + SUMMARY_SUFFIX


def history_for_request(
    messages: Sequence[ChatMessage], compaction: FoldPoint | None, *, strip_thinking: bool = False
) -> list[ChatMessage]:
    """The messages to send: all of them without a compaction; else the summary and the kept ones.

    ``messages`` are the session's stored messages in ``seq`` order (all, or at least those from
    ``first_kept_seq`` on). ``strip_thinking``: the model rejects thinking whose prefix changed.
    """
    if compaction is None:
        return list(messages)
    kept = [message for message in messages if message.seq >= compaction.first_kept_seq]
    if strip_thinking:
        kept = [stripped for message in kept if (stripped := without_thinking(message)) is not None]
    summary = Part(type="text", text=summary_text(compaction.summary))
    if kept and kept[0].role == "user":
        first = kept[0]
        return [_with_parts(first, [summary, *first.parts]), *kept[1:]]
    # Not where a cut puts it (a store written by hand?): the summary as its own user message.
    anchor = kept[0] if kept else None
    lead = ChatMessage(
        message_id=f"summary-{compaction.first_kept_seq}",
        session_id=anchor.session_id if anchor else "",
        seq=compaction.first_kept_seq,
        role="user",
        parts=[summary],
    )
    return [lead, *kept]


def without_thinking(message: ChatMessage) -> ChatMessage | None:
    """The message without its thinking parts; None when nothing else is left (an empty reply)."""
    parts = [part for part in message.parts if part.type != "thinking"]
    if len(parts) == len(message.parts):
        return message
    return _with_parts(message, parts) if parts else None


def _with_parts(message: ChatMessage, parts: list[Part]) -> ChatMessage:
    return msgspec.structs.replace(message, parts=parts)


def compaction_shrinks(tokens_before: int, tokens_after: int) -> bool:
    """Whether a compaction may be stored: it never increases the estimate.

    Measure both with ``daemon.context.estimate.request_estimate`` (the same system prompt and tools),
    ``tokens_after`` over ``history_for_request`` with the new compaction. False: report the compaction
    as failed (or skipped) and store nothing.
    """
    return tokens_after < tokens_before


def history_items(messages: Sequence[Message], compactions: Sequence[Compaction]) -> list[HistoryItem]:
    """``items`` of session/messages and session/resume: messages and compaction records in ``seq`` order.

    A compaction's seq follows the last message that existed when it happened, so it sorts after
    that message (and before the next one, which takes a later seq).
    """
    items: list[HistoryItem] = [_message_item(message) for message in messages]
    if not compactions:
        return items  # messages come in seq order
    items += [CompactionItem(**msgspec.structs.asdict(compaction)) for compaction in compactions]
    return sorted(items, key=lambda item: item.seq)


def _message_item(message: Message) -> MessageItem:
    # Field by field: a resume makes one per message, and going through ``asdict`` costs four
    # times as much (tests/context checks that every field of Message is carried).
    return MessageItem(
        message_id=message.message_id,
        session_id=message.session_id,
        seq=message.seq,
        role=message.role,
        content=message.content,
        thinking=message.thinking,
        model_id=message.model_id,
        thinking_level=message.thinking_level,
        stop_reason=message.stop_reason,
        usage=message.usage,
        status=message.status,
        created_at=message.created_at,
        origin=message.origin,
    )
