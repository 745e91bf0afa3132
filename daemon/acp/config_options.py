"""A session's ACP config options: the ``model``, ``thought_level`` and ``thought_display`` selectors.

``model`` lists the models ``models/list`` reports as available, grouped by provider
(plus the session's own model when its provider is not configured, so the selector always
shows the current value). ``thought_level`` lists the current model's thinking levels
and shows the *effective* level; the level the person asked for stays sticky across
model changes exactly as with ``model/set``, and when the two differ the option's
description says why. Choosing the level the selector already shows changes nothing, so a
client that sends back every value it was shown keeps the requested level. The levels
listed are the ones the model really takes (``Thinking.supported``: the catalogue's, narrowed
by what the provider refused since the daemon started), ``xhigh`` included.

While a turn runs, a model call that sends other thinking than the turn last reported (a
``thinking_update``: a step of a tool loop without thinking, a budget shrunk near the window,
a level retried) shows in ``thought_level`` too (``call_thought_level``): its level and why,
until the turn ends and the session's own value is shown again.

``thought_display`` says whether the provider is asked for readable thinking
(``summarized``) or not (``omitted``: the model still thinks, and is billed for it).
"""

from daemon.acp import types as t
from daemon.catalog.catalog import Catalog
from daemon.errors import InvalidParams, PonderError
from daemon.models.levels import parse_display, parse_level
from daemon.models.spec import LEVELS
from daemon.sessions.manager import SessionManager
from daemon.store import SessionRow
from daemon.vendors.table import display_name
from protocol.objects import Thinking

MODEL = "model"
THOUGHT_LEVEL = "thought_level"
THOUGHT_DISPLAY = "thought_display"
CONFIG_IDS = [MODEL, THOUGHT_LEVEL, THOUGHT_DISPLAY]

LEVEL_NAMES = {
    "off": "Off",
    "minimal": "Minimal",
    "low": "Low",
    "medium": "Medium",
    "high": "High",
    "xhigh": "Extra high",
    "max": "Max",
}
DISPLAY_NAMES = {"summarized": "Summarized", "omitted": "Omitted"}
DISPLAY_DESCRIPTIONS = {
    "summarized": "Ask the provider for readable thinking.",
    "omitted": "Do not ask for the thinking text; the model still thinks, and is billed for it.",
}


def config_options(sessions: SessionManager, row: SessionRow) -> list[t.ConfigOption]:
    return [
        model_option(sessions.catalog, row.model_id),
        thought_level_option(sessions, row),
        thought_display_option(sessions, row),
    ]


def model_option(catalog: Catalog, current: str) -> t.ConfigOption:
    groups: dict[str, list[t.SelectOption]] = {}
    for spec in catalog.list_models():
        available = catalog.is_available(spec.provider)
        if not available and spec.id != current:
            continue
        description = spec.id if available else f"{spec.id} (its provider has no credentials)"
        groups.setdefault(spec.provider, []).append(
            t.SelectOption(value=spec.id, name=spec.name, description=description)
        )
    if not any(option.value == current for options in groups.values() for option in options):
        provider = current.split("/", 1)[0]
        groups.setdefault(provider, []).append(
            t.SelectOption(value=current, name=current, description="not a known model")
        )
    return t.ConfigOption(
        id=MODEL,
        name="Model",
        category="model",
        current_value=current,
        options=[t.SelectGroup(group=p, name=display_name(p), options=o) for p, o in groups.items()],
    )


def thought_level_option(sessions: SessionManager, row: SessionRow) -> t.ConfigOption:
    try:
        resolved = sessions.thinking_for(row)
        levels = list(resolved.supported)
        effective, reason = resolved.effective, resolved.reason
    except PonderError:  # the session's model is no longer in the catalogue
        levels, effective, reason = ["off"], "off", "The session's model is not a known model."
    return t.ConfigOption(
        id=THOUGHT_LEVEL,
        name="Thinking",
        category="thought_level",
        current_value=effective,
        options=[t.SelectOption(value=level, name=LEVEL_NAMES.get(level, level)) for level in levels],
        description=reason,
    )


def call_thought_level(thinking: Thinking) -> t.ConfigOption:
    """The thought-level selector as one model call of a running turn sends it (``thinking_update``)."""
    levels = sorted({*thinking.supported, thinking.effective}, key=LEVELS.index)
    return t.ConfigOption(
        id=THOUGHT_LEVEL,
        name="Thinking",
        category="thought_level",
        current_value=thinking.effective,
        options=[t.SelectOption(value=level, name=LEVEL_NAMES.get(level, level)) for level in levels],
        description=thinking.reason,
    )


def _display(sessions: SessionManager, row: SessionRow) -> str:
    try:
        return sessions.thinking_for(row).display
    except PonderError:  # the session's model is no longer in the catalogue
        return "summarized"


def thought_display_option(sessions: SessionManager, row: SessionRow) -> t.ConfigOption:
    return t.ConfigOption(
        id=THOUGHT_DISPLAY,
        name="Thinking display",
        category="model_config",
        current_value=_display(sessions, row),
        options=[
            t.SelectOption(value=value, name=name, description=DISPLAY_DESCRIPTIONS[value])
            for value, name in DISPLAY_NAMES.items()
        ],
    )


async def set_config_option(sessions: SessionManager, request: t.SetConfigOptionRequest) -> SessionRow:
    """Apply one ``session/set_config_option``; returns the session's row afterwards.

    Everything happens under the session's change lock, taken before anything is awaited,
    so a burst of changes sent without waiting applies in the order it arrived, each
    checked against the state the previous ones left.
    """
    if request.config_id not in CONFIG_IDS:
        raise InvalidParams(
            f"Unknown config option {request.config_id!r}.", path="$.params.configId", allowed=list(CONFIG_IDS)
        )
    if not isinstance(request.value, str) or request.type not in (None, "select", "value_id"):
        raise InvalidParams(f"{request.config_id} is a select option: its value is a string.", path="$.params.value")
    async with sessions.changes(request.session_id):
        if request.config_id == MODEL:
            row, _spec = await sessions.set_model(request.session_id, request.value, None)
            return row
        row = await sessions.row(request.session_id)
        if request.config_id == THOUGHT_DISPLAY:
            return await _set_display(sessions, row, request.value)
        levels: list[str] = list(sessions.thinking_for(row).supported)
        level = parse_level(request.value, path="$.params.value")
        if level != "default" and level not in levels:
            raise InvalidParams(
                f"{row.model_id} has no thinking level {request.value!r}; it supports {', '.join(levels)}.",
                path="$.params.value",
                allowed=levels,
            )
        if level == sessions.thinking_for(row).effective:
            # The value the selector shows: a client echoing what it was shown (on reconnect,
            # say) must not turn the effective level into the requested one; the level the
            # person asked for stays sticky.
            return row
        return await sessions.set_thinking(request.session_id, level)


async def _set_display(sessions: SessionManager, row: SessionRow, value: str) -> SessionRow:
    display = parse_display(value, path="$.params.value")
    if display == _display(sessions, row):
        return row  # the value the selector shows: nothing to change
    return await sessions.set_thinking(row.id, display=display)
