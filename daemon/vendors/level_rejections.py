"""Recognising a provider's refusal of a thinking level, and what it says the model takes.

When a provider answers HTTP 400 because of the reasoning level it was sent, some name the
values they take; ``parse_level_rejection`` turns such a body into a
``ThinkingLevelRejected`` (ponder levels: ``none`` becomes ``off``), so the agent can
retry once with ``daemon.models.levels.nearest_allowed`` and remember the answer
(``daemon.catalog.learned.LearnedLevels``). Any other body is None: the ordinary error stands.

The shapes, verbatim from recorded traffic (research note §9, docs/research/thinking-controls.md):

* OpenAI Responses: ``Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model.
  Supported values are: 'none', 'low', 'medium', and 'high'.`` (param ``reasoning.effort``,
  code ``unsupported_value``; openai/openai-agents-python#2089). Copilot's /responses
  sends the same text with code ``invalid_request_body`` and no param (kaitranntt/ccs#686).
* OpenAI Chat: ``Unsupported value: 'reasoning_effort' does not support 'xhigh' with this
  model. Supported values are: ...`` (livekit/agents PR #3966; Copilot chat, kaitranntt/ccs#344).
* Copilot /v1/messages (Claude): ``output_config.effort "high" is not supported by model
  claude-opus-4.7; supported values: [medium]`` (code ``invalid_reasoning_effort``,
  microsoft/vscode#310940).
* Gemini generateContent names only the refused level: ``Thinking level MEDIUM is not
  supported for this model. Please retry with other thinking level.`` (egoist/chatwise-
  releases#1206); Vertex: ``thinking_level MEDIUM is not supported by this model``
  (jenslys/opencode-gemini-auth#14); the Interactions API names both: ``'minimal' is not a
  supported thinking level for this model. Allowed values are: medium, low, high.``
  (fishjar/kiss-translator#1048).

Anthropic's own API does not name values for an unsupported effort (research §9: not
found), so it has no parser; its table row is the only truth there. DeepSeek and
OpenRouter map levels rather than refuse them.

Pure: no I/O.
"""

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from daemon.errors import ThinkingLevelRejected
from daemon.models.spec import LEVELS

# A provider's reasoning-effort names, and the ponder level each stands for.
NATIVE_LEVELS: dict[str, str] = {"none": "off", **{level: level for level in LEVELS if level != "off"}}

_QUOTED = re.compile(r"""['"]([A-Za-z_]+)['"]""")
_OPENAI_SUPPORTED = re.compile(r"Supported values are:\s*(?P<values>.+?)\.?\s*$", re.S)
_OPENAI_REFUSED = (
    re.compile(r"Unsupported value:\s*'(?P<level>\w+)' is not supported with"),
    re.compile(r"does not support '(?P<level>\w+)' with this model"),
)
_COPILOT_MESSAGES = re.compile(
    r"""effort\s+["'](?P<level>\w+)["'] is not supported by model .*?supported values:\s*\[(?P<values>[^\]]*)\]""",
    re.S,
)
_GEMINI_REFUSED = re.compile(r"thinking[ _]level (?P<level>[A-Za-z]+) is not supported", re.I)
_GEMINI_INTERACTIONS = re.compile(
    r"'(?P<level>\w+)' is not a supported thinking level for this model\.\s*Allowed values are:\s*(?P<values>[\w ,]+)"
)


class LevelRejection(msgspec.Struct, frozen=True):
    """What a refusal said: the ponder level refused (if named) and the ones allowed (if named)."""

    rejected: str | None
    allowed: tuple[str, ...] | None
    message: str
    kind: str | None


def _error_object(body: bytes | str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) and isinstance(error.get("message"), str) else None


def _ponder(names: list[str]) -> tuple[str, ...] | None:
    """The ponder levels for native names, or None if any name is not a reasoning level."""
    levels = [NATIVE_LEVELS.get(name.strip().lower()) for name in names if name.strip()]
    if not levels or any(level is None for level in levels):
        return None
    return tuple(sorted(set(levels), key=LEVELS.index))  # type: ignore[arg-type]


