"""Token estimates without a tokenizer: characters / 4, rounded up.

Good enough to decide when to compact (every decision keeps a reserve), and it needs no
data downloaded at run time. The best estimate of the next request starts from what the
provider reported for the last one (``next_request_estimate``); ``request_estimate`` counts
a whole request from scratch, for when there is no such report (the first call, or the
first after a compaction changed the prefix).

What counts: the system prompt, the tool schemas, every part of every message (text,
thinking text, a tool call's name and arguments, a tool result's text, an image by its size)
plus a small
per-message overhead for the role and framing, and the pending input.
"""

import json
import math
from collections.abc import Iterable, Sequence

from daemon.conversation import ChatMessage, Part, ToolSpec

CHARS_PER_TOKEN = 4
# Role markers and separators a provider adds around each message and each part.
MESSAGE_OVERHEAD_TOKENS = 4
PART_OVERHEAD_TOKENS = 2


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


# An image costs about width × height / 750 tokens (Anthropic's vision docs; OpenAI's tiles and
# Gemini's 258 per tile land near it), with images scaled to 2000 px at most: at most ~1,600
# tokens once a provider has fitted it to its own limit (1568 px on Anthropic).
IMAGE_TOKENS_MAX = 1600


def part_tokens(part: Part) -> int:
    if part.type == "image":
        if part.omitted:
            return PART_OVERHEAD_TOKENS + 20  # sent as a one-line note
        return PART_OVERHEAD_TOKENS + min(IMAGE_TOKENS_MAX, math.ceil((part.width or 0) * (part.height or 0) / 750))
    if part.type == "resource_link":
        return PART_OVERHEAD_TOKENS + text_tokens((part.uri or "") + (part.name or ""))
    if part.type == "tool_call":
        arguments = json.dumps(part.arguments or {}, ensure_ascii=False)
        return PART_OVERHEAD_TOKENS + text_tokens((part.name or "") + arguments)
    return PART_OVERHEAD_TOKENS + text_tokens(part.text)


def message_tokens(message: ChatMessage) -> int:
    return MESSAGE_OVERHEAD_TOKENS + sum(part_tokens(part) for part in message.parts)


def messages_tokens(messages: Iterable[ChatMessage]) -> int:
    return sum(message_tokens(message) for message in messages)


def tools_tokens(tools: Sequence[ToolSpec]) -> int:
    return sum(
        text_tokens(tool.name + tool.description + json.dumps(tool.input_schema, ensure_ascii=False)) for tool in tools
    )


def request_estimate(
    system_prompt: str | None,
    tools: Sequence[ToolSpec],
    messages: Iterable[ChatMessage],
    pending_input: str = "",
) -> int:
    """The whole request: system prompt, tool schemas, history and the input not yet stored."""
    pending = MESSAGE_OVERHEAD_TOKENS + text_tokens(pending_input) if pending_input else 0
    return text_tokens(system_prompt or "") + tools_tokens(tools) + messages_tokens(messages) + pending


def next_request_estimate(
    last_reported_input_tokens: int,
    last_output_tokens: int,
    appended_since: Iterable[ChatMessage],
    pending_input: str = "",
) -> int:
    """The next request, from the last call's provider-reported input and output tokens plus an
    estimate of what was appended after that call's reply (tool results, a new prompt).

    The reply's output tokens include its reasoning, which providers often do not resend:
    an over-estimate, on the safe side for a threshold.
    """
    pending = MESSAGE_OVERHEAD_TOKENS + text_tokens(pending_input) if pending_input else 0
    return last_reported_input_tokens + last_output_tokens + messages_tokens(appended_since) + pending
