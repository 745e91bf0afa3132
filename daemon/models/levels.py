"""The thinking levels' vocabulary: the names a person may type (levels, aliases, displays,
fallback policies), parsing them, and the nearest-level rule that every fallback uses.

The scale itself (``LEVELS``) and ``ThinkingControl`` are ``daemon.models.spec``'s; deciding a
request's thinking for one model is ``daemon.catalog.decide``'s. Pure: no I/O.
"""

from collections.abc import Iterable
from typing import get_args

from daemon.errors import InvalidParams
from daemon.models.spec import LEVELS
from protocol.objects import RequestedThinkingLevel, ThinkingDisplay, ThinkingFallback, ThinkingLevel

__all__ = [
    "ALIASES",
    "DISPLAYS",
    "FALLBACKS",
    "level_of_scale",
    "nearest_allowed",
    "nearest_level",
    "parse_display",
    "parse_fallback",
    "parse_level",
]


def level_of_scale(name: str) -> ThinkingLevel:
    """``name`` as a level of the scale; the catalogue and the defaults chain only hold such names."""
    if name not in LEVELS:
        raise ValueError(f"{name!r} is not a thinking level")
    return name


# "xhigh" is a level of its own (between high and max), not an alias of max.
ALIASES: dict[str, RequestedThinkingLevel] = {
    "none": "off",
    "med": "medium",
    "ultra": "max",
    "default": "default",
    "auto": "default",
}
ALLOWED_LEVEL_NAMES: list[str] = [*LEVELS, *ALIASES]
DISPLAYS: tuple[ThinkingDisplay, ...] = get_args(ThinkingDisplay)
FALLBACKS: tuple[ThinkingFallback, ...] = get_args(ThinkingFallback)


def _invalid(kind: str, text: object, allowed: list[str], path: str) -> InvalidParams:
    shown = text if isinstance(text, str) else type(text).__name__
    return InvalidParams(
        f"Unknown thinking {kind} {shown!r}; use one of {', '.join(allowed)}.", path=path, allowed=allowed
    )


def parse_level(text: object, path: str = "$.level") -> RequestedThinkingLevel:
    """The canonical level for ``text`` (aliases folded, case and spaces ignored), or ``"default"``.

    Raises ``InvalidParams`` (with ``allowed``) for anything else.
    """
    if isinstance(text, str):
        key = text.strip().lower()
        if key in LEVELS:
            return key
        if key in ALIASES:
            return ALIASES[key]
    raise _invalid("level", text, list(ALLOWED_LEVEL_NAMES), path)


def parse_display(text: object, path: str = "$.display") -> ThinkingDisplay:
    """``summarized`` or ``omitted`` (case and spaces ignored); ``InvalidParams`` with ``allowed`` otherwise."""
    key = text.strip().lower() if isinstance(text, str) else None
    if key in DISPLAYS:
        return key
    raise _invalid("display", text, list(DISPLAYS), path)


def parse_fallback(text: object, path: str = "$.fallback") -> ThinkingFallback:
    """``nearest``, ``off``, ``default`` or ``error``; ``InvalidParams`` with ``allowed`` otherwise."""
    key = text.strip().lower() if isinstance(text, str) else None
    if key in FALLBACKS:
        return key
    raise _invalid("fallback", text, list(FALLBACKS), path)


def nearest_level(levels: Iterable[str], requested: str) -> str:
    """The level ``requested`` resolves to among ``levels`` (the rules in the module docstring)."""
    levels = list(levels)
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


def nearest_allowed(level: str, allowed: Iterable[str]) -> str | None:
    """The level to retry with after a provider refused ``level`` and named ``allowed``.

    The nearest below, else above (``nearest_level``'s rule), never ``level`` itself and
    never a level outside the scale; None when nothing is left to try.
    """
    candidates = [name for name in dict.fromkeys(allowed) if name in LEVELS and name != level]
    if not candidates:
        return None
    return nearest_level(sorted(candidates, key=LEVELS.index), level)
