"""The summarizer's request: structured prompt, thinking included, tool results cut, update-not-redo, pruning."""

from daemon.context.estimate import MESSAGE_OVERHEAD_TOKENS, PART_OVERHEAD_TOKENS, text_tokens
from daemon.context.summary import SYSTEM_PROMPT, TOOL_RESULT_CHARS, files_touched, summary_request
from tests.support.chat import Conversation

HEADINGS = ["## Goal", "## Constraints and preferences", "## Progress", "## Key decisions", "## Next steps",
            "## Files", "### Read", "### Changed"]  # fmt: skip


def folded() -> Conversation:
    chat = Conversation()
    chat.user("Fix the failing parser test in src/parse.py; don't touch the public API.")
    chat.assistant(
        "I'll read it first.",
        thinking="The failure is probably the off-by-one in tokenize().",
        calls=[("c1", "read_file", {"path": "src/parse.py"})],
    )
    chat.results(("c1", "L" * 5000))
    chat.assistant(calls=[("c2", "edit_file", {"path": "src/parse.py", "old_string": "i+1", "new_string": "i"})])
    chat.results(("c2", "--- a/src/parse.py\n+++ b/src/parse.py"))
    chat.assistant(calls=[("c3", "run_command", {"command": "pytest -q"})])
    chat.results(("c3", "1 failed: AssertionError: expected 3"), is_error=True)
    return chat


def body(request) -> str:  # type: ignore[no-untyped-def]
    [message] = request.messages
    assert message.role == "user" and len(message.parts) == 1
    return message.parts[0].text


def test_new_summary_prompt_has_the_structure_the_transcript_and_the_thinking() -> None:
    request = summary_request(folded().messages)
    text = body(request)
    assert request.system_prompt == SYSTEM_PROMPT and "Do NOT continue the conversation" in SYSTEM_PROMPT
    for heading in HEADINGS:
        assert heading in text
    assert text.startswith("<conversation>\n[User]: Fix the failing parser test")
    assert "[Assistant thinking]: The failure is probably the off-by-one in tokenize()." in text
    assert "[Assistant]: I'll read it first." in text
    assert '[Tool call]: read_file({"path": "src/parse.py"})' in text
    assert "[Tool error of run_command]: 1 failed: AssertionError: expected 3" in text
    assert "<previous-summary>" not in text and "UPDATE" not in text
    assert "Preserve exact file paths" in text


def test_tool_results_are_truncated_for_the_summarizer() -> None:
    text = body(summary_request(folded().messages))
    assert "L" * TOOL_RESULT_CHARS + f"… [{5000 - TOOL_RESULT_CHARS} more characters]" in text
    assert "L" * (TOOL_RESULT_CHARS + 1) not in text


def test_files_read_and_changed_are_listed() -> None:
    chat = folded()
    chat.assistant(calls=[("c4", "read_file", {"path": "README.md"}), ("c5", "write_file", {"path": "NEW.md"})])
    assert files_touched(chat.messages, {"write_file", "edit_file"}) == (["README.md"], ["src/parse.py", "NEW.md"])
    text = body(summary_request(chat.messages))
    assert "<read-files>\nREADME.md\n</read-files>" in text
    assert "<changed-files>\nsrc/parse.py\nNEW.md\n</changed-files>" in text


def test_previous_summary_is_updated_not_redone() -> None:
    previous = "## Goal\nFix the parser.\n## Next steps\n1. Run the tests."
    chat = Conversation()
    chat.user("The tests pass now; also update the changelog.")
    text = body(summary_request(chat.messages, previous_summary=previous))
    assert f"<previous-summary>\n{previous}\n</previous-summary>" in text
    assert "UPDATE the previous summary" in text and "PRESERVE everything in the previous summary" in text
    assert "[User]: The tests pass now; also update the changelog." in text
    assert text.index("</conversation>") < text.index("<previous-summary>")


def test_user_instructions_are_a_focus() -> None:
    text = body(summary_request(folded().messages, instructions="  keep the exact pytest output  "))
    assert text.endswith("Additional focus from the user: keep the exact pytest output")
    assert "Additional focus" not in body(summary_request(folded().messages, instructions="   "))


def test_fits_without_pruning_when_the_window_is_large() -> None:
    request = summary_request(folded().messages, context_window=100_000, max_output_tokens=4000)
    assert request.fits and request.pruned_tool_results == 0 and request.omitted_entries == 0
    text = body(request)
    expected = text_tokens(SYSTEM_PROMPT) + MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + text_tokens(text)
    assert request.estimate == expected


def test_oldest_tool_results_are_pruned_first_to_fit() -> None:
    chat = Conversation()
    chat.user("Summarize the logs.")
    for n in range(6):
        chat.assistant(f"step {n}", calls=[(f"c{n}", "read_file", {"path": f"log{n}.txt"})])
        chat.results((f"c{n}", f"LOG{n} " + "z" * 1990))
    full = summary_request(chat.messages)
    window = full.estimate + 1000 - 1200  # about two results too many, with 1000 tokens kept for the answer
    request = summary_request(chat.messages, context_window=window, max_output_tokens=1000)
    text = body(request)
    assert request.fits and request.estimate <= window - 1000
    assert request.pruned_tool_results == 3 and request.omitted_entries == 0
    for n in range(3):
        assert f"LOG{n} " not in text
        assert "[Tool result of read_file]: (left out to fit the summarizer's context window)" in text
    for n in range(3, 6):
        assert f"LOG{n} " in text
    assert all(f"step {n}" in text for n in range(6))  # the conversation itself is untouched


def test_when_pruning_is_not_enough_the_oldest_entries_go_and_it_says_so() -> None:
    chat = Conversation()
    for n in range(20):
        chat.user(f"message {n} " + "w" * 2000)
    full = summary_request(chat.messages)
    request = summary_request(chat.messages, context_window=full.estimate - 2000, max_output_tokens=0)
    text = body(request)
    assert request.fits and request.pruned_tool_results == 0 and request.omitted_entries >= 4
    assert f"[{request.omitted_entries} earlier entries were left out" in text
    assert "message 0 " not in text and "message 19 " in text


def test_a_window_too_small_for_the_prompt_itself_is_reported() -> None:
    request = summary_request(folded().messages, context_window=100, max_output_tokens=50)
    assert not request.fits


def test_prompt_content_is_summarized_as_what_it_was_and_images_are_estimated_by_size():
    from daemon.context.estimate import IMAGE_TOKENS_MAX, part_tokens
    from daemon.conversation import ChatMessage, Part

    parts = [
        Part(type="text", text="compare"),
        Part(type="image", attachment_id="att_1", mime_type="image/png", width=1200, height=900, size=9, name="a.png"),
        Part(type="resource", uri="file:///w/a.md", text="# Notes"),
        Part(type="resource_link", uri="https://example.com/x", name="x"),
    ]
    message = ChatMessage(message_id="m1", session_id="s", seq=1, role="user", parts=parts)
    text = body(summary_request([message]))
    assert "[Image attached by the user]: a.png (image/png, 1200×900)" in text
    assert "[User attached file file:///w/a.md]: # Notes" in text
    assert "[User linked]: x <https://example.com/x>" in text
    assert "Tool result" not in text
    assert part_tokens(parts[1]) == PART_OVERHEAD_TOKENS + 1200 * 900 // 750
    huge = Part(type="image", attachment_id="att_2", mime_type="image/png", width=2000, height=2000, size=9)
    assert part_tokens(huge) == PART_OVERHEAD_TOKENS + IMAGE_TOKENS_MAX
