"""How each API spells a thinking level: the request fragment builders, keyed by ``ThinkingControl.param``.

``daemon.catalog.decide.decide_thinking`` picks the effective level; the builder named by the
model's control turns it into the exact JSON fragment its adapter merges into the request
body (and the budget it stands for). One builder per spelling: Anthropic's adaptive effort
and manual budget, Copilot's flat ``thinking_budget``, OpenAI's ``reasoning_effort`` (Chat)
and ``reasoning.effort`` (Responses), Gemini's ``thinkingLevel`` / ``thinkingBudget``,
Ollama's ``think``, DeepSeek's ``thinking`` switch, DashScope's ``enable_thinking`` +
``thinking_budget``, OpenRouter's ``reasoning`` and the mock's own field.

Each builder also maps the display switch (``summarized`` / ``omitted``) onto its API:
Anthropic ``thinking.display``, Responses ``reasoning.summary`` (asked for, or left out),
Gemini ``includeThoughts``, OpenRouter ``reasoning.exclude``; ``DISPLAY_SWITCHES`` says
which APIs have none (``daemon.catalog.decide`` then says so in ``reason``). A builder takes a
custom budget (already clamped) where its API is budget-steered.

"Absent is not off": a model that thinks unless told not to gets its explicit off form
(``ThinkingControl.values["off"]``, ``thinking: disabled``, ``enable_thinking: false``,
``think: false``); a model without thinking gets no thinking field at all; a declared
model whose ``off_value`` is ``"omit"`` (``values["off"] == ""``) gets nothing for off.

Reasoning eats the output budget: where the API's default output limit is below the
model's (Anthropic's required ``max_tokens``, DeepSeek's ``max_tokens``), the fragment
carries ``daemon.models.budgets.output_limit`` for the level. APIs whose default is the model's
own limit (OpenAI, Gemini, Ollama) get no output field: a number there could only lower it.

Anthropic budget mode needs ``budget_tokens < max_tokens``, and ``max_tokens`` caps the
thinking *and* the answer: its fragment (and Copilot's, for Claude) carries the
``max_tokens`` of ``daemon.models.budgets.budget_and_max_tokens``.

Pure: no I/O, no adapter imports (resolving a level must not import httpx).
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from daemon.models.budgets import BASE_MAX_TOKENS, budget_and_max_tokens, budget_for, output_limit
from protocol.objects import ThinkingDisplay

if TYPE_CHECKING:
    from daemon.models.spec import ModelSpec

# Each takes the spec, the *effective* level, the display and a custom budget (clamped;
# None: the level's own) and returns (request_params, budget_tokens).

Fragment = tuple[dict[str, Any], int | None]
Builder = Callable[["ModelSpec", str, ThinkingDisplay, "int | None"], Fragment]
# What an API's display switch is: "switch" (it has one), "always" (thinking text is
# streamed whenever the model thinks, no way to hide it), "never" (no thinking text at all).
DisplaySwitch = Literal["switch", "always", "never"]

# Reasoning summaries on the Responses API. Copilot: GitHub's own client sends "detailed"
# (setting chat.responsesApiReasoningSummary, enum off|detailed) and never "auto"
# (microsoft/vscode-copilot-chat @ 31acd00a; research note §8.3); OpenAI documents
# auto|concise|detailed (openai-python src/openai/types/shared/reasoning.py).
RESPONSES_SUMMARY: dict[str, str] = {"copilot": "detailed"}


def _off_value(spec: "ModelSpec") -> str | None:
    """The explicit off value, or None when off is "send nothing" (no entry, or a declared "omit")."""
    return spec.thinking.values.get("off") or None


def _omits_off(spec: "ModelSpec") -> bool:
    return spec.thinking.values.get("off") == ""


def _none(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    return {}, None


def _mock(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    return ({} if level == "off" else {"mock_thinking_level": level}), None


def _anthropic_adaptive(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    # Adaptive models (4.6+) think only when asked, so "off" is omitting ``thinking``: never
    # {type: "disabled"}, which newer Bedrock docs say Opus 4.7 rejects (research §1).
    if level == "off":
        return {}, None
    # display is sent either way: Opus 4.7+ default to "omitted" (empty thinking, a
    # signature only), 4.6 to "summarized" (platform.claude.com adaptive-thinking docs).
    params: dict[str, Any] = {
        "thinking": {"type": "adaptive", "display": display},
        "output_config": {"effort": spec.thinking.value(level)},
    }
    limit = output_limit(spec, level)
    if limit is not None:
        params["max_tokens"] = limit
    return params, None


def _anthropic_budget(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    if level == "off":
        return {}, None
    budget, max_tokens = budget_and_max_tokens(spec, level, budget)
    config: dict[str, Any] = {"type": "enabled", "budget_tokens": budget}
    # "summarized" is these models' default, so it is not sent; "omitted" is, as the SDK's
    # ThinkingConfigEnabledParam allows display with budget thinking (research §1; whether
    # 4.5-era models honour it is unconfirmed).
    if display == "omitted":
        config["display"] = "omitted"
    return {"max_tokens": max_tokens, "thinking": config}, budget


def _copilot_budget(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    # Claude through Copilot's chat proxy: a flat thinking_budget, what GitHub's own client
    # sent on /chat/completions until 2026-03-25 (vscode-copilot-chat 8f695283b; the field
    # is still typed in networking.ts) and fixture openai-chat/copilot-claude-reasoning.
    # Same < max_tokens rule; thinking arrives as reasoning_text, with no display switch.
    if level == "off":
        return {}, None
    budget, max_tokens = budget_and_max_tokens(spec, level, budget)
    return {"max_tokens": max_tokens, "thinking_budget": budget}, budget


def _reasoning_effort(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    # Chat Completions. "off" is sent only when the model has an off value ("none");
    # a model without thinking gets nothing (non-reasoning models reject the field).
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        value = _off_value(spec)
        return ({"reasoning_effort": value} if value and spec.thinking.can_disable else {}), None
    return {"reasoning_effort": spec.thinking.value(level)}, None


def _responses_effort(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        value = _off_value(spec)
        return ({"reasoning": {"effort": value}} if value and spec.thinking.can_disable else {}), None
    reasoning = {"effort": spec.thinking.value(level)}
    if display == "summarized":  # no summary key: the model reasons, and no summary is written
        reasoning["summary"] = RESPONSES_SUMMARY.get(spec.provider, "auto")
    return {"reasoning": reasoning}, None


def _gemini_level(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    if spec.thinking.kind == "none" or level == "off":  # Gemini 3 cannot disable thinking
        return {}, None
    config = {"thinkingLevel": spec.thinking.value(level), "includeThoughts": display == "summarized"}
    return {"generationConfig": {"thinkingConfig": config}}, None


def _gemini_budget(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":  # Flash / Flash-Lite: a zero budget is the documented off switch
        return {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, 0
    budget = budget_for(spec, level, budget)
    config = {"thinkingBudget": budget, "includeThoughts": display == "summarized"}
    return {"generationConfig": {"thinkingConfig": config}}, budget


def _think(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    # Ollama's ``think``: omitted for models without thinking; a boolean for on/off
    # models; a level string for models that take one (gpt-oss). Absent is ON for a
    # thinking model (ollama server/routes.go), so off is sent as false.
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        return ({} if _omits_off(spec) else {"think": False}), None
    if spec.thinking.kind == "toggle":
        return {"think": True}, None
    return {"think": spec.thinking.value(level)}, None


def _enable_thinking(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    if spec.thinking.kind == "none" or (level == "off" and _omits_off(spec)):
        return {}, None
    return {"enable_thinking": level != "off"}, None


def _deepseek(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    # V4 thinks unless told not to ("Thinking mode is enabled by default", api-docs.deepseek.com
    # /guides/thinking_mode): off is the explicit disabled switch. max_tokens covers the CoT.
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        return {"thinking": {"type": "disabled"}}, None
    params: dict[str, Any] = {"thinking": {"type": "enabled"}, "reasoning_effort": spec.thinking.value(level)}
    limit = output_limit(spec, level)
    if limit is not None and limit > BASE_MAX_TOKENS:  # raise only: its own default is not documented
        params["max_tokens"] = limit
    return params, None


def _dashscope(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    # Sent explicitly even when off: Qwen defaults differ per model (3.5 on, 3 off). A model
    # without thinking gets nothing. Its max_tokens is the answer only (the CoT is capped by
    # thinking_budget), so no output limit rides along.
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        return {"enable_thinking": False}, None
    budget = budget_for(spec, level, budget)
    return {"enable_thinking": True, "thinking_budget": budget}, budget


def _openrouter(spec: "ModelSpec", level: str, display: ThinkingDisplay, budget: int | None) -> Fragment:
    control = spec.thinking
    if control.kind == "none":
        return {}, None
    hide = {"exclude": True} if display == "omitted" and level != "off" else {}
    if control.kind == "toggle":
        return {"reasoning": {"enabled": level != "off", **hide}}, None
    return {"reasoning": {"effort": control.value(level), **hide}}, None


FRAGMENTS: dict[str, Builder] = {
    "none": _none,
    "mock": _mock,
    "anthropic-adaptive": _anthropic_adaptive,
    "anthropic-budget": _anthropic_budget,
    "copilot-budget": _copilot_budget,
    "reasoning_effort": _reasoning_effort,
    "responses": _responses_effort,
    "gemini-level": _gemini_level,
    "gemini-budget": _gemini_budget,
    "think": _think,
    "enable_thinking": _enable_thinking,
    "deepseek": _deepseek,
    "dashscope": _dashscope,
    "openrouter": _openrouter,
}

# Research note §10.2 (docs/research/thinking-controls.md): which APIs can hide thinking.
DISPLAY_SWITCHES: dict[str, DisplaySwitch] = {
    "none": "always",  # never thinks; no note is given for "off"
    "mock": "always",
    "anthropic-adaptive": "switch",
    "anthropic-budget": "switch",
    "copilot-budget": "always",  # /chat/completions streams reasoning_text, no knob
    "reasoning_effort": "always",  # compatible servers stream reasoning_content; no knob
    "responses": "switch",
    "gemini-level": "switch",
    "gemini-budget": "switch",
    "think": "always",
    "enable_thinking": "always",
    "deepseek": "always",
    "dashscope": "always",
    "openrouter": "switch",
}
assert set(DISPLAY_SWITCHES) == set(FRAGMENTS)
