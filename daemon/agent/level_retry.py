"""The retry after a provider refuses a thinking level (PROTOCOL.md "Thinking controls").

A provider that answers 400 to a level and names the ones it takes gets the request once
more at the nearest of those (``daemon.models.levels.nearest_allowed``); where it names none
(Gemini), the refused level alone is struck out of the model's list. Either way the
daemon's ``LearnedLevels`` remembers it, so every later decision for the model goes
straight to a level the provider takes.
"""

from daemon.agent.context import Turn
from daemon.errors import ThinkingLevelRejected
from daemon.models.levels import nearest_allowed
from protocol.objects import Thinking


def refused_level(turn: Turn, exc: ThinkingLevelRejected) -> str:
    """The level the provider refused: the one it named, else the one the turn sent."""
    return exc.rejected or turn.thinking.effective


def learn(turn: Turn, exc: ThinkingLevelRejected) -> None:
    """Remember for the life of the daemon what the provider said about the model."""
    turn.levels.learn(turn.model_id, allowed=exc.allowed, refused=refused_level(turn, exc))


def retry_thinking(turn: Turn, exc: ThinkingLevelRejected) -> Thinking | None:
    """The thinking to send the request again with, or None when nothing is left to try (or the
    session's fallback policy is ``error``, which wants the level asked for or nothing).

    ``requested``, ``source`` and ``fallback`` stay those of the turn (the client asked for
    the same thing); ``effective`` and the request fragment are the new level's, and
    ``reason`` says first that the provider refused the level the turn sent.
    """
    sent = turn.thinking
    if sent.fallback == "error":  # "error": exactness over an answer at another level
        return None
    refused = refused_level(turn, exc)
    candidates = exc.allowed if exc.allowed is not None else [level for level in sent.supported if level != refused]
    level = nearest_allowed(refused, candidates)
    if level is None:
        return None
    retried = turn.levels.rethink(level)
    if retried.effective == refused:
        return None
    note = f"{turn.provider_name} refused {refused!r} for {turn.model_name}; retried with {retried.effective!r}."
    retried.reason = " ".join(text for text in (note, retried.reason) if text)
    retried.requested, retried.source, retried.fallback = sent.requested, sent.source, sent.fallback
    return retried


def retry_message(turn: Turn, refused: str, retried: Thinking) -> str:
    """The ``retry`` event's message: which level was refused and which one is tried now."""
    return (
        f"{turn.provider_name} refused thinking level {refused!r} for {turn.model_name}; "
        f"retrying with {retried.effective!r}, the nearest level it takes."
    )


def refused_twice(turn: Turn, first: str, exc: ThinkingLevelRejected) -> ThinkingLevelRejected:
    """The error that ends a turn whose retry level was refused too."""
    second = refused_level(turn, exc)
    allowed = f" It names {', '.join(exc.allowed)}." if exc.allowed else ""
    return ThinkingLevelRejected(
        f"{turn.provider_name} refused thinking level {first!r} and then {second!r} for {turn.model_name}.{allowed} "
        "Choose another level with thinking/set.",
        provider=exc.provider,
        status=exc.status,
        kind=exc.kind,
        rejected=exc.rejected,
        allowed=exc.allowed,
    )
