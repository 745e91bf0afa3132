"""What each Chat Completions server wants *sent* beyond the standard API: one ``ChatDialect`` each.

The Chat adapter (``daemon.providers.openai_chat``) builds one body and one history for all
of them and asks the request's dialect only for the differences: the output-limit field,
how to ask for usage, parallel tool calls, and which reasoning fields go back to the
server on an assistant turn (DeepSeek ``reasoning_content`` on tool-call turns, Copilot
``reasoning_text`` + ``reasoning_opaque``, OpenRouter ``reasoning_details``). Which
provider speaks which dialect is ``daemon.vendors.table``'s (``ProviderInfo.chat_dialect``,
and its ``hosts`` for providers of the user's); a server we know nothing of is ``compat``.

Parsing does not depend on the dialect: every field is understood wherever it shows up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.conversation import Part

# (replayable thinking parts, tool-call parts) -> fields to add to the assistant message
ReasoningReplay = Callable[[list[Part], list[Part]], dict[str, Any]]


def _no_reasoning(thinking: list[Part], calls: list[Part]) -> dict[str, Any]:
    return {}


def _reasoning_content(thinking: list[Part], calls: list[Part]) -> dict[str, Any]:
    # Required on every later request once a thinking turn called tools (400 otherwise),
    # even when empty; not wanted on plain turns.
    return {"reasoning_content": "".join(p.text for p in thinking)} if calls else {}


def _reasoning_opaque(thinking: list[Part], calls: list[Part]) -> dict[str, Any]:
    opaque = [(p.provider_data or {}).get("reasoning_opaque") for p in thinking]
    opaque = [o for o in opaque if isinstance(o, str) and o]
    if not opaque:  # clients send the text only together with its opaque state
        return {}
    return {"reasoning_text": "".join(p.text for p in thinking), "reasoning_opaque": opaque[-1]}


def _reasoning_details(thinking: list[Part], calls: list[Part]) -> dict[str, Any]:
    details = [d for p in thinking for d in (p.provider_data or {}).get("reasoning_details") or []]
    return {"reasoning_details": details} if details else {}


_INCLUDE_USAGE: dict[str, Any] = {"stream_options": {"include_usage": True}}


@dataclass(frozen=True)
class ChatDialect:
    name: str
    # The output limit's field: OpenAI deprecated max_tokens and its reasoning models reject
    # it, while every current OpenAI chat model takes max_completion_tokens (no model-name
    # guessing); the compatible servers only know max_tokens.
    max_tokens_field: str = "max_tokens"
    parallel_tool_calls: bool = False
    json_schema: bool = False  # takes response_format json_schema with strict: true (native structured output)
    # Body fields that make the server report usage on a stream (merged into the body).
    usage_request: dict[str, Any] = field(default_factory=lambda: dict(_INCLUDE_USAGE))
    replay_reasoning: ReasoningReplay = _no_reasoning


DIALECTS: dict[str, ChatDialect] = {
    dialect.name: dialect
    for dialect in (
        ChatDialect("openai", max_tokens_field="max_completion_tokens", parallel_tool_calls=True, json_schema=True),
        ChatDialect("deepseek", replay_reasoning=_reasoning_content),
        # Copilot's proxy reports usage on its last chunk unasked (and is not known to accept stream_options).
        ChatDialect("copilot", usage_request={}, replay_reasoning=_reasoning_opaque),
        ChatDialect("openrouter", usage_request={"usage": {"include": True}}, replay_reasoning=_reasoning_details),
        ChatDialect("dashscope"),
        ChatDialect("compat"),
    )
}
