"""Whether a provider's error means "the request does not fit the model's context window".

Such an error is not transient (retrying the same request fails the same way): with
``[compaction] auto`` on, the session compacts and retries once; with it off, the turn ends
with an error saying how to compact. Providers say it differently, so this looks at the
error's code first and its text second (the wordings recorded in docs/research/long-sessions.md),
and refuses look-alikes that are really rate limits ("Too many tokens, please wait").

Most overflow errors also name the numbers: how many tokens the request had and the model's
limit. ``overflow_numbers`` reads them, so that a model whose window ponder did not know
learns it, and the estimate learns how far off it was.
"""

import functools
import re

OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI Chat Completions and Responses (HTTP and response.failed)
        "model_max_prompt_tokens_exceeded",  # GitHub Copilot
        "request_too_large",  # Anthropic 413
        "model_context_window_exceeded",  # Anthropic's stop reason on newer models
    }
)
# Compiled on first use (an error to read), not with the agent that imports this module.
_OVERFLOW_WORDINGS = "|".join(
    (
        r"prompt is too long",  # Anthropic: "prompt is too long: 213462 tokens > 200000 maximum"
        r"exceeds? (the )?context limit",  # Anthropic: "input length and `max_tokens` exceed context limit"
        r"request exceeds the maximum size",  # Anthropic 413
        r"exceeds the context window",  # OpenAI Responses
        r"maximum context length",  # OpenAI Chat, DeepSeek, OpenRouter
        r"input token count.*exceeds the maximum",  # Gemini
        r"exceeds the maximum number of tokens allowed",  # Gemini
        r"range of input length should be",  # DashScope
        r"prompt token count of \d+ exceeds the limit of \d+",  # Copilot
        r"prompt too long; exceeded (max )?context length",  # Ollama (older runners)
        r"longer than the context length",  # Ollama (current runner)
        r"context[ _]length[ _]exceeded",
        r"context[ _]window[ _]exceeded",
    )
)
# Rate limits and throttling that mention tokens: waiting helps, compacting does not.
_NOT_OVERFLOW_WORDINGS = r"^(throttling error|service unavailable):|rate limit|too many requests"


@functools.cache
def _wordings() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(an overflow's wordings, the look-alikes that are not one)."""
    return re.compile(_OVERFLOW_WORDINGS, re.IGNORECASE), re.compile(_NOT_OVERFLOW_WORDINGS, re.IGNORECASE)


def is_context_overflow(message: str, *, status: int | None = None, kind: str | None = None) -> bool:
    """Whether an error (its text, HTTP status and provider code, as on ``ProviderError``) is a context overflow."""
    overflow_text, not_overflow_text = _wordings()
    if status == 429 or not_overflow_text.search(message):
        return False
    if kind is not None and kind.lower() in OVERFLOW_CODES:
        return True
    if status == 413:
        return True
    return overflow_text.search(message) is not None


# (pattern, group of the request's tokens, group of the limit); the wordings of the overflow providers.
_NUMBER_WORDINGS: tuple[tuple[str, int | None, int | None], ...] = (
    # Anthropic: "prompt is too long: 213462 tokens > 200000 maximum"
    (r"prompt is too long: ([\d,]+) tokens > ([\d,]+)", 1, 2),
    # OpenAI Chat, DeepSeek, OpenRouter: "maximum context length is 8192 tokens. However, your messages
    # resulted in 9000 tokens" (also "you requested 9000 tokens (8000 in the messages, ...)")
    (r"maximum context length is ([\d,]+) tokens.*?(?:resulted in|requested) ([\d,]+) tokens", 2, 1),
    (r"maximum context length is ([\d,]+) tokens", None, 1),
    # Copilot: "prompt token count of 140000 exceeds the limit of 128000"
    (r"prompt token count of ([\d,]+) exceeds the limit of ([\d,]+)", 1, 2),
    # Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)"
    (r"input token count \(?([\d,]+)\)? exceeds the maximum number of tokens allowed \(?([\d,]+)", 1, 2),
    # OpenAI Responses: "Your input exceeds the context window of this model (400000 tokens)"
    (r"context window of this model \(?([\d,]+)", None, 1),
    # Ollama: "the input length (9000 tokens) exceeds the context length (8192 tokens)"
    (r"input length \(?([\d,]+) tokens?\)? exceeds the (?:maximum )?context length \(?([\d,]+)", 1, 2),
)


@functools.cache
def _numbers() -> tuple[tuple[re.Pattern[str], int | None, int | None], ...]:
    return tuple((re.compile(pattern, re.IGNORECASE), used, limit) for pattern, used, limit in _NUMBER_WORDINGS)


# Numbers beyond this are not a window (a garbled message): ignored.
_MAX_TOKENS = 100_000_000


def overflow_numbers(message: str) -> tuple[int | None, int | None]:
    """(the request's tokens, the model's limit) as an overflow error states them; None where it does not."""
    text = message[:2000]  # an error message, not a document: bounded work on any input
    for pattern, used_group, limit_group in _numbers():
        match = pattern.search(text)
        if match is None:
            continue
        used = _number(match.group(used_group)) if used_group else None
        limit = _number(match.group(limit_group)) if limit_group else None
        return used, limit
    return None, None


def _number(text: str) -> int | None:
    value = int(text.replace(",", ""))
    return value if 0 < value <= _MAX_TOKENS else None
