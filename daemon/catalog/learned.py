"""What providers told us about a model's levels since the daemon started (``LearnedLevels``).

A provider that refuses a level and names the ones it takes (``daemon.vendors.level_rejections``)
teaches the daemon those levels; every later decision for that model (``daemon.catalog.decide``)
offers only them. Kept in memory, one per daemon (the ``Catalog``'s), until it exits.
"""

from collections.abc import Iterable

from daemon.models.spec import LEVELS

__all__ = ["LearnedLevels"]


class LearnedLevels:
    """The levels providers told us they take, per model id, for the life of the daemon.

    When a provider refuses a level and names the ones it takes, the agent records them
    here; ``decide_thinking`` then offers only those (plus ``off`` where the catalogue says
    the model can run without thinking: a rejection lists efforts, never the off form).
    When a rejection names nothing (Gemini), the refused level alone is struck out.
    """

    def __init__(self) -> None:
        self._allowed: dict[str, tuple[str, ...]] = {}
        self._refused: dict[str, set[str]] = {}
        self.version = 0  # counts what was learned: a decision kept from before is decided again

    def learn(self, model_id: str, *, allowed: Iterable[str] | None = None, refused: str | None = None) -> None:
        self.version += 1
        if allowed is not None:
            known = tuple(sorted({level for level in allowed if level in LEVELS}, key=LEVELS.index))
            if known:
                self._allowed[model_id] = known
        if refused is not None and refused in LEVELS:
            self._refused.setdefault(model_id, set()).add(refused)

    def knows(self, model_id: str) -> bool:
        return model_id in self._allowed or model_id in self._refused

    def narrow(self, model_id: str, levels: tuple[str, ...]) -> tuple[str, ...]:
        """``levels`` (a catalogue list) as the provider has since told us; unchanged when it told nothing."""
        allowed = self._allowed.get(model_id)
        if allowed is not None:
            # Only ever narrower than the catalogue: an upstream's list can be wider than the
            # proxy's (Copilot's gpt-5-mini errors name minimal, its /models does not).
            named = [level for level in allowed if level != "off"]
            thinking = [level for level in named if level in levels] or named
            levels = tuple((["off"] if "off" in levels else []) + thinking)
        refused = self._refused.get(model_id, set())
        narrowed = tuple(level for level in levels if level not in refused)
        return narrowed if any(level != "off" for level in narrowed) or not refused else levels
