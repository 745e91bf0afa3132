"""``MODEL/LEVEL``: a model id that carries a thinking level as its last ``/`` segment.

PROTOCOL.md "Thinking controls": wherever a ``model_id`` is accepted, a trailing ``/LEVEL``
(a level or an alias) sets the level too (``anthropic/claude-sonnet-4-5/medium``,
``claude-sonnet-4-5/med``). A ``model_id`` that names a model as it stands is never split,
so ids that contain slashes themselves (OpenRouter's ``openrouter/anthropic/claude-sonnet-4.5``)
still resolve. Pure: the caller says which ids name a model.
"""

from collections.abc import Callable

from daemon.errors import InvalidParams
from daemon.models.levels import parse_level
from protocol.objects import RequestedThinkingLevel


def split_model_level(model_id: str, is_model: Callable[[str], bool]) -> tuple[str, RequestedThinkingLevel | None]:
    """``(model, level)`` for ``model_id``: the level its ``/LEVEL`` suffix names, else None.

    Not split when ``model_id`` names a model as it stands, when it has no ``/`` with
    something before it, or when its last segment is not a level or alias (then it is a
    model id the catalogue may still reject on its own terms).
    """
    if is_model(model_id):
        return model_id, None
    head, slash, suffix = model_id.rpartition("/")
    if not slash or not head.strip("/"):
        return model_id, None
    try:
        level = parse_level(suffix)
    except InvalidParams:
        return model_id, None
    return head, level


def merge_levels(
    model_id: str, suffix: RequestedThinkingLevel | None, given: RequestedThinkingLevel | None
) -> RequestedThinkingLevel | None:
    """The level asked for by a ``/LEVEL`` suffix and a ``thinking_level`` together.

    Either alone stands; both must name the same level, else ``InvalidParams`` at argument
    ``thinking_level``: the client said two different things.
    """
    if suffix is None:
        return given
    if given is None:
        return suffix
    if given != suffix:
        raise InvalidParams(
            f"model_id {model_id!r} asks for thinking level {suffix!r} but thinking_level is {given!r}; "
            "give the level once, or the same level in both.",
            argument="thinking_level",
        )
    return suffix
