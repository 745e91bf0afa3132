"""``daemon.agent.level_retry``: which level a refused request is retried with, and what is learned."""

from collections.abc import Iterable
from typing import Any

import pytest

from daemon.agent.context import Turn
from daemon.agent.level_retry import refused_twice, retry_thinking
from daemon.catalog.catalog import builtin_specs
from daemon.catalog.decide import decide_thinking
from daemon.catalog.learned import LearnedLevels
from daemon.errors import ThinkingLevelRejected
from daemon.models.spec import ModelSpec
from protocol.objects import Thinking
from tests.support.provider_streams import user

# A Turn holds a cancel scope, which needs a running event loop.
pytestmark = pytest.mark.anyio

SPECS = {spec.id: spec for spec in builtin_specs()}


class _Levels:
    """``agent.LevelRetry`` over the pure decision (``sessions.thinking_settings.TurnLevels`` uses the catalogue)."""

    def __init__(self, spec: ModelSpec, learned: LearnedLevels) -> None:
        self.spec = spec
        self.learned = learned

    def learn(self, model_id: str, *, allowed: Iterable[str] | None, refused: str) -> None:
        self.learned.learn(model_id, allowed=allowed, refused=refused)

    def rethink(self, level: str) -> Thinking:
        return decide_thinking(self.spec, level, learned=self.learned)


def _turn(model_id: str, level: str, learned: LearnedLevels, **decide: Any) -> Turn:
    spec = SPECS[model_id]
    nothing: Any = None
    return Turn(
        session_id="ses_1",
        turn_id="turn_1",
        user_message=user("hi"),
        model_id=spec.id,
        provider_name=spec.provider,
        model_name=spec.model,
        provider=nothing,
        thinking=decide_thinking(spec, level, learned=learned, **decide),
        history=[],
        emit=nothing,
        messages=nothing,
        toolkit=nothing,
        account=nothing,
        levels=_Levels(spec, learned),
        watchdogs=nothing,
    )


def _refusal(rejected: str | None, allowed: tuple[str, ...] | None) -> ThinkingLevelRejected:
    return ThinkingLevelRejected("refused", provider="p", rejected=rejected, allowed=allowed)


async def test_the_nearest_named_level_below_is_retried_with_the_request_kept():
    learned = LearnedLevels()
    turn = _turn("openai/gpt-5.2", "xhigh", learned)
    retried = retry_thinking(turn, _refusal("xhigh", ("minimal", "low", "medium", "high")))
    assert retried is not None
    assert (retried.requested, retried.effective, retried.source) == ("xhigh", "high", "session")
    assert retried.request_params["reasoning"]["effort"] == "high"
    assert retried.reason is not None and retried.reason.startswith(
        "openai refused 'xhigh' for gpt-5.2; retried with 'high'."
    )


async def test_a_refusal_naming_no_levels_strikes_out_the_refused_one():
    """Gemini names only the level it refused: the retry takes the nearest of the others."""
    learned = LearnedLevels()
    turn = _turn("gemini/gemini-3.1-pro-preview", "medium", learned)
    turn.levels.learn(turn.model_id, allowed=None, refused="medium")  # what the agent does first (level_retry.learn)
    retried = retry_thinking(turn, _refusal("medium", None))
    assert retried is not None and retried.effective == "low"
    assert "medium" not in learned.narrow(turn.model_id, SPECS[turn.model_id].thinking.levels)


async def test_nothing_left_to_try_or_an_exact_policy_gives_no_retry():
    learned = LearnedLevels()
    only_high = _turn("openai/gpt-5-pro", "high", learned)
    assert retry_thinking(only_high, _refusal("high", ("high",))) is None
    exact = _turn("openai/gpt-5.2", "xhigh", learned, fallback="error")
    assert retry_thinking(exact, _refusal("xhigh", ("low", "medium", "high"))) is None


@pytest.mark.parametrize(("allowed", "named"), [(("low", "medium"), " It names low, medium."), (None, "")])
async def test_a_second_refusal_names_both_levels(allowed, named):
    turn = _turn("openai/gpt-5.2", "high", LearnedLevels())
    error = refused_twice(turn, "xhigh", _refusal("high", allowed))
    first = "openai refused thinking level 'xhigh' and then 'high' for gpt-5.2."
    assert error.message == f"{first}{named} Choose another level with thinking/set."
