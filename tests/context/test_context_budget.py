"""Running totals, their cost, and the sentence that ends a turn when a budget is spent."""

import pytest

from daemon.context.budget import add_cost, add_usage, budget_exceeded, tokens_spent
from protocol.objects import Budget, Cost, Usage


def test_add_usage_sums_fields_and_keeps_unreported_ones_null() -> None:
    totals = add_usage(Usage(), Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60))
    totals = add_usage(totals, Usage(input_tokens=50, output_tokens=5, reasoning_tokens=3))
    totals = add_usage(totals, None)
    assert totals == Usage(input_tokens=150, output_tokens=25, reasoning_tokens=3, cache_read_tokens=60)
    assert tokens_spent(totals) == 175


def test_add_cost_ignores_unknown_costs() -> None:
    assert add_cost(None, None) is None
    total = add_cost(None, Cost(amount=0.25))
    total = add_cost(total, None)
    total = add_cost(total, Cost(amount=0.5))
    assert total == Cost(amount=0.75, currency="USD")
    with pytest.raises(ValueError, match="cannot add EUR"):
        add_cost(total, Cost(amount=1, currency="EUR"))


def test_no_budget_or_within_budget() -> None:
    totals = Usage(input_tokens=900, output_tokens=99)
    assert budget_exceeded(totals, Cost(amount=5.0), None) is None
    assert budget_exceeded(totals, Cost(amount=0.99), Budget(max_cost=1.0, max_tokens=1000)) is None


def test_cost_budget_sentence_names_the_budget_and_the_amount_spent() -> None:
    sentence = budget_exceeded(Usage(input_tokens=1), Cost(amount=1.0234), Budget(max_cost=1.0))
    assert sentence == (
        "The session's cost budget of $1.00 is spent ($1.02 used); raise it with session/budget to continue."
    )
    assert budget_exceeded(Usage(), Cost(amount=1.0), Budget(max_cost=1.0)) is not None  # reached counts (>=)


def test_small_amounts_are_not_shown_as_zero() -> None:
    sentence = budget_exceeded(Usage(), Cost(amount=0.0051), Budget(max_cost=0.005))
    assert sentence is not None and "$0.0050 is spent ($0.0051 used)" in sentence


def test_token_budget_sentence() -> None:
    totals = Usage(input_tokens=90_000, output_tokens=10_512)
    assert budget_exceeded(totals, None, Budget(max_tokens=100_000)) == (
        "The session's token budget of 100,000 tokens is spent (100,512 used); "
        "raise it with session/budget to continue."
    )


def test_cost_budget_without_any_price_never_fires() -> None:
    assert budget_exceeded(Usage(input_tokens=10**9), None, Budget(max_cost=0.01)) is None
