"""The catalogue's value types (``ModelSpec``, ``ThinkingControl``, ``Price``) keep the semantics
they had as frozen dataclasses now that they are frozen msgspec Structs (cheaper to define on
the start path): equal by value, hashable, immutable, checked again when replaced."""

import pytest
from msgspec.structs import replace

from daemon.context.pricing import Price, Rates, Tier
from daemon.models.spec import NO_THINKING, ModelSpec, ThinkingControl

EFFORT = ThinkingControl(kind="effort", param="openai-effort", levels=("off", "low", "high"), default="low")


def test_a_thinking_control_compares_its_values_but_hashes_without_them() -> None:
    named = replace(EFFORT, values={"low": "minimal"})
    assert named != EFFORT  # the values count for equality
    assert named == ThinkingControl(
        kind="effort", param="openai-effort", levels=("off", "low", "high"), default="low", values={"low": "minimal"}
    )
    assert hash(named) == hash(EFFORT)  # but not for the hash: a dict does not hash
    assert len({EFFORT, named, replace(EFFORT)}) == 2


def test_a_thinking_control_is_checked_when_made_and_when_replaced() -> None:
    with pytest.raises(AssertionError):
        ThinkingControl(kind="dial")
    with pytest.raises(AssertionError):
        ThinkingControl(levels=("high", "low"), default="low")  # out of order
    with pytest.raises(AssertionError):
        replace(EFFORT, default="medium")  # not one of its levels
    with pytest.raises(AttributeError):
        EFFORT.default = "high"  # type: ignore[misc]


def test_a_model_spec_is_an_immutable_value() -> None:
    spec = ModelSpec("mock", "echo", "Echo", "mock", context_window=1000)
    same = ModelSpec(provider="mock", model="echo", name="Echo", api="mock", context_window=1000)
    assert spec == same and hash(spec) == hash(same) and spec.thinking is NO_THINKING
    wider = replace(spec, context_window=2000)
    assert wider != spec and wider.context_window == 2000 and spec.context_window == 1000
    assert (wider.id, wider.input_modalities) == ("mock/echo", ("text",))
    assert {spec: 1}[same] == 1
    with pytest.raises(AttributeError):
        spec.context_window = 5  # type: ignore[misc]
    assert repr(spec).startswith(
        "ModelSpec(provider='mock', model='echo', name='Echo', api='mock', context_window=1000"
    )


def test_a_price_is_an_immutable_value() -> None:
    base = Rates(1.0, 2.0)
    price = Price(base, tiers=(Tier(200_000, Rates(2.0, 4.0)),))
    assert price == Price(base=Rates(input=1.0, output=2.0), tiers=(Tier(above_tokens=200_000, rates=Rates(2.0, 4.0)),))
    assert hash(price) == hash(Price(Rates(1.0, 2.0), (Tier(200_000, Rates(2.0, 4.0)),)))
    assert price != replace(price, source="config") and price.source == "models-dev"
    assert price.rates_for(300_000) == Rates(2.0, 4.0) and price.rates_for(10) is base
    with pytest.raises(AttributeError):
        base.input = 3.0  # type: ignore[misc]
