"""The pure parts that keep one huge turn workable (issue #24): an estimate honest for every script
and corrected by what the provider counts, a cut inside a turn, tool results shortened in the
request only, the numbers an overflow error names, and windows learned from them."""

import msgspec

from daemon.context.cut import choose_cut, choose_cut_in_turn
from daemon.context.estimate import Calibration, messages_tokens, text_tokens
from daemon.context.history import history_for_request
from daemon.context.shrink import fit_tool_results, shortened
from daemon.context.window import DEFAULT_WINDOW, LearnedWindows
from daemon.vendors.overflow import overflow_numbers
from protocol.objects import Compaction
from tests.support.chat import Conversation

BIG = "x" * 40_000  # about 10k tokens


def test_cjk_counts_about_a_token_a_character_and_other_scripts_between() -> None:
    chinese = "我们需要把这个模块重构一下然后再运行所有测试" * 100  # 2,200 characters
    assert text_tokens(chinese) == len(chinese)  # was len / 4: 3-4x too few
    assert text_tokens("こんにちは世界") == 7 and text_tokens("안녕하세요") == 5
    russian = "Привет мир" * 10  # Cyrillic: two UTF-8 bytes a letter, spaces are ASCII
    assert text_tokens(russian) == 48  # 90 letters / 2 + 10 spaces / 4, rounded up
    assert text_tokens("abcd" * 10) == 10  # ASCII unchanged
    mixed = "def f():  # 计算总和\n"
    assert text_tokens(mixed) == 4 + 4  # 13 ASCII characters / 4 and the 4 Chinese ones, rounded up
    assert text_tokens("\ud800") >= 1  # a lone surrogate is counted, not an error


def test_calibration_follows_what_the_provider_counted_within_bounds() -> None:
    calibration = Calibration()
    assert calibration.scale(1000) == 1000
    calibration.observe(estimated=1000, reported=1333)
    assert calibration.scale(3000) == 3999
    calibration.observe(estimated=1000, reported=10**12)  # garbage: capped
    assert calibration.ratio == Calibration.MAX_RATIO
    calibration.observe(estimated=1000, reported=1)
    assert calibration.ratio == Calibration.MIN_RATIO
    calibration.observe(estimated=1000, reported=None)
    calibration.observe(estimated=0, reported=100)
    assert calibration.ratio == Calibration.MIN_RATIO


def agentic_turn(files: int) -> Conversation:
    chat = Conversation()
    chat.user("Read every file under src/ and tell me what each one does.")
    for n in range(files):
        chat.assistant(calls=[(f"c{n}", "read_file", {"path": f"src/m{n}.py"})])
        chat.results((f"c{n}", BIG))
    return chat


def test_one_long_turn_is_cut_between_a_tool_result_and_the_next_call() -> None:
    chat = agentic_turn(6)
    assert choose_cut(chat.messages, keep_recent_tokens=15_000) is None  # no user message to cut at
    first_kept = choose_cut_in_turn(chat.messages, keep_recent_tokens=15_000)
    kept = [m for m in chat.messages if m.seq >= (first_kept or 0)]
    assert kept[0].role == "assistant" and chat.messages[chat.messages.index(kept[0]) - 1].role == "tool"
    assert 15_000 <= messages_tokens(kept) < 25_000
    # The request starts with the summary as a user message of its own, then the kept exchange.
    record = Compaction(compaction_id="k", seq=chat.messages[-1].seq, trigger="threshold", summary="S",
                        first_kept_seq=first_kept or 0, tokens_before=0, tokens_after=0, model_id=None,
                        created_at="")  # fmt: skip
    request = history_for_request(chat.messages, record)
    assert [m.role for m in request[:3]] == ["user", "assistant", "tool"] and "S" in request[0].parts[0].text