def _one(name: str | None) -> str | None:
    return NATIVE_LEVELS.get(name.lower()) if name else None


def parse_openai_rejection(body: bytes | str) -> LevelRejection | None:
    """OpenAI's ``Unsupported value ... Supported values are: ...`` for a reasoning effort (Chat or Responses)."""
    error = _error_object(body)
    if error is None:
        return None
    message = error["message"]
    supported = _OPENAI_SUPPORTED.search(message)
    if not message.startswith("Unsupported value:") or supported is None:
        return None
    allowed = _ponder(_QUOTED.findall(supported.group("values")))
    if allowed is None:  # another parameter's unsupported value (e.g. a temperature)
        return None
    param = str(error.get("param") or "")
    if param and not param.endswith("effort"):
        return None
    refused = next((m.group("level") for p in _OPENAI_REFUSED if (m := p.search(message))), None)
    return LevelRejection(_one(refused), allowed, message, _kind(error))


def parse_copilot_messages_rejection(body: bytes | str) -> LevelRejection | None:
    """Copilot's ``output_config.effort "x" is not supported by model m; supported values: [a, b]``."""
    error = _error_object(body)
    if error is None:
        return None
    match = _COPILOT_MESSAGES.search(error["message"])
    if match is None:
        return None
    allowed = _ponder(match.group("values").replace('"', "").replace("'", "").split(","))
    if allowed is None:
        return None
    return LevelRejection(_one(match.group("level")), allowed, error["message"], _kind(error))


def parse_gemini_rejection(body: bytes | str) -> LevelRejection | None:
    """Gemini's ``Thinking level X is not supported`` (the refused level only), or the
    Interactions API's ``'x' is not a supported thinking level ... Allowed values are: ...``."""
    error = _error_object(body)
    if error is None:
        return None
    message = error["message"]
    both = _GEMINI_INTERACTIONS.search(message)
    if both is not None:
        allowed = _ponder(both.group("values").split(","))
        if allowed is not None:
            return LevelRejection(_one(both.group("level")), allowed, message, _kind(error))
    refused = _GEMINI_REFUSED.search(message)
    level = _one(refused.group("level")) if refused else None
    if level is None:  # "Thinking level is not supported for this model." names no level
        return None
    return LevelRejection(level, None, message, _kind(error))


def _kind(error: dict[str, Any]) -> str | None:
    # Gemini's "code" is the HTTP status (a number); its "status" names the error.
    return next((value for key in ("code", "type", "status") if isinstance(value := error.get(key), str)), None)


Parser = Callable[[bytes | str], LevelRejection | None]

# Which parsers apply to a wire API's 400s. The OpenAI-style APIs also carry Copilot's
# /v1/messages wording: Copilot's proxy answers in it for Claude whichever route was used.
PARSERS: dict[str, tuple[Parser, ...]] = {
    "openai-chat": (parse_openai_rejection, parse_copilot_messages_rejection),
    "openai-responses": (parse_openai_rejection, parse_copilot_messages_rejection),
    "anthropic": (parse_copilot_messages_rejection,),
    "gemini": (parse_gemini_rejection,),
}


def parse_level_rejection(api: str, status: int, body: bytes | str, *, provider: str) -> ThinkingLevelRejected | None:
    """A ``ThinkingLevelRejected`` if ``body`` (a ``status`` answer on ``api``) refuses a thinking level, else None."""
    if status != 400:
        return None
    for parser in PARSERS.get(api, ()):
        found = parser(body)
        if found is not None:
            return ThinkingLevelRejected(
                f"{provider} answered HTTP 400: {found.message}",
                provider=provider,
                status=status,
                kind=found.kind,
                rejected=found.rejected,
                allowed=found.allowed,
            )
    return None
