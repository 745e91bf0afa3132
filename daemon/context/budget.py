"""A session's running totals, their cost, and whether its budget is spent.

Totals add up every model call of the session, summaries included (PROTOCOL "Context,
cost and compaction"). ``max_tokens`` counts ``totals.input_tokens + totals.output_tokens``;
``max_cost`` counts ``totals_cost`` in USD. A budget is spent when a total has reached it
(≥); the turn then ends with ``stop_reason: "budget"`` before its next model call, with the
sentence ``budget_exceeded`` gives.

A call whose price is unknown adds nothing to ``totals_cost`` (it stays null until some call
has a price): a cost budget cannot see what no price describes, so on a model without a price
it counts as spent, with a sentence saying how to set one (never silently void).
"""

from protocol.objects import Budget, Cost, Usage


def add_usage(totals: Usage, usage: Usage | None) -> Usage:
    """``totals`` plus one call's ``usage``; a field stays null until some call reports it."""
    if usage is None:
        return totals
    return Usage(
        input_tokens=_plus(totals.input_tokens, usage.input_tokens),
        output_tokens=_plus(totals.output_tokens, usage.output_tokens),
        reasoning_tokens=_plus(totals.reasoning_tokens, usage.reasoning_tokens),
        cache_read_tokens=_plus(totals.cache_read_tokens, usage.cache_read_tokens),
        cache_write_tokens=_plus(totals.cache_write_tokens, usage.cache_write_tokens),
    )


def _plus(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def add_cost(total: Cost | None, cost: Cost | None) -> Cost | None:
    """The running cost plus one call's; unknown costs add nothing."""
    if cost is None:
        return total
    if total is None:
        return Cost(amount=cost.amount, currency=cost.currency)
    if total.currency != cost.currency:
        raise ValueError(f"cannot add {cost.currency} to a total in {total.currency}")
    return Cost(amount=total.amount + cost.amount, currency=total.currency)


def tokens_spent(totals: Usage) -> int:
    return (totals.input_tokens or 0) + (totals.output_tokens or 0)


def budget_exceeded(
    totals: Usage, totals_cost: Cost | None, budget: Budget | None, *, priced: bool = True, model_id: str = ""
) -> str | None:
    """The sentence saying which budget is spent and how much was used, or None while within it.

    ``priced``: whether the session's model has a known price. A cost budget on a model without one
    could never be reached, so it counts as spent (never silently void), with a sentence saying how
    to set a price. Before any priced call the cost spent is 0: ``max_cost: 0`` allows no call.
    """
    if budget is None:
        return None
    if budget.max_cost is not None and not priced:
        return (
            f"The session's cost budget of {_usd(budget.max_cost)} cannot be kept: ponder knows no price for "
            f"{model_id or 'its model'}. Set one in config.toml (price = {{input = ..., output = ...}} in USD per "
            "million tokens on the model's [[providers.NAME.models]] entry), or use a token budget (max_tokens) "
            "with session/budget."
        )
    spent_cost = totals_cost.amount if totals_cost is not None else 0.0
    if budget.max_cost is not None and spent_cost >= budget.max_cost:
        return (
            f"The session's cost budget of {_usd(budget.max_cost)} is spent ({_usd(spent_cost)} used); "
            "raise it with session/budget to continue."
        )
    if budget.max_tokens is not None and tokens_spent(totals) >= budget.max_tokens:
        return (
            f"The session's token budget of {budget.max_tokens:,} tokens is spent "
            f"({tokens_spent(totals):,} used); raise it with session/budget to continue."
        )
    return None


def _usd(amount: float) -> str:
    # Cents, unless the amount is below a cent: a $0.004 budget must not read "$0.00".
    return f"${amount:,.2f}" if amount == 0 or amount >= 0.01 else f"${amount:.4f}"
