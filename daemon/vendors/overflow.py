"""Whether a provider's error means "the request does not fit the model's context window".

Such an error is not transient (retrying the same request fails the same way): with
``[compaction] auto`` on, the session compacts and retries once; with it off, the turn ends
with an error saying how to compact. Providers say it differently, so this looks at the
error's code first and its text second (the wordings recorded in docs/research/long-sessions.md),
and refuses look-alikes that are really rate limits ("Too many tokens, please wait").
"""

import re

OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI Chat Completions and Responses (HTTP and response.failed)
        "model_max_prompt_tokens_exceeded",  # GitHub Copilot
        "request_too_large",  # Anthropic 413
        "model_context_window_exceeded",  # Anthropic's stop reason on newer models
    }
)
OVERFLOW_TEXT = re.compile(
    "|".join(
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
    ),
    re.IGNORECASE,
)
# Rate limits and throttling that mention tokens: waiting helps, compacting does not.
NOT_OVERFLOW_TEXT = re.compile(r"^(throttling error|service unavailable):|rate limit|too many requests", re.IGNORECASE)


def is_context_overflow(message: str, *, status: int | None = None, kind: str | None = None) -> bool:
    """Whether an error (its text, HTTP status and provider code, as on ``ProviderError``) is a context overflow."""
    if status == 429 or NOT_OVERFLOW_TEXT.search(message):
        return False
    if kind is not None and kind.lower() in OVERFLOW_CODES:
        return True
    if status == 413:
        return True
    return OVERFLOW_TEXT.search(message) is not None
