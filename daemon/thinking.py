"""Thinking levels: parsing what the user typed, and resolving it honestly for one model.

This module owns the unified level scale, its aliases, ``ThinkingControl`` (how one model
lets its thinking be steered) and ``resolve_thinking``, a pure function that turns a
requested level into the wire ``Thinking``: the level that will really be used, why it
differs from the request, and the exact provider-side JSON fragment the adapter merges
into its request body (``request_params``). Adapters send that fragment as given, so what
a client sees in ``Thinking`` is what goes over the wire.

Resolution rules (PROTOCOL.md "Thinking levels"):

* a level the model accepts passes through;
* a model without thinking is always ``off`` (with a reason when more was asked);
* ``off`` on a model that cannot disable thinking becomes its lowest level;
* any other unsupported level becomes the nearest supported level below it, else the
  nearest above. ``off`` is never the fallback for a thinking request: asking for a
  little thinking and silently getting none would be the least honest answer.

Budget models map levels onto their ``[budget_min, budget_max]`` range by these
fractions of the span (``budget = min + fraction * (max - min)``, rounded down)::

    minimal  0      (= budget_min)
    low      1/8
    medium   1/4
    high     1/2
    max      1      (= budget_max)

Doubling steps rather than even quarters: with quarters "low" would already be ~15k
tokens on a model with a 64k output limit, far above what vendors suggest (2-4k, or 1k);
doubling keeps low/medium/high near their guidance (e.g. a 1024..55808 range gives
1024 / 7872 / 14720 / 28416 / 55808).

Where a budget must stay below ``max_tokens``, which caps the thinking *and* the answer
(``budget_and_max_tokens``), the fragment carries ``max_tokens = max(16000, budget + 8192)``
capped at the model's output limit, and the budget shrinks when a model's output limit
leaves less than 8192 tokens of room for the answer.

The fragment builders themselves, one per API spelling (``ThinkingControl.param``), are
``daemon.providers.thinking_params``'s: how a vendor spells a level is the provider's fact.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from daemon.errors import InvalidParams
from protocol.objects import Thinking

if TYPE_CHECKING:
    from daemon.model_spec import ModelSpec

LEVELS: tuple[str, ...] = ("off", "minimal", "low", "medium", "high", "max")
ALIASES: dict[str, str] = {"none": "off", "med": "medium", "xhigh": "max", "default": "default", "auto": "default"}
ALLOWED_LEVEL_NAMES: list[str] = [*LEVELS, *ALIASES]

BUDGET_FRACTIONS: dict[str, Fraction] = {
    "minimal": Fraction(0),
    "low": Fraction(1, 8),
    "medium": Fraction(1, 4),
    "high": Fraction(1, 2),
    "max": Fraction(1),
}
# The max_tokens an adapter asks for by default; a budget fragment never asks for less.
BASE_MAX_TOKENS = 16000
# Tokens left for the visible answer on top of the thinking budget.
ANSWER_ROOM = 8192
# Budget ceiling for a budget model whose output limit nobody told us.
FALLBACK_BUDGET_MAX = 32768

KINDS = ("effort", "budget", "adaptive", "toggle", "level", "none")


def parse_level(text: object, path: str = "$.level") -> str:
    """The canonical level for ``text`` (aliases folded, case and spaces ignored), or ``"default"``.

    Raises ``InvalidParams`` (with ``allowed``) for anything else.
    """
    if isinstance(text, str):
        key = text.strip().lower()
        if key in LEVELS:
            return key
        if key in ALIASES:
            return ALIASES[key]
    shown = text if isinstance(text, str) else type(text).__name__
    raise InvalidParams(
        f"Unknown thinking level {shown!r}; use one of {', '.join(ALLOWED_LEVEL_NAMES)}.",
        path=path,
        allowed=list(ALLOWED_LEVEL_NAMES),
    )


@dataclass(frozen=True)
class ThinkingControl:
    """How one model lets its thinking be steered, and which request fragment does it.

    ``kind`` says what the knob is (effort / budget / adaptive / toggle / level / none);
    ``param`` picks the fragment builder (``daemon.providers.thinking_params.FRAGMENTS``) since one kind is spelled
    differently by each API. ``levels`` are the unified levels the model really accepts,
    in order; it contains ``off`` only if the model can run without thinking.
    """

    kind: str = "none"
    param: str = "none"
    levels: tuple[str, ...] = ("off",)
    default: str = "off"
    # Unified level -> the provider's own value (effort name, thinkingLevel, think value).
    # A level missing here is sent under its own name.
    values: Mapping[str, str] = field(default_factory=dict, hash=False)
    budget_min: int | None = None
    budget_max: int | None = None  # None: derived from the model's output limit
    # Who imposes a ceiling below the model's own, e.g. a vendor's proxy; used in reasons.
    limited_by: str | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert list(self.levels) == sorted(self.levels, key=LEVELS.index), self.levels
        assert self.default in self.levels, (self.default, self.levels)

    @property
    def can_disable(self) -> bool:
        return "off" in self.levels

    @property
    def thinking_levels(self) -> tuple[str, ...]:
        """The levels that think (everything but ``off``)."""
        return tuple(level for level in self.levels if level != "off")

    def value(self, level: str) -> str:
        return self.values.get(level, level)


NO_THINKING = ThinkingControl()


def nearest_level(levels: tuple[str, ...] | list[str], requested: str) -> str:
    """The level ``requested`` resolves to among ``levels`` (the rules in the module docstring)."""
    if requested in levels:
        return requested
    thinking = [level for level in levels if level != "off"]
    if not thinking:
        return "off"
    if requested == "off":
        return thinking[0]
    rank = LEVELS.index(requested)
    below = [level for level in thinking if LEVELS.index(level) < rank]
    return below[-1] if below else thinking[0]


def resolve_thinking(spec: "ModelSpec", requested: str, *, default_level: str | None = None) -> Thinking:
    """What ``requested`` (a level, alias or ``"default"``) really means for ``spec``.

    ``default_level`` replaces the model's own default for ``"default"`` (the catalogue
    passes the provider's configured default); ``requested`` in the result then records
    the level that ``"default"`` stood for. Pure: no I/O, no clock, no configuration.
    """
    control = spec.thinking
    level = parse_level(requested)
    if level == "default":
        level = parse_level(default_level) if default_level else control.default
        if level == "default":
            level = control.default
    effective = nearest_level(control.levels, level)
    from daemon.providers.thinking_params import FRAGMENTS  # it builds on this module's budgets

    params, budget = FRAGMENTS[control.param](spec, effective)
    return Thinking(
        requested=level,  # type: ignore[arg-type]
        effective=effective,  # type: ignore[arg-type]
        supported=list(control.levels),  # type: ignore[arg-type]
        reason=_reason(spec, level, effective),
        budget_tokens=budget,
        request_params=params,
    )


def _reason(spec: "ModelSpec", requested: str, effective: str) -> str | None:
    if requested == effective:
        return None
    control, name = spec.thinking, spec.id
    if not control.thinking_levels:
        return f"{name} has no thinking mode; using 'off'."
    if requested == "off":
        if control.limited_by:
            return f"{control.limited_by} cannot turn thinking off for {name}; using its lowest level {effective!r}."
        return f"{name} cannot turn thinking off; using its lowest level {effective!r}."
    if control.kind == "toggle" and len(control.thinking_levels) == 1:
        return f"{name} can only switch thinking on or off; {effective!r} stands for on."
    above = LEVELS.index(requested) > LEVELS.index(effective)
    if above and control.limited_by and effective == control.thinking_levels[-1]:
        return f"{control.limited_by} does not accept {requested!r}; clamped to {effective!r}."
    side = "below" if above else "above"
    return f"{name} cannot take {requested!r}; using {effective!r}, the nearest supported level {side}."


# --- budgets -------------------------------------------------------------------------


def _budget_range(spec: "ModelSpec") -> tuple[int, int]:
    control = spec.thinking
    low = control.budget_min if control.budget_min is not None else 1024
    high = control.budget_max
    if high is None:
        high = spec.max_output_tokens - ANSWER_ROOM if spec.max_output_tokens else FALLBACK_BUDGET_MAX
    return low, max(low, high)


def budget_for(spec: "ModelSpec", level: str) -> int:
    low, high = _budget_range(spec)
    return low + int((high - low) * BUDGET_FRACTIONS[level])


def budget_and_max_tokens(spec: "ModelSpec", level: str) -> tuple[int, int]:
    """A budget and a ``max_tokens`` above it with room for the answer, within the output cap."""
    budget = budget_for(spec, level)
    cap = spec.max_output_tokens
    max_tokens = max(BASE_MAX_TOKENS, budget + ANSWER_ROOM)
    if cap:
        max_tokens = min(max_tokens, cap)
        # Shrink the budget rather than overflow the output cap; keep half the cap for
        # the answer if the cap is too small for the usual room.
        budget = min(budget, max_tokens - min(ANSWER_ROOM, max_tokens // 2))
    return budget, max_tokens
