"""How each API spells a thinking level: the request fragment builders, keyed by ``ThinkingControl.param``.

``daemon.thinking.resolve_thinking`` picks the effective level; the builder named by the
model's control turns it into the exact JSON fragment its adapter merges into the request
body (and the budget it stands for). One builder per spelling: Anthropic's adaptive effort
and manual budget, Copilot's flat ``thinking_budget``, OpenAI's ``reasoning_effort`` (Chat)
and ``reasoning.effort`` (Responses), Gemini's ``thinkingLevel`` / ``thinkingBudget``,
Ollama's ``think``, DeepSeek's ``thinking`` switch, DashScope's ``enable_thinking`` +
``thinking_budget``, OpenRouter's ``reasoning`` and the mock's own field.

Anthropic budget mode needs ``budget_tokens < max_tokens``, and ``max_tokens`` caps the
thinking *and* the answer: its fragment (and Copilot's, for Claude) carries the
``max_tokens`` of ``daemon.thinking.budget_and_max_tokens``.

Pure: no I/O, no adapter imports (resolving a level must not import httpx).
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from daemon.thinking import budget_and_max_tokens, budget_for

if TYPE_CHECKING:
    from daemon.model_spec import ModelSpec

# Each takes the spec and the *effective* level and returns (request_params, budget_tokens).

Fragment = tuple[dict[str, Any], int | None]


def _none(spec: "ModelSpec", level: str) -> Fragment:
    return {}, None


def _mock(spec: "ModelSpec", level: str) -> Fragment:
    return ({} if level == "off" else {"mock_thinking_level": level}), None


def _anthropic_adaptive(spec: "ModelSpec", level: str) -> Fragment:
    # Adaptive models (4.6+) think only when asked, so "off" is simply omitting it.
    if level == "off":
        return {}, None
    effort = spec.thinking.value(level)
    # display: Opus 4.7+ default to "omitted" (signature only); we want the summary text.
    return {"thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": effort}}, None


def _anthropic_budget(spec: "ModelSpec", level: str) -> Fragment:
    if level == "off":
        return {}, None
    budget, max_tokens = budget_and_max_tokens(spec, level)
    return {"max_tokens": max_tokens, "thinking": {"type": "enabled", "budget_tokens": budget}}, budget


def _copilot_budget(spec: "ModelSpec", level: str) -> Fragment:
    # Claude through Copilot's chat proxy: a flat thinking_budget (what the OSS clients
    # send; fixture openai-chat/copilot-claude-reasoning), same < max_tokens rule.
    if level == "off":
        return {}, None
    budget, max_tokens = budget_and_max_tokens(spec, level)
    return {"max_tokens": max_tokens, "thinking_budget": budget}, budget


def _reasoning_effort(spec: "ModelSpec", level: str) -> Fragment:
    # Chat Completions. "off" is sent only when the model has an off value ("none");
    # a model without thinking gets nothing (non-reasoning models reject the field).
    if level == "off":
        value = spec.thinking.values.get("off")
        return ({"reasoning_effort": value} if value and spec.thinking.can_disable else {}), None
    return {"reasoning_effort": spec.thinking.value(level)}, None


def _responses_effort(spec: "ModelSpec", level: str) -> Fragment:
    if level == "off":
        value = spec.thinking.values.get("off")
        return ({"reasoning": {"effort": value}} if value and spec.thinking.can_disable else {}), None
    return {"reasoning": {"effort": spec.thinking.value(level), "summary": "auto"}}, None


def _gemini_level(spec: "ModelSpec", level: str) -> Fragment:
    if level == "off":  # Gemini 3 cannot disable thinking; only a declared model gets here
        return {}, None
    config = {"thinkingLevel": spec.thinking.value(level), "includeThoughts": True}
    return {"generationConfig": {"thinkingConfig": config}}, None


def _gemini_budget(spec: "ModelSpec", level: str) -> Fragment:
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":  # Flash / Flash-Lite: a zero budget is the documented off switch
        return {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, 0
    budget = budget_for(spec, level)
    return {"generationConfig": {"thinkingConfig": {"thinkingBudget": budget, "includeThoughts": True}}}, budget


def _think(spec: "ModelSpec", level: str) -> Fragment:
    # Ollama's ``think``: omitted for models without thinking; a boolean for on/off
    # models; a level string for models that take one (gpt-oss).
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        return {"think": False}, None
    if spec.thinking.kind == "toggle":
        return {"think": True}, None
    return {"think": spec.thinking.value(level)}, None


def _enable_thinking(spec: "ModelSpec", level: str) -> Fragment:
    return {"enable_thinking": level != "off"}, None


def _deepseek(spec: "ModelSpec", level: str) -> Fragment:
    if spec.thinking.kind == "none":
        return {}, None
    if level == "off":
        return {"thinking": {"type": "disabled"}}, None
    return {"thinking": {"type": "enabled"}, "reasoning_effort": spec.thinking.value(level)}, None


def _dashscope(spec: "ModelSpec", level: str) -> Fragment:
    # Sent explicitly even when off: Qwen defaults differ per model (3.5 on, 3 off).
    if level == "off":
        return {"enable_thinking": False}, None
    budget = budget_for(spec, level)
    return {"enable_thinking": True, "thinking_budget": budget}, budget


def _openrouter(spec: "ModelSpec", level: str) -> Fragment:
    control = spec.thinking
    if control.kind == "none":
        return {}, None
    if control.kind == "toggle":
        return {"reasoning": {"enabled": level != "off"}}, None
    return {"reasoning": {"effort": control.value(level)}}, None


FRAGMENTS: dict[str, Callable[["ModelSpec", str], Fragment]] = {
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
PARAMS = tuple(FRAGMENTS)