def test_results_the_model_has_not_seen_are_never_folded() -> None:
    chat = agentic_turn(1)
    assert choose_cut_in_turn(chat.messages, keep_recent_tokens=100) is None
    chat.assistant("Done: it sums the items.")
    assert choose_cut_in_turn(chat.messages, keep_recent_tokens=100) == chat.messages[-1].seq  # before the answer
    assert choose_cut_in_turn(chat.messages, keep_recent_tokens=10**9) is None  # everything is recent


def test_a_finished_turn_can_be_folded_whole() -> None:
    chat = Conversation()
    chat.user("Summarize " + BIG)
    chat.assistant("Here is the summary " + BIG)
    assert choose_cut_in_turn(chat.messages, keep_recent_tokens=100) == chat.messages[-1].seq + 1


def test_tool_results_are_shortened_in_the_request_only_oldest_first() -> None:
    chat = agentic_turn(4)
    stored = [msgspec.structs.replace(m) for m in chat.messages]
    untouched, count = fit_tool_results(chat.messages, fixed_tokens=0, limit=100_000, old_cap=500)
    assert count == 0 and untouched == chat.messages
    fitted, count = fit_tool_results(chat.messages, fixed_tokens=1000, limit=25_000, old_cap=500)
    assert 1000 + messages_tokens(fitted) <= 25_000
    texts = [m.parts[0].text for m in fitted if m.role == "tool"]
    assert [len(t) < len(BIG) for t in texts] == [True, True, False, False]  # the newest two still fit whole
    assert "left out of this request" in texts[0]
    assert [m.parts for m in chat.messages] == [m.parts for m in stored]  # the history is unchanged


def test_the_latest_results_share_the_room_when_nothing_else_is_left() -> None:
    chat = Conversation()
    chat.user("read them all")
    chat.assistant(calls=[(f"c{n}", "read_file", {"path": f"f{n}"}) for n in range(15)])
    chat.results(*[(f"c{n}", BIG) for n in range(15)])
    fitted, count = fit_tool_results(chat.messages, fixed_tokens=500, limit=7_000, old_cap=256)
    assert count == 15 and 500 + messages_tokens(fitted) <= 7_000 + 15 * 60
    head_tail = fitted[-1].parts[0].text
    assert head_tail.startswith("xxx") and head_tail.endswith("xxx")


def test_shortened_keeps_head_and_tail_and_says_how_much_went() -> None:
    text = "".join(f"line {n}\n" for n in range(10_000))
    short = shortened(text, 500)
    assert short.startswith("line 0\n") and short.endswith("line 9999\n")
    assert text_tokens(short) < 700 and "characters of this tool result were left out" in short
    assert shortened("small", 500) == "small"


def test_overflow_errors_name_the_request_and_the_window() -> None:
    assert overflow_numbers(
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9,000 tokens."
    ) == (9000, 8192)
    assert overflow_numbers("prompt is too long: 213462 tokens > 200000 maximum") == (213462, 200000)
    assert overflow_numbers("prompt token count of 140000 exceeds the limit of 128000") == (140000, 128000)
    assert overflow_numbers("The input token count (1200000) exceeds the maximum number of tokens allowed "
                            "(1048576).") == (1200000, 1048576)  # fmt: skip
    assert overflow_numbers("Your input exceeds the context window of this model (400000 tokens).") == (None, 400000)
    assert overflow_numbers("the input length (9000 tokens) exceeds the context length (8192 tokens)") == (9000, 8192)
    assert overflow_numbers("request too large") == (None, None)
    assert overflow_numbers("maximum context length is 99999999999999 tokens") == (None, None)


def test_windows_learned_replace_unknown_and_larger_ones_only() -> None:
    windows = LearnedWindows()
    assert windows.window("local/a", None, "config") == (DEFAULT_WINDOW, "default")
    assert windows.window("local/a", 200_000, "config") == (200_000, "config")
    windows.learn("local/a", 8192)
    assert windows.window("local/a", None, "catalog") == (8192, "learned")
    assert windows.window("local/a", 4096, "config") == (4096, "config")
    windows.learn("local/a", 16_384)  # never grows back
    assert windows.window("local/a", None, "catalog") == (8192, "learned")
