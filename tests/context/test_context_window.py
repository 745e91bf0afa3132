"""When to compact, capped reserves on small windows, and the thinking budget near the limit."""

from daemon.context.window import (
    context_fill,
    effective_keep_recent,
    effective_reserve,
    fit_thinking_budget,
    needs_compaction,
)
from protocol.objects import ContextFill, Usage


def test_threshold_is_window_minus_reserve() -> None:
    assert not needs_compaction(180_000, 200_000, 20_000)
    assert needs_compaction(180_001, 200_000, 20_000)
    assert not needs_compaction(10**9, None, 20_000)  # unknown window: only an overflow can tell


def test_defaults_on_a_small_window_are_capped() -> None:
    assert effective_reserve(8_000, 20_000) == 4_000
    assert not needs_compaction(3_900, 8_000, 20_000)  # uncapped, every request would compact
    assert needs_compaction(4_100, 8_000, 20_000)
    assert effective_keep_recent(8_000, 20_000) == 2_000
    assert effective_keep_recent(None, 20_000) == 20_000
    assert effective_reserve(200_000, 20_000) == 20_000


def test_thinking_budget_unchanged_when_it_fits() -> None:
    args = {"budget_min": 1024, "answer_tokens": 8_000, "context_window": 200_000}
    assert fit_thinking_budget(budget_tokens=32_000, request_estimate=100_000, **args) == (32_000, None)
    assert fit_thinking_budget(budget_tokens=32_000, request_estimate=10**6, budget_min=1024, answer_tokens=0,
                               context_window=None) == (32_000, None)  # fmt: skip


def test_thinking_budget_shrinks_near_the_limit_with_a_reason() -> None:
    budget, reason = fit_thinking_budget(
        budget_tokens=32_000, budget_min=1024, answer_tokens=8_000, request_estimate=180_000, context_window=200_000
    )
    assert budget == 12_000
    assert reason == (
        "The thinking budget was lowered from 32,000 to 12,000 tokens so that it and the answer fit the "
        "200,000-token context window (about 180,000 tokens in use)."
    )


def test_thinking_budget_never_below_the_minimum() -> None:
    budget, reason = fit_thinking_budget(
        budget_tokens=32_000, budget_min=1024, answer_tokens=8_000, request_estimate=199_000, context_window=200_000
    )
    assert budget == 1024
    assert reason is not None and "minimum of 1,024 tokens" in reason and "compacting the session" in reason


def test_context_fill_is_the_request_plus_its_reply() -> None:
    usage = Usage(input_tokens=7_000, output_tokens=500, cache_read_tokens=6_000, reasoning_tokens=200)
    assert context_fill(usage, 8_192) == ContextFill(used=7_500, size=8_192)
    assert context_fill(Usage(), 8_192) is None
    assert context_fill(None, None) is None
    assert context_fill(Usage(output_tokens=3), None) == ContextFill(used=3, size=None)
