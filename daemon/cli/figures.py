"""Figures as a person reads them: a session's context fill, its token totals and its cost."""

from typing import Any


def usage_line(session: dict[str, Any]) -> str | None:
    """``Context: 12,340 / 200,000 tokens · $0.0123`` (the session's cost so far), or None before any model call."""
    context = session.get("context")
    if not context:
        return None
    window = f" / {context['size']:,}" if context.get("size") else ""
    cost = session.get("cost")
    spent = "no price known" if cost is None else money(cost)
    return f"Context: {context['used']:,}{window} tokens · {spent}"


def totals_text(session: dict[str, Any]) -> str:
    """A session's running totals for ``ponder sessions``: tokens in and out, and their cost."""
    totals = session.get("totals") or {}
    tokens = (totals.get("input_tokens") or 0) + (totals.get("output_tokens") or 0)
    cost = session.get("cost")
    return f"{tokens:>11,} tokens {money(cost) if cost is not None else '-':>9}"


def money(cost: dict[str, Any]) -> str:
    amount, currency = cost["amount"], cost["currency"]
    if currency != "USD":
        return f"{amount:,.4f} {currency}"
    return f"${amount:,.4f}" if amount < 1 else f"${amount:,.2f}"
