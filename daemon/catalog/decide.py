"""The thinking decision: a requested level resolved honestly for one model.

``decide_thinking`` is a pure function that turns a requested level into the wire
``Thinking``: the level that will really be used, why it differs from the request, and the
exact provider-side JSON fragment the adapter merges into its request body
(``request_params``). Adapters send that fragment as given, so what a client sees in
``Thinking`` is what goes over the wire. It is the full decision of PROTOCOL.md "Thinking
controls": the level (with ``default`` followed through the defaults chain and its
``source`` recorded), the fallback policy, the display switch, a custom budget, and what a
provider's rejection taught us (``daemon.catalog.learned.LearnedLevels``).

Resolution rules (PROTOCOL.md "Thinking levels", fallback ``nearest``):

* a level the model accepts passes through;
* a model without thinking is always ``off`` (with a reason when more was asked);
* ``off`` on a model that cannot disable thinking becomes its lowest level;
* any other unsupported level becomes the nearest supported level below it, else the
  nearest above. ``off`` is never the fallback for a thinking request: asking for a
  little thinking and silently getting none would be the least honest answer.

The other policies: ``off`` runs without thinking where the model can (else as
``nearest``); ``default`` uses the model's default; ``error`` refuses an unsupported level
the client asked for by name (``UnsupportedThinkingLevel``, -32602 with ``allowed``). A
level that came from the defaults chain is never refused: nobody asked for it by name,
and refusing it would make the model unusable; it falls back as ``nearest``.

The level names, aliases and the nearest-level rule are ``daemon.models.levels``'s; budgets
and output limits per level are ``daemon.models.budgets``'s. The fragment builders
themselves, one per API spelling (``ThinkingControl.param``), are
``daemon.vendors.thinking_params``'s: how a vendor spells a level is a vendor fact.
"""

import msgspec

from daemon.catalog.learned import LearnedLevels
from daemon.errors import InvalidParams, UnsupportedThinkingLevel
from daemon.models.budgets import budget_range
from daemon.models.levels import level_of_scale, nearest_level, parse_level
from daemon.models.spec import LEVELS, ModelSpec, ThinkingControl
from protocol.objects import Thinking, ThinkingDisplay, ThinkingFallback, ThinkingSource

__all__ = ["ThinkingDefaults", "decide_thinking", "follow_defaults", "with_budget"]


class ThinkingDefaults(msgspec.Struct, frozen=True):
    """The defaults chain for a requested level of ``default``: config, then provider, then the model.

    Each is the raw configured text (None when unset); one that does not parse is skipped
    (config loading reports it).
    """

    config: str | None = None  # [defaults] thinking_level
    provider: str | None = None  # [providers.X] default_thinking_level


NO_DEFAULTS = ThinkingDefaults()  # nothing configured: the model's own default


def follow_defaults(control: ThinkingControl, defaults: ThinkingDefaults) -> tuple[str, ThinkingSource]:
    """The level ``default`` stands for, and which link of the chain gave it."""
    chain: tuple[tuple[str | None, ThinkingSource], ...] = (
        (defaults.config, "config_default"),
        (defaults.provider, "provider_default"),
    )
    for text, source in chain:
        if not text:
            continue
        try:
            level = parse_level(text)
        except InvalidParams:
            continue
        if level != "default":
            return level, source
    return control.default, "model_default"


def decide_thinking(
    spec: ModelSpec,
    requested: str = "default",
    *,
    display: ThinkingDisplay = "summarized",
    budget_tokens: int | None = None,
    fallback: ThinkingFallback = "nearest",
    defaults: ThinkingDefaults = NO_DEFAULTS,
    source: ThinkingSource = "session",
    learned: LearnedLevels | None = None,
) -> Thinking:
    """The whole thinking decision for one request to ``spec``; pure (no I/O, no clock, no config).

    ``requested`` is a level or alias, or ``"default"`` (then the defaults chain decides and
    ``source`` says which link; ``Thinking.requested`` stays ``"default"``); ``source`` is
    where an explicit level came from (``session`` or ``prompt``). ``budget_tokens``
    overrides the level's budget on budget-mode models (clamped to the model's range),
    and is kept but not sent on the others; either way ``reason`` says so. ``learned``
    narrows the catalogue's levels by what the provider told us.

    Raises ``InvalidParams`` for an unknown level, ``UnsupportedThinkingLevel`` under
    ``fallback="error"`` for an explicit level the model does not take.
    """
    # The vendors' spellings load with the first decision, not on the start-up path.
    from daemon.vendors.thinking_params import DISPLAY_SWITCHES, FRAGMENTS

    control = spec.thinking
    asked = parse_level(requested)
    if asked == "default":
        level, source = follow_defaults(control, defaults)
    else:
        level = asked
    supported = control.levels
    learned_note = None
    if learned is not None and learned.knows(spec.id):
        narrowed = learned.narrow(spec.id, supported)
        if narrowed != supported:
            supported = narrowed
            learned_note = f"{spec.id} refused levels outside {', '.join(supported)} earlier; offering only those."
    effective = _apply_fallback(spec, level, supported, fallback, explicit=asked != "default")
    notes: list[str] = []
    level_reason = _reason(spec, level, effective, supported, fallback)
    if level_reason:
        notes.append(level_reason)
    if learned_note and level not in supported:  # what the provider told us changed this decision
        notes.append(learned_note)
    budget = None
    if budget_tokens is not None and effective != "off":
        budget, budget_note = _custom_budget(spec, budget_tokens)
        if budget_note:
            notes.append(budget_note)
    elif budget_tokens is not None:
        notes.append(f"No thinking is sent, so the budget of {budget_tokens} tokens is kept but not used.")
    params, budget_sent = FRAGMENTS[control.param](spec, effective, display, budget)
    floor = budget_range(spec)[0] if control.takes_budget else None
    low = floor is not None and budget_sent is not None and budget_sent < floor
    if low and effective != "off" and "off" in control.levels:
        # The model's output limit leaves less room for thinking than the provider takes at least:
        # a request with that budget would be refused, so the model runs without thinking.
        notes.append(
            f"{spec.id}'s output limit of {spec.max_output_tokens:,} tokens leaves {budget_sent:,} tokens for "
            f"thinking, below the provider's minimum of {floor:,}; thinking is off."
        )
        effective = "off"
        params, budget_sent = FRAGMENTS[control.param](spec, effective, display, None)
    if control.limited_by and control.takes_budget and effective == "max" and budget_sent is not None:
        notes.append(f"{control.limited_by} limits {spec.id}'s thinking budget; 'max' sends {budget_sent} tokens.")
    switch = DISPLAY_SWITCHES[control.param]
    if effective != "off":
        display_note = _display_note(spec, switch, display)
        if display_note:
            notes.append(display_note)
    return Thinking(
        requested=asked,
        effective=effective,  # type: ignore[arg-type]  # a level of the scale by construction
        supported=[level_of_scale(name) for name in supported],
        reason=" ".join(notes) or None,
        budget_tokens=budget_sent,
        request_params=params,
        display=display,
        source=source,
        fallback=fallback,
    )


