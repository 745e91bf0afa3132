"""Where a compaction cuts: the first message kept verbatim after the summary.

Rules (PROTOCOL "Context, cost and compaction"): cut only where every provider accepts a
fresh start, that is before a user message, and never between a tool call and its result;
keep about ``keep_recent_tokens`` of the most recent messages verbatim. The cut prefers
keeping at least that much (the nearest user message at or before the point where the
recent messages reach it); when that would fold nothing (one long turn holds it all), the
nearest user message after that point, keeping less. No user message past the first one:
nothing is old enough to fold at a user message.

One turn can outgrow the window on its own (an agentic turn that reads fifteen big files).
``choose_cut_in_turn`` then cuts inside it, between a tool result and the model's next call:
before an assistant reply that follows a tool message, or after the last message (everything
folded, the next call starts from the summary), but never before results the model has not
seen yet. Providers accept that too: the summary rides
in a user message of its own (``daemon.context.history``), so the kept messages still
alternate. Only when the whole history is recent is nothing old enough to fold, and the
compaction is ``skipped``.
"""

from collections.abc import Sequence

from daemon.context.estimate import message_tokens
from daemon.conversation import ChatMessage


def choose_cut(messages: Sequence[ChatMessage], keep_recent_tokens: int) -> ChatMessage | None:
    """The first message to keep, or None when nothing is old enough to fold.

    ``messages`` are the ones the next request would send, in ``seq`` order: after an earlier
    compaction, those from its ``first_kept_seq`` on (the earlier summary is folded in by the
    summarizer, see ``daemon.context.summary``).
    """
    reach = _reach(messages, keep_recent_tokens)
    if reach is None:
        return None
    blocked = _inside_tool_exchange(messages)
    candidates = [i for i in range(1, len(messages)) if messages[i].role == "user" and not blocked[i]]
    at_or_before = [i for i in candidates if i <= reach]
    after = [i for i in candidates if i > reach]
    if at_or_before:
        return messages[at_or_before[-1]]
    if after:
        return messages[after[0]]
    return None


def choose_cut_in_turn(messages: Sequence[ChatMessage], keep_recent_tokens: int) -> int | None:
    """The ``first_kept_seq`` of a cut inside a turn, for when ``choose_cut`` finds no user message
    to cut at; None when the whole history is recent.

    The cut falls before an assistant reply that follows a tool message (the nearest at or before
    the point where the recent messages reach ``keep_recent_tokens``, else the nearest after it),
    else after the last message: everything is folded and the next request starts from the summary.
    Tool results the model has not answered yet are never folded: it has not seen them.
    """
    reach = _reach(messages, keep_recent_tokens)
    if reach is None:
        return None
    blocked = _inside_tool_exchange(messages)
    points = [
        i
        for i in range(1, len(messages))
        if messages[i].role == "assistant" and messages[i - 1].role == "tool" and not blocked[i]
    ]
    at_or_before = [i for i in points if i <= reach]
    if at_or_before:
        return messages[at_or_before[-1]].seq
    after = [i for i in points if i > reach]
    if after:
        return messages[after[0]].seq
    if messages[-1].role == "tool":
        return None  # results the model has not seen yet are kept (shortened in the request if need be)
    return messages[-1].seq + 1


def _reach(messages: Sequence[ChatMessage], keep_recent_tokens: int) -> int | None:
    """The index from which the recent messages hold about ``keep_recent_tokens``; None when the
    whole history holds less (everything is recent)."""
    if not messages:
        return None
    reach, kept = len(messages), 0
    while reach > 0 and kept < keep_recent_tokens:
        reach -= 1
        kept += message_tokens(messages[reach])
    return reach if kept >= keep_recent_tokens else None


def _inside_tool_exchange(messages: Sequence[ChatMessage]) -> list[bool]:
    """For each index, whether cutting before that message would separate a tool call from its result.

    A call never answered (an interrupted turn) binds nothing: no result follows it.
    """
    called_at: dict[str, int] = {}
    answered_at: dict[str, int] = {}
    for index, message in enumerate(messages):
        for part in message.parts:
            if part.call_id and part.type == "tool_call":
                called_at.setdefault(part.call_id, index)
            elif part.call_id and part.type == "tool_result":
                answered_at[part.call_id] = index
    depth = [0] * (len(messages) + 1)
    for call_id, start in called_at.items():
        end = answered_at.get(call_id)
        if end is not None and end > start:
            depth[start + 1] += 1  # cuts before start+1 .. end fall between the call and its result
            depth[end + 1] -= 1
    blocked, running = [], 0
    for index in range(len(messages)):
        running += depth[index]
        blocked.append(running > 0)
    return blocked
