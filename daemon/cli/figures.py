"""Figures as a person reads them: a session's context fill, its cost, a compaction's before and after."""

from typing import Any

from daemon.cli.wording import for_person


def usage_line(session: dict[str, Any]) -> str | None:
    """``Context: 12,340 / 200,000 tokens · $0.0123`` (the session's cost so far), or None before any model call."""
    context = session.get("context")
    if not context:
        return None
    window = f" / {context['size']:,}" if context.get("size") else ""
    cost = session.get("cost")
    spent = "no price known" if cost is None else money(cost)
    return f"Context: {context['used']:,}{window} tokens · {spent}"


def money(cost: dict[str, Any]) -> str:
    amount, currency = cost["amount"], cost["currency"]
    if currency != "USD":
        return f"{amount:,.4f} {currency}"
    return f"${amount:,.4f}" if amount < 1 else f"${amount:,.2f}"


def compaction_result(end: dict[str, Any], before: int) -> str:
    """How a compaction ended, before and after in the same measure (the request's estimate)."""
    if end["status"] == "completed":
        after = end["tokens_after"]
        smaller = f" ({100 - round(100 * after / before)}% smaller)" if before else ""
        return f"compacted: about {before:,} → {after:,} tokens{smaller}."
    if end["status"] == "skipped":
        return "nothing to compact yet: the conversation is all recent."
    error = (end.get("error") or {}).get("message") or end["status"]
    return f"the compaction {end['status']}: {for_person(error)}"
