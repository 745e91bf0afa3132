"""Token estimates without a tokenizer, honest for every script.

Characters / 4 holds for English and code, but a tokenizer spends about one token per
Chinese, Japanese or Korean character, and one per two characters of Cyrillic, Greek, Arabic
or Hebrew: counted at / 4 such text is under-estimated 3-4x, and a session in Chinese
overflows a window its estimate says it fits. So ASCII counts a quarter token a character,
characters of two UTF-8 bytes half a token, and characters of three or more (CJK, kana,
Hangul, Thai, Devanagari, emoji) a whole token. The classes are counted from the lengths
of the text's ASCII and UTF-8 encodings (C speed, no per-character loop), rounded up.

Good enough to decide when to compact (every decision keeps a reserve, and
``Calibration`` corrects it from what the provider reports), and it needs no data
downloaded at run time. The best estimate of the next request starts from what the
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
from typing import Any

from daemon.conversation import ChatMessage, Part, ToolSpec

CHARS_PER_TOKEN = 4
# Role markers and separators a provider adds around each message and each part.
MESSAGE_OVERHEAD_TOKENS = 4
PART_OVERHEAD_TOKENS = 2


def text_tokens(text: str) -> int:
    chars = len(text)
    if text.isascii():
        return math.ceil(chars / CHARS_PER_TOKEN)
    ascii_chars = len(text.encode("ascii", "ignore"))
    wide = chars - ascii_chars  # characters of 2, 3 or 4 UTF-8 bytes
    extra = len(text.encode("utf-8", "surrogatepass")) - chars  # 1, 2 or 3 per wide character
    three_or_more = min(wide, max(0, extra - wide))  # exact when no character takes 4 bytes
    two = wide - three_or_more
    return math.ceil(ascii_chars / CHARS_PER_TOKEN + two / 2 + three_or_more)


class Calibration:
    """How far the provider's counts are from the estimate: the ratio of a call's reported input
    tokens to the estimate of the request it sent, from the latest call that reported them.

    Never below ``MIN_RATIO`` or above ``MAX_RATIO`` (garbage usage must not make every request
    look empty or every request overflow), and 1 until a call reported its input tokens.
    """

    MIN_RATIO = 0.5
    MAX_RATIO = 4.0

    def __init__(self) -> None:
        self.ratio = 1.0

    def observe(self, estimated: int, reported: int | None) -> None:
        if reported is None or reported <= 0 or estimated <= 0:
            return
        self.ratio = min(self.MAX_RATIO, max(self.MIN_RATIO, reported / estimated))

    def scale(self, estimate: int) -> int:
        return math.ceil(estimate * self.ratio)


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
    return sum(tool_tokens(tool) for tool in tools)


def tool_tokens(tool: ToolSpec) -> int:
    """One tool's name, description and JSON Schema.

    Every request is estimated several times, and every turn offers the same tools (each turn
    its own copy of each schema), so the count is kept per tool and reused while the schema is
    equal: comparing two dicts costs a fraction of dumping one. Equal schemas dump to the same
    characters in whatever key order, hence the same count (but for a number that equals a
    boolean or a float, ``1 == 1.0 == true``: a schema differing from the last only so is counted
    as that one, a token apart at most).
    """
    key = (tool.name, tool.description)
    counted = _TOOL_TOKENS.get(key)
    if counted is not None and counted[0] == tool.input_schema:
        return counted[1]
    tokens = text_tokens(tool.name + tool.description + json.dumps(tool.input_schema, ensure_ascii=False))
    if len(_TOOL_TOKENS) >= _TOOL_TOKENS_KEPT:
        _TOOL_TOKENS.clear()  # tools from MCP servers come and go: start over
    _TOOL_TOKENS[key] = (tool.input_schema, tokens)
    return tokens


# (name, description) -> (the schema counted, its tokens)
_TOOL_TOKENS: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
_TOOL_TOKENS_KEPT = 1024


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
