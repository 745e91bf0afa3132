"""Token estimates (characters / 4) of a request, and of the next one from the last reported usage."""

from daemon.context.estimate import (
    MESSAGE_OVERHEAD_TOKENS,
    PART_OVERHEAD_TOKENS,
    message_tokens,
    next_request_estimate,
    request_estimate,
    text_tokens,
    tools_tokens,
)
from daemon.conversation import ToolSpec
from tests.support.chat import Conversation


def test_text_is_characters_over_four_rounded_up() -> None:
    assert [text_tokens(""), text_tokens("abc"), text_tokens("abcd"), text_tokens("abcde")] == [0, 1, 1, 2]


def test_every_part_counts_thinking_calls_and_results_included() -> None:
    chat = Conversation()
    reply = chat.assistant("t" * 40, thinking="h" * 400, calls=[("c1", "read_file", {"path": "a.py"})])
    results = chat.results(("c1", "r" * 800))
    call_text = 'read_file{"path": "a.py"}'
    assert message_tokens(reply) == MESSAGE_OVERHEAD_TOKENS + 3 * PART_OVERHEAD_TOKENS + 10 + 100 + text_tokens(
        call_text
    )
    assert message_tokens(results) == MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + 200


def test_request_estimate_adds_system_tools_history_and_pending_input() -> None:
    chat = Conversation()
    chat.user("u" * 400)
    tool = ToolSpec(name="read_file", description="Read a file.", input_schema={"type": "object"})
    estimate = request_estimate("s" * 800, [tool], chat.messages, pending_input="p" * 40)
    assert tools_tokens([tool]) > 0
    assert estimate == 200 + tools_tokens([tool]) + message_tokens(chat.messages[0]) + MESSAGE_OVERHEAD_TOKENS + 10
    assert request_estimate(None, [], []) == 0


def test_next_request_starts_from_reported_usage_and_adds_what_was_appended() -> None:
    chat = Conversation()
    results = chat.results(("c1", "r" * 4000))
    estimate = next_request_estimate(12_000, 300, [results], pending_input="")
    assert estimate == 12_000 + 300 + message_tokens(results)
    assert next_request_estimate(12_000, 300, []) == 12_300
    assert next_request_estimate(10, 0, [], pending_input="abcd") == 10 + MESSAGE_OVERHEAD_TOKENS + 1
