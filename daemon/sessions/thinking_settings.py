"""What a session, or one prompt, asks of thinking (``ThinkingRequest``), and the decision it
gets for a model (PROTOCOL.md "Thinking controls").

A request is taken when a prompt is sent and kept with it while it waits in the queue, so
a queued prompt runs with the settings it was sent with; it is decided against the model
when its turn starts. A session's own display and fallback left unset (None in its row)
follow config.toml's ``[defaults]``, as a level of ``default`` follows the defaults chain.
"""

from collections.abc import Callable
from typing import TypeVar

import msgspec

from daemon.catalog.catalog import Catalog, ModelSpec
from daemon.catalog.learned import LearnedLevels
from daemon.config.settings import Config
from daemon.errors import InvalidParams, UnsupportedThinkingLevel
from daemon.models.levels import parse_display, parse_fallback, parse_level
from daemon.store import SessionRow
from protocol.objects import RequestedThinkingLevel, Thinking, ThinkingDisplay, ThinkingFallback, ThinkingSource

T = TypeVar("T")


class ThinkingRequest(msgspec.Struct, frozen=True):
    """The thinking settings in force for one turn, before a model is known."""

    level: RequestedThinkingLevel  # a level of the scale, or "default" (the defaults chain decides)
    display: ThinkingDisplay
    fallback: ThinkingFallback
    budget_tokens: int | None  # a custom budget; None: the level's own
    source: ThinkingSource = "session"  # "prompt" for a per-turn level

    def decide(self, catalog: Catalog, spec: ModelSpec, learned: LearnedLevels | None = None) -> Thinking:
        """The decision for ``spec``; ``UnsupportedThinkingLevel`` under fallback ``error``."""
        return catalog.decide(
            spec,
            self.level,
            display=self.display,
            budget_tokens=self.budget_tokens,
            fallback=self.fallback,
            source=self.source,
            learned=learned,
        )

    def check(self, catalog: Catalog, spec: ModelSpec, argument: str) -> None:
        """Refuse, before anything changes, what fallback ``error`` would refuse for ``spec``;
        the error names ``argument`` (the caller's argument that asked for it)."""
        try:
            self.decide(catalog, spec)
        except UnsupportedThinkingLevel as exc:
            raise UnsupportedThinkingLevel(exc.model_id, exc.level, exc.allowed, argument=argument) from None


def session_request(
    row: SessionRow, config: Config, turn_level: RequestedThinkingLevel | None = None
) -> ThinkingRequest:
    """What ``row`` asks for; ``turn_level`` (a prompt's own level) stands for its level this once."""
    return ThinkingRequest(
        level=turn_level if turn_level is not None else _stored(parse_level, row.thinking_level, "default"),
        display=_stored(parse_display, row.thinking_display, config.default_thinking_display),
        fallback=_stored(parse_fallback, row.thinking_fallback, config.default_thinking_fallback),
        budget_tokens=row.thinking_budget,
        source="prompt" if turn_level is not None else "session",
    )


def _stored(parse: Callable[[str], T], value: str | None, default: T) -> T:
    # A value in the store was checked when it was set; one a newer ponder wrote that this one
    # does not know is treated as unset rather than making the session unusable.
    if value is None:
        return default
    try:
        return parse(value)
    except InvalidParams:
        return default
