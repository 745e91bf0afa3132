"""Thinking budgets and output limits: what a level costs on a model.

Budget models map levels onto their ``[budget_min, budget_max]`` range by these
fractions of the span (``budget = min + fraction * (max - min)``, rounded down)::

    minimal  0      (= budget_min)
    low      1/8
    medium   1/4
    high     1/2
    xhigh    3/4
    max      1      (= budget_max)

Doubling steps rather than even quarters: with quarters "low" would already be ~15k
tokens on a model with a 64k output limit, far above what vendors suggest (2-4k, or 1k);
doubling keeps low/medium/high near their guidance (e.g. a 1024..55808 range gives
1024 / 7872 / 14720 / 28416 / 42112 / 55808).

Reasoning eats the output budget: a thinking level raises the request's output limit
with it (``output_limit``), up to the model's limit, and the fragment carries it.

Where a budget must stay below ``max_tokens``, which caps the thinking *and* the answer
(``budget_and_max_tokens``), the fragment carries ``max_tokens = max(16000, budget + 8192)``
capped at the model's output limit, and the budget shrinks when a model's output limit
leaves less than 8192 tokens of room for the answer.

Pure: the thinking decision (``daemon.catalog.decide``) and the providers' fragment
builders (``daemon.vendors.thinking_params``) both read these.
"""

from daemon.models.spec import ModelSpec

__all__ = [
    "ANSWER_ROOM",
    "BASE_MAX_TOKENS",
    "FALLBACK_BUDGET_MAX",
    "budget_and_max_tokens",
    "budget_for",
    "budget_range",
    "output_limit",
]

# The docstring's fractions of the span, in eighths (all of them are): ``span * eighths // 8`` is
# the exact share rounded down, as ``int(span * Fraction(eighths, 8))`` was for the non-negative
# spans and limits it is applied to, without importing ``fractions`` (~4 M instructions on the
# first session/start).
BUDGET_EIGHTHS: dict[str, int] = {
    "minimal": 0,
    "low": 1,
    "medium": 2,
    "high": 4,
    "xhigh": 6,
    "max": 8,
}
# Share of the model's output limit an effort level asks for, in eighths (never below
# BASE_MAX_TOKENS): a higher effort thinks longer, and the thinking counts against the same limit.
OUTPUT_EIGHTHS: dict[str, int] = {
    "minimal": 0,
    "low": 0,
    "medium": 2,
    "high": 4,
    "xhigh": 6,
    "max": 8,
}
# The max_tokens an adapter asks for by default; a budget fragment never asks for less.
BASE_MAX_TOKENS = 16000
# Tokens left for the visible answer on top of the thinking budget.
ANSWER_ROOM = 8192
# Budget ceiling for a budget model whose output limit nobody told us.
FALLBACK_BUDGET_MAX = 32768


def budget_range(spec: ModelSpec) -> tuple[int, int]:
    """The ``[min, max]`` thinking budget of a budget-mode model."""
    control = spec.thinking
    low = control.budget_min if control.budget_min is not None else 1024
    high = control.budget_max
    if high is None:
        high = spec.max_output_tokens - ANSWER_ROOM if spec.max_output_tokens else FALLBACK_BUDGET_MAX
    return low, max(low, high)


def budget_for(spec: ModelSpec, level: str, override: int | None = None) -> int:
    """The budget ``level`` stands for on ``spec``, or ``override`` (already clamped) when given."""
    if override is not None:
        return override
    low, high = budget_range(spec)
    return low + (high - low) * BUDGET_EIGHTHS[level] // 8


def budget_and_max_tokens(spec: ModelSpec, level: str, override: int | None = None) -> tuple[int, int]:
    """A budget and a ``max_tokens`` above it with room for the answer, within the output cap."""
    budget = budget_for(spec, level, override)
    cap = spec.max_output_tokens
    max_tokens = max(BASE_MAX_TOKENS, budget + ANSWER_ROOM)
    if cap:
        max_tokens = min(max_tokens, cap)
        # Shrink the budget rather than overflow the output cap; keep half the cap for
        # the answer if the cap is too small for the usual room.
        budget = min(budget, max_tokens - min(ANSWER_ROOM, max_tokens // 2))
    return budget, max_tokens


def output_limit(spec: ModelSpec, level: str) -> int | None:
    """The output limit to ask for at an effort ``level``: a share of the model's limit, at least
    ``BASE_MAX_TOKENS``, never above the model's limit; None when the model's limit is unknown."""
    cap = spec.max_output_tokens
    if not cap or level == "off":
        return None
    return min(cap, max(BASE_MAX_TOKENS, cap * OUTPUT_EIGHTHS[level] // 8))
