"""Recognizing a context overflow in each provider's recorded error wording (docs/research/long-sessions.md)."""

import httpx
import pytest

from daemon.providers.http import status_error
from daemon.vendors.overflow import is_context_overflow

RECORDED = [
    # (provider, HTTP status, body) as recorded from each provider
    ("anthropic", 400, b'{"type":"error","error":{"type":"invalid_request_error",'
                       b'"message":"prompt is too long: 213462 tokens > 200000 maximum"}}'),
    ("anthropic", 400, b'{"type":"error","error":{"type":"invalid_request_error","message":"input length and '
                       b'`max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or '
                       b'`max_tokens` and try again"}}'),
    ("anthropic", 413, b'{"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}'),
    ("openai", 400, b'{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, your '
                    b'messages resulted in 8227 tokens. Please reduce the length of the messages.",'
                    b'"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'),
    ("openai", 400, b'{"error":{"code":"context_length_exceeded","message":"Your input exceeds the context window '
                    b'of this model. Please adjust your input and try again."}}'),
    ("gemini", 400, b'{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of '
                    b'tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}'),
    ("deepseek", 400, b'{"error":{"message":"This model\'s maximum context length is 131072 tokens. However, you '
                      b'requested 131134 tokens (122942 in the messages, 8192 in the completion).",'
                      b'"type":"invalid_request_error","param":null,"code":"invalid_request_error"}}'),
    ("dashscope", 400, b'{"error":{"code":"invalid_parameter_error","param":null,"message":"<400> '
                       b'InternalError.Algo.InvalidParameter: Range of input length should be [1, 98304]",'
                       b'"type":"invalid_request_error"}}'),
    ("copilot", 400, b'{"error":{"message":"prompt token count of 138898 exceeds the limit of 64000",'
                     b'"code":"model_max_prompt_tokens_exceeded"}}'),
    ("ollama", 400, b'{"error":"prompt too long; exceeded max context length by 100918 tokens"}'),
    ("ollama", 400, b'{"error":"the prompt is longer than the context length currently available to the model; '
                    b'shorten the prompt, adjust the context length in settings, or use a model with a longer '
                    b'context length"}'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("provider", "status", "body"), RECORDED, ids=[f"{p}-{n}" for n, (p, _, _) in enumerate(RECORDED)]
)
def test_recorded_overflow_errors_are_recognized(provider: str, status: int, body: bytes) -> None:
    error = status_error(provider, status, httpx.Headers(), body)  # as the adapters build it
    assert is_context_overflow(error.message, status=error.status, kind=error.kind)


def test_openai_stream_failure_code_alone_is_enough() -> None:
    assert is_context_overflow(
        "openai stream failed: something (context_length_exceeded).", kind="context_length_exceeded"
    )


@pytest.mark.parametrize(
    ("message", "status", "kind"),
    [
        ("anthropic answered HTTP 429: Too many tokens, please wait before trying again.", 429, "rate_limit_error"),
        ("Throttling error: Too many tokens, please wait", 400, None),
        (
            "openai answered HTTP 400: Invalid 'messages[1].content': string too long (maximum context length?) "
            "rate limit",
            400,
            None,
        ),
        ("openai answered HTTP 400: Unsupported parameter: 'temperature'.", 400, "invalid_request_error"),
        ("anthropic answered HTTP 529: Overloaded", 529, "overloaded_error"),
    ],
)
def test_other_errors_are_not_overflows(message: str, status: int, kind: str | None) -> None:
    assert not is_context_overflow(message, status=status, kind=kind)
