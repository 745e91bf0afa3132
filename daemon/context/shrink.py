"""Tool results too big to send verbatim, shortened in the request (never in the store).

A compaction folds old messages into a summary, but what it keeps can still be too big: one
tool result larger than the window (a 1 MB log on an 8k model), or the latest batch of
results of an agentic turn that read fifteen big files at once. Before such a request is
sent, ``fit_tool_results`` shortens tool results until the request fits ``limit`` tokens:

1. results before the latest message that has any, oldest first, each to at most ``old_cap``
   tokens;
2. then, if that is not enough, the latest message's results, sharing what room is left
   (never below ``FLOOR_TOKENS`` each).

A shortened result keeps its head and its tail and says, in the middle, how much was left
out and that the full text is still in the session, so the model can read a smaller range
again. The messages passed in are not changed (the store's copies stay whole): shortened
parts go into copies. Nothing happens while the request fits, so a provider's prompt cache
is not disturbed by a request that did not need it.
"""

import math
from collections.abc import Sequence

import msgspec

from daemon.context.estimate import messages_tokens, part_tokens, text_tokens
from daemon.conversation import ChatMessage

FLOOR_TOKENS = 200  # a shortened result keeps at least this much of its head and tail
HEAD_SHARE = 2 / 3  # of what a shortened result keeps, the share taken from its head


def shortened(text: str, keep_tokens: int) -> str:
    """``text`` cut to about ``keep_tokens`` tokens: its head and tail, and a note of what went between."""
    tokens = text_tokens(text)
    if tokens <= keep_tokens:
        return text
    keep_chars = max(1, math.floor(len(text) * keep_tokens / tokens))
    head = math.ceil(keep_chars * HEAD_SHARE)
    tail = keep_chars - head
    left_out = len(text) - head - tail
    note = (
        f"\n[... {left_out:,} characters of this tool result were left out of this request to fit the model's "
        "context window; the full result is kept in the session. Ask for a smaller part (e.g. offset/limit) "
        "if you need what is missing. ...]\n"
    )
    return text[:head] + note + (text[len(text) - tail :] if tail else "")


def fit_tool_results(
    messages: Sequence[ChatMessage], *, fixed_tokens: int, limit: int, old_cap: int
) -> tuple[list[ChatMessage], int]:
    """``messages`` with tool results shortened until ``fixed_tokens`` (system prompt, tools) plus the
    messages fit ``limit`` tokens; and how many results were shortened. Unchanged when they fit."""
    total = fixed_tokens + messages_tokens(messages)
    if total <= limit or not messages:
        return list(messages), 0
    result = list(messages)
    with_results = [i for i, m in enumerate(result) if any(p.type == "tool_result" for p in m.parts)]
    if not with_results:
        return result, 0
    count = 0
    last = with_results[-1]
    for index in with_results[:-1]:  # 1. the older results, oldest first
        if total <= limit:
            break
        total, changed = _shrink_message(result, index, old_cap, total, limit)
        count += changed
    if total > limit:  # 2. the latest results share what is left
        parts = [p for p in result[last].parts if p.type == "tool_result"]
        if parts:
            others = total - sum(part_tokens(p) for p in parts)
            share = max(FLOOR_TOKENS, (limit - others) // len(parts))
            total, changed = _shrink_message(result, last, share, total, None)
            count += changed
    return result, count


def _shrink_message(
    messages: list[ChatMessage], index: int, cap: int, total: int, limit: int | None
) -> tuple[int, int]:
    """Shorten the tool results of ``messages[index]`` above ``cap`` tokens (stopping once ``total`` fits
    ``limit``, when given); the new total and how many were shortened."""
    message = messages[index]
    parts = list(message.parts)
    changed = 0
    for position, part in enumerate(parts):
        if limit is not None and total <= limit:
            break
        if part.type != "tool_result":
            continue
        before = part_tokens(part)
        if before - 2 <= cap:
            continue
        smaller = msgspec.structs.replace(part, text=shortened(part.text, cap))
        parts[position] = smaller
        total -= before - part_tokens(smaller)
        changed += 1
    if changed:
        messages[index] = msgspec.structs.replace(message, parts=parts)
    return total, changed
