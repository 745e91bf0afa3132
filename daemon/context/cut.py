"""Where a compaction cuts: the first message kept verbatim after the summary.

Rules (PROTOCOL "Context, cost and compaction"): cut only where every provider accepts a
fresh start, that is before a user message, and never between a tool call and its result;
keep about ``keep_recent_tokens`` of the most recent messages verbatim. The cut prefers
keeping at least that much (the nearest user message at or before the point where the
recent messages reach it); when that would fold nothing (one long turn holds it all), the
nearest user message after that point, keeping less. No user message past the first one:
nothing is old enough to fold, and the compaction is ``skipped``.
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
    if not messages:
        return None
    # reach: the index from which the recent messages hold about keep_recent_tokens.
    reach, kept = len(messages), 0
    while reach > 0 and kept < keep_recent_tokens:
        reach -= 1
        kept += message_tokens(messages[reach])
    if kept < keep_recent_tokens:
        return None  # the whole history is recent
    blocked = _inside_tool_exchange(messages)
    candidates = [i for i in range(1, len(messages)) if messages[i].role == "user" and not blocked[i]]
    at_or_before = [i for i in candidates if i <= reach]
    after = [i for i in candidates if i > reach]
    if at_or_before:
        return messages[at_or_before[-1]]
    if after:
        return messages[after[0]]
    return None


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