def _apply_fallback(
    spec: ModelSpec, level: str, supported: tuple[str, ...], fallback: ThinkingFallback, *, explicit: bool
) -> str:
    if level in supported:
        return level
    if fallback == "error" and explicit:
        raise UnsupportedThinkingLevel(spec.id, level, list(supported))
    if fallback == "off" and "off" in supported:
        return "off"
    if fallback == "default":
        return nearest_level(supported, spec.thinking.default)
    return nearest_level(supported, level)


def _reason(spec: ModelSpec, requested: str, effective: str, levels: tuple[str, ...], policy: str) -> str | None:
    if requested == effective:
        return None
    control, name = spec.thinking, spec.id
    thinking_levels = [level for level in levels if level != "off"]
    if not thinking_levels:
        return f"{name} has no thinking mode; using 'off'."
    if policy == "off" and effective == "off":
        return f"{name} cannot take {requested!r}; running without thinking (fallback 'off')."
    if policy == "default" and effective == nearest_level(levels, control.default):
        cannot = "cannot turn thinking off" if requested == "off" else f"cannot take {requested!r}"
        return f"{name} {cannot}; using its default {effective!r} (fallback 'default')."
    if requested == "off":
        if control.limited_by:
            return f"{control.limited_by} cannot turn thinking off for {name}; using its lowest level {effective!r}."
        return f"{name} cannot turn thinking off; using its lowest level {effective!r}."
    if control.kind == "toggle" and len(thinking_levels) == 1:
        return f"{name} can only switch thinking on or off; {effective!r} stands for on."
    above = LEVELS.index(requested) > LEVELS.index(effective)
    if above and control.limited_by and effective == thinking_levels[-1]:
        return f"{control.limited_by} does not accept {requested!r} for {name}; clamped to {effective!r}."
    side = "below" if above else "above"
    return f"{name} cannot take {requested!r}; using {effective!r}, the nearest supported level {side}."


def _custom_budget(spec: ModelSpec, wanted: int) -> tuple[int | None, str | None]:
    """The budget to send for a custom ``budget_tokens`` (None: not a budget model) and why it differs."""
    if not spec.thinking.takes_budget:
        return None, (
            f"{spec.id} sets thinking by level, not by a token budget; "
            f"the budget of {wanted} tokens is kept for budget models and not sent."
        )
    low, high = budget_range(spec)
    clamped = min(max(wanted, low), high)
    if clamped != wanted:
        return clamped, f"A budget of {wanted} tokens is outside {spec.id}'s range {low}..{high}; using {clamped}."
    return clamped, None


def _display_note(spec: ModelSpec, switch: str, display: ThinkingDisplay) -> str | None:
    if switch == "always" and display == "omitted":
        return f"{spec.id} has no switch to hide its thinking; it is streamed anyway (display does not apply)."
    if switch == "never" and display == "summarized":
        return f"{spec.id} returns no thinking text through this API; only its token count is reported."
    return None


def with_budget(spec: ModelSpec, decided: Thinking, budget: int, output_cap: int, reason: str) -> Thinking:
    """``decided`` with a smaller thinking ``budget`` (a budget-mode model near its context window):
    the fragment rebuilt for it, its ``max_tokens`` (where the fragment has one) capped at
    ``output_cap``, and ``reason`` added to ``Thinking.reason``."""
    from daemon.vendors.thinking_params import FRAGMENTS  # loaded on first use, off the start-up path

    params, budget_sent = FRAGMENTS[spec.thinking.param](spec, decided.effective, decided.display, budget)
    if isinstance(params.get("max_tokens"), int):
        params["max_tokens"] = min(params["max_tokens"], output_cap)
    notes = " ".join(note for note in (decided.reason, reason) if note)
    return msgspec.structs.replace(decided, budget_tokens=budget_sent, request_params=params, reason=notes)
