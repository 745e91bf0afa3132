"""``MODEL/LEVEL``: the parser (``daemon.sessions.model_level``), table-driven."""

import pytest

from daemon.errors import InvalidParams
from daemon.sessions.model_level import merge_levels, split_model_level

KNOWN = {
    "anthropic/claude-sonnet-4-5",
    "claude-sonnet-4-5",  # a bare name the catalogue resolves
    "openrouter/anthropic/claude-sonnet-4.5",
    "mock/thinker",
    "weird/high",  # a model whose own name ends in a level: never split
}


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("anthropic/claude-sonnet-4-5", ("anthropic/claude-sonnet-4-5", None)),
        ("anthropic/claude-sonnet-4-5/medium", ("anthropic/claude-sonnet-4-5", "medium")),
        ("claude-sonnet-4-5/med", ("claude-sonnet-4-5", "medium")),
        ("anthropic/claude-opus-4-8/xhigh", ("anthropic/claude-opus-4-8", "xhigh")),
        ("mock/thinker/ultra", ("mock/thinker", "max")),
        ("mock/thinker/none", ("mock/thinker", "off")),
        ("mock/thinker/AUTO", ("mock/thinker", "default")),
        ("mock/thinker/ High ", ("mock/thinker", "high")),
        # OpenRouter ids contain slashes: as they stand they name a model, so they stay whole.
        ("openrouter/anthropic/claude-sonnet-4.5", ("openrouter/anthropic/claude-sonnet-4.5", None)),
        ("openrouter/anthropic/claude-sonnet-4.5/low", ("openrouter/anthropic/claude-sonnet-4.5", "low")),
        ("weird/high", ("weird/high", None)),
        ("weird/high/low", ("weird/high", "low")),
        # Not a level: left whole for the catalogue to judge (model_not_found names it).
        ("mock/thinker/loud", ("mock/thinker/loud", None)),
        ("openrouter/unknown/model", ("openrouter/unknown/model", None)),
        # Nothing before the slash: not a MODEL/LEVEL.
        ("/high", ("/high", None)),
        ("high", ("high", None)),
        ("", ("", None)),
    ],
)
def test_split_model_level(model_id, expected):
    assert split_model_level(model_id, KNOWN.__contains__) == expected


@pytest.mark.parametrize(
    ("suffix", "given", "expected"),
    [
        (None, None, None),
        (None, "high", "high"),
        ("medium", None, "medium"),
        ("medium", "medium", "medium"),
        ("max", "max", "max"),
        ("default", "default", "default"),
    ],
)
def test_merge_levels_agreeing(suffix, given, expected):
    # Both come parsed (aliases folded): the suffix by split_model_level, the param by the handler.
    assert merge_levels("m/x", suffix, given) == expected


@pytest.mark.parametrize(("suffix", "given"), [("medium", "high"), ("off", "low"), ("default", "medium")])
def test_merge_levels_disagreeing_is_invalid_params(suffix, given):
    with pytest.raises(InvalidParams) as raised:
        merge_levels("m/x", suffix, given)
    # The argument at fault, for the handler to place on the wire (tests/sessions/test_thinking_controls.py
    # checks the path a client sees: $.params.thinking_level).
    assert raised.value.argument == "thinking_level"
    assert repr(suffix) in raised.value.message and repr(given) in raised.value.message
