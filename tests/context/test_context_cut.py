"""Where a compaction cuts: before a user message, never inside a tool exchange, keeping ~keep_recent_tokens."""

from daemon.context.cut import choose_cut
from daemon.context.estimate import message_tokens
from tests.support.chat import Conversation

BIG = "x" * 4000  # about 1000 tokens


def turns(count: int) -> Conversation:
    chat = Conversation()
    for n in range(count):
        chat.user(f"question {n} {BIG}")
        chat.assistant(f"answer {n} {BIG}")
    return chat


def test_keeps_about_keep_recent_tokens_and_cuts_before_a_user_message() -> None:
    chat = turns(10)  # 20 messages of ~1000 tokens
    first = choose_cut(chat.messages, keep_recent_tokens=3500)
    assert first is not None and first.role == "user"
    kept = chat.messages[chat.messages.index(first) :]
    kept_tokens = sum(message_tokens(m) for m in kept)
    assert kept_tokens >= 3500  # at least the recent budget (snapped back to a user message)
    assert kept_tokens - message_tokens(kept[0]) - message_tokens(kept[1]) < 3500  # ... but not a turn more
    assert first.seq == 17  # user messages are seq 1, 3, ..., 19; the last four messages reach 3500


def test_nothing_old_enough_when_everything_is_recent() -> None:
    chat = turns(3)
    assert choose_cut(chat.messages, keep_recent_tokens=100_000) is None
    assert choose_cut([], keep_recent_tokens=0) is None


def test_single_turn_cannot_be_folded() -> None:
    chat = Conversation()
    chat.user("do it")
    for n in range(10):
        chat.assistant(calls=[(f"c{n}", "read_file", {"path": f"f{n}.py"})])
        chat.results((f"c{n}", BIG))
    assert choose_cut(chat.messages, keep_recent_tokens=1000) is None  # the only user message is the first


def test_when_the_recent_part_is_one_long_turn_the_cut_keeps_less() -> None:
    chat = turns(2)
    last_user = chat.user("now the long one")
    for n in range(10):
        chat.assistant(calls=[(f"c{n}", "read_file", {"path": f"f{n}.py"})])
        chat.results((f"c{n}", BIG))
    # The last turn alone is ~10k tokens; keeping 15k would need the earlier turns, cutting before
    # seq 3 keeps more; keeping 12k: at-or-before snapping reaches seq 3.
    assert choose_cut(chat.messages, keep_recent_tokens=12_000) == chat.messages[2]
    # Keeping 3k: the reach lies inside the long turn; the user message that starts it is the cut.
    assert choose_cut(chat.messages, keep_recent_tokens=3000) == last_user


def test_never_between_a_tool_call_and_its_result() -> None:
    chat = Conversation()
    chat.user("start " + BIG)
    chat.assistant(calls=[("c1", "run_command", {"command": "make"})])
    # A user message typed while the tool ran (stored before the result arrived).
    interjection = chat.user("also check the docs " + BIG)
    chat.results(("c1", BIG))
    after = chat.user("next " + BIG)
    chat.assistant("done " + BIG)
    cut = choose_cut(chat.messages, keep_recent_tokens=2500)
    assert cut is not interjection
    assert cut == after


def test_an_unanswered_call_does_not_block_a_cut() -> None:
    chat = Conversation()
    chat.user("start " + BIG)
    chat.assistant(calls=[("lost", "run_command", {"command": "sleep 99"})])  # interrupted: no result stored
    kept = chat.user("again " + BIG)
    chat.assistant("ok " + BIG)
    assert choose_cut(chat.messages, keep_recent_tokens=1500) == kept


def test_zero_keep_recent_cuts_at_the_last_user_message() -> None:
    chat = turns(3)
    assert choose_cut(chat.messages, keep_recent_tokens=0) == chat.messages[-2]
