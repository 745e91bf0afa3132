"""Prices from the real models-dev data (tiers included), config.toml overrides, and the cost of a call."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon.catalog import models_dev
from daemon.catalog.catalog import Catalog
from daemon.config.settings import load_config
from daemon.context.pricing import (
    Price,
    Rates,
    Tier,
    cost_of,
    parse_price_override,
    price_from_models_dev,
)
from protocol.objects import Usage

ROOT = Path(__file__).resolve().parents[2]


def models_dev_price(md_provider: str, md_model: str) -> Price | None:
    """The price models-dev's own data gives a model (its ids), read the daemon's one way."""
    row = models_dev.lookup(md_provider, md_model)
    return price_from_models_dev(row.cost) if row is not None and row.cost is not None else None


def make_catalog(tmp_path: Path, toml: str = "") -> Catalog:
    (tmp_path / "config.toml").write_text(textwrap.dedent(toml), encoding="utf-8")
    return Catalog(load_config(tmp_path, env={}))


def amount(usage: Usage, price: Price | None) -> float:
    cost = cost_of(usage, price)
    assert cost is not None
    assert cost.currency == "USD"
    return cost.amount


# --- real models-dev rows (models-dev 1.0.398) ------------------------------------------


def test_anthropic_row_prices_cache_reads_and_writes_apart() -> None:
    price = models_dev_price("anthropic", "claude-sonnet-4-5")
    assert price == Price(base=Rates(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75))
    # 10k input of which 6k read from cache and 2k written to it; 1k output of which 400 reasoning.
    usage = Usage(input_tokens=10_000, output_tokens=1_000, reasoning_tokens=400, cache_read_tokens=6_000,
                  cache_write_tokens=2_000)  # fmt: skip
    assert amount(usage, price) == pytest.approx((2_000 * 3 + 6_000 * 0.3 + 2_000 * 3.75 + 1_000 * 15) / 1e6)


def test_tiered_row_bills_the_whole_call_at_the_tier_once_the_prompt_exceeds_it() -> None:
    price = models_dev_price("google", "gemini-2.5-pro")
    assert price is not None
    assert price.tiers == (Tier(above_tokens=200_000, rates=Rates(input=2.5, output=15.0, cache_read=0.25)),)
    below = Usage(input_tokens=100_000, output_tokens=1_000)
    assert amount(below, price) == pytest.approx((100_000 * 1.25 + 1_000 * 10) / 1e6)
    at_threshold = Usage(input_tokens=200_000, output_tokens=0)
    assert amount(at_threshold, price) == pytest.approx(200_000 * 1.25 / 1e6)
    above = Usage(input_tokens=250_000, output_tokens=2_000, cache_read_tokens=50_000)
    assert amount(above, price) == pytest.approx((200_000 * 2.5 + 50_000 * 0.25 + 2_000 * 15) / 1e6)


def test_tier_threshold_comes_from_tiers_not_from_the_context_over_200k_name() -> None:
    price = models_dev_price("openai", "gpt-5.4")
    assert price is not None and [t.above_tokens for t in price.tiers] == [272_000]
    assert amount(Usage(input_tokens=250_000, output_tokens=0), price) == pytest.approx(250_000 * 2.5 / 1e6)
    assert amount(Usage(input_tokens=300_000, output_tokens=10_000), price) == pytest.approx(
        (300_000 * 5 + 10_000 * 22.5) / 1e6
    )


def test_reasoning_rate_applies_to_reasoning_tokens_where_the_data_has_one() -> None:
    price = models_dev_price("alibaba", "qwen-plus")
    assert price is not None and price.base.reasoning == 4.0 and price.base.output == 1.2
    usage = Usage(input_tokens=0, output_tokens=1_000, reasoning_tokens=800)
    assert amount(usage, price) == pytest.approx((200 * 1.2 + 800 * 4) / 1e6)


def test_missing_cache_rates_bill_cached_tokens_as_input() -> None:
    price = models_dev_price("openai", "gpt-5")  # cache_read 0.125, no cache_write
    assert price is not None and price.base.cache_write is None
    usage = Usage(input_tokens=1_000, output_tokens=0, cache_write_tokens=500)
    assert amount(usage, price) == pytest.approx(1_000 * 1.25 / 1e6)


def test_unknown_model_or_usage_has_no_cost() -> None:
    assert models_dev_price("anthropic", "no-such-model") is None
    price = models_dev_price("anthropic", "claude-haiku-4-5")
    assert cost_of(Usage(), price) is None
    assert cost_of(None, price) is None
    assert cost_of(Usage(input_tokens=1, output_tokens=1), None) is None


def test_parts_larger_than_their_total_never_make_a_negative_cost() -> None:
    price = Price(base=Rates(input=1.0, output=1.0, cache_read=0.0, cache_write=0.0))
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_tokens=50, cache_write_tokens=50, reasoning_tokens=99)
    assert amount(usage, price) == pytest.approx(5 / 1e6)


# --- models-dev shapes -----------------------------------------------------------------


def test_two_tiers_pick_the_highest_exceeded() -> None:
    price = price_from_models_dev(
        {
            "input": 1,
            "output": 2,
            "tiers": [
                {"input": 4, "output": 8, "tier": {"type": "context", "size": 128_000}},
                {"input": 2, "output": 4, "tier": {"type": "context", "size": 32_000}},
            ],
        }
    )
    assert price is not None and [t.above_tokens for t in price.tiers] == [32_000, 128_000]
    assert price.rates_for(10_000).input == 1
    assert price.rates_for(40_000).input == 2
    assert price.rates_for(130_000).input == 4


def test_context_over_200k_without_tiers_is_a_200k_tier() -> None:
    price = price_from_models_dev({"input": 1, "output": 2, "context_over_200k": {"input": 3, "output": 6}})
    assert price is not None and price.tiers == (Tier(above_tokens=200_000, rates=Rates(input=3.0, output=6.0)),)


def test_garbage_rows_give_no_price_or_are_skipped() -> None:
    assert price_from_models_dev({"output": 2}) is None
    assert price_from_models_dev({"input": "cheap", "output": 2}) is None
    price = price_from_models_dev({"input": 1, "output": 2, "tiers": ["x", {"tier": {"size": "big"}}]})
    assert price == Price(base=Rates(input=1.0, output=2.0))


def test_importing_the_daemon_does_not_parse_models_dev() -> None:
    code = (
        "import sys, daemon.server, daemon.context.pricing, daemon.context.summary, daemon.context.history;"
        "print(any(name.startswith('models_dev') for name in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- config.toml overrides --------------------------------------------------------------


def test_config_price_overrides_a_built_in_model_and_keeps_its_row(tmp_path: Path) -> None:
    catalog = make_catalog(
        tmp_path,
        """
        [[providers.anthropic.models]]
        model = "claude-opus-4-8"
        price = {input = 5, output = 25, cache_read = 0.5, cache_write = 6.25}
        """,
    )
    spec = catalog.get("anthropic/claude-opus-4-8")
    assert spec.supports_thinking  # still the built-in row, not a bare declared model
    price = catalog.price(spec)
    assert price is not None and price.source == "config"
    assert amount(Usage(input_tokens=1_000_000, output_tokens=0), price) == pytest.approx(5.0)
    assert catalog.problems == []


def test_config_price_replaces_models_dev_price(tmp_path: Path) -> None:
    catalog = make_catalog(
        tmp_path,
        """
        [[providers.openai.models]]
        model = "gpt-5.4"
        price = {input = 1, output = 2}
        """,
    )
    price = catalog.price(catalog.get("openai/gpt-5.4"))
    assert price == Price(base=Rates(input=1.0, output=2.0), source="config")  # no tiers: the user's price
    assert catalog.price(catalog.get("openai/gpt-5.2")) == models_dev_price("openai", "gpt-5.2")


def test_declared_model_of_a_known_provider_gets_models_dev_price(tmp_path: Path) -> None:
    catalog = make_catalog(
        tmp_path,
        """
        [[providers.openai.models]]
        model = "gpt-5-nano"
        thinking_levels = ["low", "medium"]
        """,
    )
    assert catalog.price(catalog.get("openai/gpt-5-nano")) == models_dev_price("openai", "gpt-5-nano")


def test_models_without_data_have_no_price(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    assert catalog.price(catalog.get("mock/echo")) is None
    assert catalog.price(catalog.get("anthropic/claude-opus-4-8")) is None  # not in this models-dev snapshot


@pytest.mark.parametrize(
    ("price", "says"),
    [
        ("3", "must be a table"),
        ("{output = 15}", "needs 'input'"),
        ('{input = 3, output = "x"}', "price.output must be a number"),
        ("{input = -1, output = 15}", "price.input must be a number"),
        ("{input = 3, output = 15, reasoning = 2}", "unknown key(s) reasoning"),
    ],
)
def test_bad_config_price_is_a_problem_not_a_crash(tmp_path: Path, price: str, says: str) -> None:
    (tmp_path / "config.toml").write_text(
        f'[[providers.openai.models]]\nmodel = "gpt-5.2"\nprice = {price}\n', encoding="utf-8"
    )
    config = load_config(tmp_path, env={})
    assert config.providers["openai"].prices == {}
    assert any(
        "[[providers.openai.models]] gpt-5.2" in problem and says in problem and "catalogue's price" in problem
        for problem in config.problems
    ), config.problems


def test_parse_price_override_optional_cache_rates() -> None:
    price = parse_price_override({"input": 2, "output": 8})
    assert price.base == Rates(input=2.0, output=8.0)
