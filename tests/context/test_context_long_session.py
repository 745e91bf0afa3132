"""The pure core composed: a 40-turn session with tool output on an 8k window stays under the window.

This drives only daemon.context (no provider, no store): after each turn the next request is
estimated, and when it crosses the threshold a cut is chosen, the summarizer's request is
built (and must fit), a summary of realistic size stands in for the model's answer, and the
request after the compaction must shrink and fit. Every message stays in the list.
"""

from daemon.context.cut import choose_cut
from daemon.context.estimate import request_estimate
from daemon.context.history import compaction_shrinks, history_for_request
from daemon.context.summary import summary_request
from daemon.context.window import effective_keep_recent, needs_compaction
from protocol.objects import Compaction
from tests.support.chat import Conversation

WINDOW = 8_000
RESERVE = 20_000  # the default: capped to half the window
KEEP_RECENT = 20_000  # the default: capped to a quarter of the window
SUMMARY_OUTPUT = 1_000  # room the summarizer keeps for its answer
SYSTEM = "You are a coding assistant. " * 20


def test_forty_turns_on_an_8k_window_never_overflow_and_lose_no_message() -> None:
    chat = Conversation()
    compaction: Compaction | None = None
    record: list[tuple[int, int, int]] = []  # (turn, tokens_before, tokens_after)
    for turn in range(40):
        chat.user(f"Turn {turn}: look at module {turn} and fix what is wrong.")
        chat.assistant(f"Reading module {turn}.", thinking="Let me look. " * 20,
                       calls=[(f"c{turn}", "read_file", {"path": f"src/m{turn}.py"})])  # fmt: skip
        chat.results((f"c{turn}", f"def f{turn}():\n" + "    pass  # code line\n" * 60))
        chat.assistant(f"Module {turn} is fixed.")
        estimate = request_estimate(SYSTEM, [], history_for_request(chat.messages, compaction, strip_thinking=True))
        if not needs_compaction(estimate, WINDOW, RESERVE):
            continue
        live = [m for m in chat.messages if compaction is None or m.seq >= compaction.first_kept_seq]
        first_kept = choose_cut(live, effective_keep_recent(WINDOW, KEEP_RECENT))
        assert first_kept is not None, f"turn {turn}: nothing to fold at {estimate} tokens"
        folded = [m for m in live if m.seq < first_kept.seq]
        request = summary_request(
            folded,
            previous_summary=compaction.summary if compaction else None,
            context_window=WINDOW,
            max_output_tokens=SUMMARY_OUTPUT,
        )
        assert request.fits
        summary = "## Goal\nFix every module.\n## Progress\n" + "".join(f"- [x] m{n}\n" for n in range(turn + 1))
        candidate = Compaction(
            compaction_id=f"k{turn}", seq=chat.messages[-1].seq, trigger="threshold", summary=summary,
            first_kept_seq=first_kept.seq, tokens_before=estimate, tokens_after=0, model_id=None, created_at="",
        )  # fmt: skip
        after = request_estimate(SYSTEM, [], history_for_request(chat.messages, candidate, strip_thinking=True))
        assert compaction_shrinks(estimate, after)
        assert after <= WINDOW - WINDOW // 2, f"turn {turn}: {after} tokens after compacting"
        compaction = candidate
        record.append((turn, estimate, after))
    assert len(chat.messages) == 160 and [m.seq for m in chat.messages] == list(range(1, 161))
    assert len(record) >= 5, record
    print("compactions (turn, tokens_before, tokens_after):", record)
