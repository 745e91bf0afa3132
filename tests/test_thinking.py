"""Thinking levels: parsing, and exactly what each model family is sent for each level."""

import pytest

from daemon.catalog import ModelSpec, builtin_specs
from daemon.errors import InvalidParams
from daemon.providers.models import ollama_spec
from daemon.thinking import (
    ALLOWED_LEVEL_NAMES,
    LEVELS,
    ThinkingControl,
    parse_display,
    parse_fallback,
    parse_level,
    resolve_thinking,
)

SPECS = {spec.id: spec for spec in builtin_specs()}


def spec(model_id: str) -> ModelSpec:
    return SPECS[model_id]


ADAPTIVE = {"thinking": {"type": "adaptive", "display": "summarized"}}


def adaptive(effort: str, max_tokens: int) -> dict:
    return {**ADAPTIVE, "output_config": {"effort": effort}, "max_tokens": max_tokens}


# (model id, requested, effective, reason?, request_params, budget_tokens)
CASES = [
    # Anthropic adaptive: effort, off = omit, no minimal; Opus 4.7+ take xhigh, 4.6 do not.
    # max_tokens rises with the effort (a share of the 128k / 64k output limit).
    ("anthropic/claude-opus-4-7", "high", "high", False, adaptive("high", 64000), None),
    ("anthropic/claude-opus-4-7", "xhigh", "xhigh", False, adaptive("xhigh", 96000), None),
    ("anthropic/claude-opus-4-7", "max", "max", False, adaptive("max", 128000), None),
    ("anthropic/claude-opus-4-7", "minimal", "low", True, adaptive("low", 16000), None),
    ("anthropic/claude-opus-4-8", "off", "off", False, {}, None),
    ("anthropic/claude-opus-4-8", "xhigh", "xhigh", False, adaptive("xhigh", 96000), None),
    ("anthropic/claude-sonnet-4-6", "max", "max", False, adaptive("max", 64000), None),
    ("anthropic/claude-sonnet-4-6", "xhigh", "high", True, adaptive("high", 32000), None),
    ("anthropic/claude-opus-4-6", "medium", "medium", False, adaptive("medium", 32000), None),
    # Anthropic manual budget (4.5): budget < max_tokens, max_tokens within the 64k cap.
    ("anthropic/claude-sonnet-4-5", "off", "off", False, {}, None),
    ("anthropic/claude-sonnet-4-5", "minimal", "minimal", False,
     {"max_tokens": 16000, "thinking": {"type": "enabled", "budget_tokens": 1024}}, 1024),
    ("anthropic/claude-sonnet-4-5", "low", "low", False,
     {"max_tokens": 16064, "thinking": {"type": "enabled", "budget_tokens": 7872}}, 7872),
    ("anthropic/claude-haiku-4-5", "high", "high", False,
     {"max_tokens": 36608, "thinking": {"type": "enabled", "budget_tokens": 28416}}, 28416),
    ("anthropic/claude-sonnet-4-5", "xhigh", "xhigh", False,
     {"max_tokens": 50304, "thinking": {"type": "enabled", "budget_tokens": 42112}}, 42112),
    ("anthropic/claude-opus-4-5", "max", "max", False,
     {"max_tokens": 64000, "thinking": {"type": "enabled", "budget_tokens": 55808}}, 55808),
    # OpenAI Responses: none for off on 5.1+, xhigh on 5.2+ and no max anywhere.
    ("openai/gpt-5.2", "max", "xhigh", True, {"reasoning": {"effort": "xhigh", "summary": "auto"}}, None),
    ("openai/gpt-5.2", "xhigh", "xhigh", False, {"reasoning": {"effort": "xhigh", "summary": "auto"}}, None),
    ("openai/gpt-5.2", "minimal", "low", True, {"reasoning": {"effort": "low", "summary": "auto"}}, None),
    ("openai/gpt-5.2", "off", "off", False, {"reasoning": {"effort": "none"}}, None),
    ("openai/gpt-5.5", "off", "off", False, {"reasoning": {"effort": "none"}}, None),
    ("openai/gpt-5.1", "max", "high", True, {"reasoning": {"effort": "high", "summary": "auto"}}, None),
    ("openai/gpt-5.1", "xhigh", "high", True, {"reasoning": {"effort": "high", "summary": "auto"}}, None),
    ("openai/gpt-5.1", "minimal", "low", True, {"reasoning": {"effort": "low", "summary": "auto"}}, None),
    ("openai/gpt-5-pro", "low", "high", True, {"reasoning": {"effort": "high", "summary": "auto"}}, None),
    ("openai/gpt-5-pro", "off", "high", True, {"reasoning": {"effort": "high", "summary": "auto"}}, None),
    ("openai/gpt-5", "off", "minimal", True, {"reasoning": {"effort": "minimal", "summary": "auto"}}, None),
    ("openai/gpt-5-mini", "medium", "medium", False, {"reasoning": {"effort": "medium", "summary": "auto"}}, None),
    ("openai/gpt-5-mini", "xhigh", "high", True, {"reasoning": {"effort": "high", "summary": "auto"}}, None),
    ("openai/o3", "minimal", "low", True, {"reasoning": {"effort": "low", "summary": "auto"}}, None),
    ("openai/o4-mini", "max", "high", True, {"reasoning": {"effort": "high", "summary": "auto"}}, None),
    # Non-reasoning models are always off, nothing sent.
    ("openai/gpt-4.1", "high", "off", True, {}, None),
    ("openai/gpt-4.1", "off", "off", False, {}, None),
    # Copilot: narrower lists than the vendor's; "detailed" summaries as GitHub's client asks;
    # Claude takes a flat thinking_budget capped at 32000 by the proxy.
    ("copilot/gpt-5.2", "max", "high", True, {"reasoning": {"effort": "high", "summary": "detailed"}}, None),
    ("copilot/gpt-5.2", "off", "low", True, {"reasoning": {"effort": "low", "summary": "detailed"}}, None),
    ("copilot/gpt-5-mini", "xhigh", "high", True, {"reasoning": {"effort": "high", "summary": "detailed"}}, None),
    ("copilot/gpt-5-mini", "minimal", "low", True, {"reasoning": {"effort": "low", "summary": "detailed"}}, None),
    ("copilot/gpt-5.5", "xhigh", "xhigh", False, {"reasoning": {"effort": "xhigh", "summary": "detailed"}}, None),
    ("copilot/gpt-5.4", "off", "off", False, {"reasoning": {"effort": "none"}}, None),
    ("copilot/claude-sonnet-4.5", "low", "low", False, {"max_tokens": 16000, "thinking_budget": 4896}, 4896),
    ("copilot/claude-sonnet-4.5", "max", "max", True, {"max_tokens": 32000, "thinking_budget": 23808}, 23808),
    ("copilot/claude-opus-4.6", "max", "max", True, {"max_tokens": 40192, "thinking_budget": 32000}, 32000),
    ("copilot/claude-sonnet-4.5", "off", "off", False, {}, None),
    ("copilot/claude-opus-4.7", "high", "medium", True, {"max_tokens": 16960, "thinking_budget": 8768}, 8768),
    ("copilot/claude-opus-4.7", "off", "off", False, {}, None),
    ("copilot/gemini-2.5-pro", "medium", "off", True, {}, None),
    # Gemini 2.5: budgets; Pro cannot disable (128), Flash takes 0.
    ("gemini/gemini-2.5-pro", "off", "minimal", True,
     {"generationConfig": {"thinkingConfig": {"thinkingBudget": 128, "includeThoughts": True}}}, 128),
    ("gemini/gemini-2.5-pro", "high", "high", False,
     {"generationConfig": {"thinkingConfig": {"thinkingBudget": 16448, "includeThoughts": True}}}, 16448),
    ("gemini/gemini-2.5-flash", "off", "off", False,
     {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, 0),
    ("gemini/gemini-2.5-flash", "xhigh", "xhigh", False,
     {"generationConfig": {"thinkingConfig": {"thinkingBudget": 18688, "includeThoughts": True}}}, 18688),
    ("gemini/gemini-2.5-flash", "max", "max", False,
     {"generationConfig": {"thinkingConfig": {"thinkingBudget": 24576, "includeThoughts": True}}}, 24576),
    ("gemini/gemini-2.5-flash-lite", "medium", "medium", False,
     {"generationConfig": {"thinkingConfig": {"thinkingBudget": 6528, "includeThoughts": True}}}, 6528),
    # Gemini 3: thinkingLevel, never off, no xhigh/max; 3.1 Pro has no minimal.
    ("gemini/gemini-3.1-pro-preview", "minimal", "low", True,
     {"generationConfig": {"thinkingConfig": {"thinkingLevel": "low", "includeThoughts": True}}}, None),
    ("gemini/gemini-3.1-pro-preview", "xhigh", "high", True,
     {"generationConfig": {"thinkingConfig": {"thinkingLevel": "high", "includeThoughts": True}}}, None),
    ("gemini/gemini-3-flash-preview", "off", "minimal", True,
     {"generationConfig": {"thinkingConfig": {"thinkingLevel": "minimal", "includeThoughts": True}}}, None),
    # DeepSeek V4: thinks unless told not to (off = disabled); low|high|max; max_tokens rises.
    ("deepseek/deepseek-v4-pro", "high", "high", False,
     {"thinking": {"type": "enabled"}, "reasoning_effort": "high", "max_tokens": 192000}, None),
    ("deepseek/deepseek-v4-pro", "medium", "low", True, {"thinking": {"type": "enabled"}, "reasoning_effort": "low"}, None),
    ("deepseek/deepseek-v4-pro", "xhigh", "high", True,
     {"thinking": {"type": "enabled"}, "reasoning_effort": "high", "max_tokens": 192000}, None),
    ("deepseek/deepseek-v4-flash", "off", "off", False, {"thinking": {"type": "disabled"}}, None),
    ("deepseek/deepseek-flash", "max", "max", False,
     {"thinking": {"type": "enabled"}, "reasoning_effort": "max", "max_tokens": 384000}, None),
    ("deepseek/deepseek-reasoner", "off", "high", True,
     {"thinking": {"type": "enabled"}, "reasoning_effort": "high", "max_tokens": 192000}, None),
    ("deepseek/deepseek-chat", "max", "off", True, {}, None),
    # DashScope: enable_thinking (always explicit where the model thinks) + thinking_budget;
    # a model without thinking gets no field at all.
    ("dashscope/qwen-plus", "off", "off", False, {"enable_thinking": False}, None),
    ("dashscope/qwen3.5-plus", "off", "off", False, {"enable_thinking": False}, None),
    ("dashscope/qwen-plus", "medium", "medium", False, {"enable_thinking": True, "thinking_budget": 8960}, 8960),
    ("dashscope/qwq-plus", "off", "minimal", True, {"enable_thinking": True, "thinking_budget": 1024}, 1024),
    ("dashscope/qwen3-max", "high", "off", True, {}, None),
    ("dashscope/qwen3-max", "off", "off", False, {}, None),
    # OpenRouter: normalised reasoning object; its scale tops out at xhigh.
    ("openrouter/anthropic/claude-sonnet-4.5", "medium", "medium", False, {"reasoning": {"effort": "medium"}}, None),
    ("openrouter/anthropic/claude-sonnet-4.5", "max", "xhigh", True, {"reasoning": {"effort": "xhigh"}}, None),
    ("openrouter/anthropic/claude-sonnet-4.5", "off", "off", False, {"reasoning": {"effort": "none"}}, None),
    ("openrouter/openai/gpt-5.2", "minimal", "low", True, {"reasoning": {"effort": "low"}}, None),
    ("openrouter/google/gemini-2.5-pro", "off", "minimal", True, {"reasoning": {"effort": "minimal"}}, None),
    ("openrouter/deepseek/deepseek-v3.2", "high", "medium", True, {"reasoning": {"enabled": True}}, None),
    # Mock.
    ("mock/thinker", "max", "max", False, {"mock_thinking_level": "max"}, None),
    ("mock/thinker", "off", "low", True, {"mock_thinking_level": "low"}, None),
    ("mock/echo", "high", "off", True, {}, None),
    ("mock/tools", "max", "high", True, {"mock_thinking_level": "high"}, None),
    ("mock/tools", "off", "off", False, {}, None),
]  # fmt: skip


@pytest.mark.parametrize(("model_id", "requested", "effective", "has_reason", "params", "budget"), CASES)
def test_resolution_table(model_id, requested, effective, has_reason, params, budget):
    thinking = resolve_thinking(spec(model_id), requested)
    assert thinking.requested == requested
    assert thinking.effective == effective
    assert (thinking.reason is not None) == has_reason
    assert thinking.request_params == params
    assert thinking.budget_tokens == budget
    assert thinking.supported == list(spec(model_id).thinking_levels)


def test_table_covers_every_family_and_rule():
    families = {model_id.split("/")[0] for model_id, *_ in CASES}
    assert families == {"anthropic", "openai", "copilot", "gemini", "deepseek", "dashscope", "openrouter", "mock"}
    assert len(CASES) >= 30


# --- reasons: one plain sentence that says why --------------------------------------


@pytest.mark.parametrize(
    ("model_id", "requested", "reason"),
    [
        (
            "anthropic/claude-opus-4-7",
            "minimal",
            "anthropic/claude-opus-4-7 cannot take 'minimal'; using 'low', the nearest supported level above.",
        ),
        (
            "openai/gpt-5.1",
            "max",
            "openai/gpt-5.1 cannot take 'max'; using 'high', the nearest supported level below.",
        ),
        (
            "gemini/gemini-2.5-pro",
            "off",
            "gemini/gemini-2.5-pro cannot turn thinking off; using its lowest level 'minimal'.",
        ),
        ("copilot/gpt-5.2", "max", "Copilot's proxy does not accept 'max'; clamped to 'high'."),
        (
            "copilot/gpt-5.2",
            "off",
            "Copilot's proxy cannot turn thinking off for copilot/gpt-5.2; using its lowest level 'low'.",
        ),
        ("openai/gpt-4.1", "high", "openai/gpt-4.1 has no thinking mode; using 'off'."),
        (
            "openrouter/deepseek/deepseek-v3.2",
            "low",
            "openrouter/deepseek/deepseek-v3.2 can only switch thinking on or off; 'medium' stands for on.",
        ),
    ],
)
def test_reason_sentences(model_id, requested, reason):
    assert resolve_thinking(spec(model_id), requested).reason == reason


def test_thinking_request_is_never_downgraded_to_off():
    # deepseek-reasoner has high, max only: "minimal" has nothing below it, so it goes up.
    assert resolve_thinking(spec("deepseek/deepseek-reasoner"), "minimal").effective == "high"
    # deepseek-v4 has off, low, high, max: "minimal" has only "off" below it, which is not thinking.
    assert resolve_thinking(spec("deepseek/deepseek-v4-pro"), "minimal").effective == "low"


# --- invariants over the whole table -------------------------------------------------


@pytest.mark.parametrize("model_id", sorted(SPECS))
def test_invariants_for_every_model_and_level(model_id):
    model = spec(model_id)
    for level in LEVELS:
        thinking = resolve_thinking(model, level)
        assert thinking.effective in thinking.supported
        if thinking.requested != thinking.effective:
            assert thinking.reason is not None
        elif thinking.reason is not None:  # only a proxy's budget cap explains an unchanged level
            assert model.thinking.limited_by and level == "max"
        if thinking.reason:
            assert thinking.reason.endswith(".") and thinking.reason.count(". ") == 0
        if not model.supports_thinking:
            assert thinking.effective == "off"
            assert thinking.request_params == {}  # no thinking field at all
        body = thinking.request_params
        if model.thinking.param == "anthropic-budget" and thinking.effective != "off":
            assert body["thinking"]["budget_tokens"] < body["max_tokens"] <= model.max_output_tokens
            assert body["thinking"]["budget_tokens"] == thinking.budget_tokens
        if "thinking_budget" in body and "max_tokens" in body:
            assert body["thinking_budget"] < body["max_tokens"] <= model.max_output_tokens
        if "max_tokens" in body and model.max_output_tokens:
            assert body["max_tokens"] <= model.max_output_tokens
    # Budgets grow with the level.
    budgets = [resolve_thinking(model, level).budget_tokens for level in model.thinking.thinking_levels]
    if model.thinking.kind == "budget":
        assert budgets == sorted(budgets)
        assert len(set(budgets)) == len(budgets) or model.thinking.limited_by  # a proxy cap may flatten the top


def test_budget_is_capped_by_a_small_output_limit():
    small = ModelSpec(
        provider="local",
        model="tiny-claude",
        name="Tiny",
        api="anthropic",
        max_output_tokens=12000,
        thinking=ThinkingControl(kind="budget", param="anthropic-budget", levels=LEVELS, default="medium"),
    )
    thinking = resolve_thinking(small, "max")
    assert thinking.effective == "max" and thinking.reason is None
    assert thinking.request_params == {"max_tokens": 12000, "thinking": {"type": "enabled", "budget_tokens": 3808}}
    assert thinking.budget_tokens == 3808


# --- Ollama -------------------------------------------------------------------------


def test_ollama_think_values():
    qwen = ollama_spec("qwen3:8b", ["completion", "tools", "thinking"])
    assert resolve_thinking(qwen, "off").request_params == {"think": False}
    on = resolve_thinking(qwen, "high")
    assert (on.effective, on.request_params) == ("medium", {"think": True}) and on.reason
    gpt_oss = ollama_spec("gpt-oss:20b", ["completion", "tools", "thinking"])
    assert resolve_thinking(gpt_oss, "medium").request_params == {"think": "medium"}
    assert resolve_thinking(gpt_oss, "off").request_params == {"think": "low"}
    plain = ollama_spec("llama3.2:3b", ["completion"])
    assert (resolve_thinking(plain, "high").request_params, plain.supports_tools) == ({}, False)


# --- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("off", "off"),
        ("none", "off"),
        ("  None ", "off"),
        ("MED", "medium"),
        ("medium", "medium"),
        ("xhigh", "xhigh"),  # its own level since issue #18 (no longer an alias of max)
        ("ultra", "max"),
        ("Max", "max"),
        ("minimal", "minimal"),
        ("default", "default"),
        ("AUTO", "default"),
    ],
)
def test_parse_level(text, level):
    assert parse_level(text) == level


def test_the_scale_is_in_order():
    assert LEVELS == ("off", "minimal", "low", "medium", "high", "xhigh", "max")


@pytest.mark.parametrize("text", ["turbo", "", "hi", "3", None, 3])
def test_unknown_level_is_invalid_params_with_allowed(text):
    with pytest.raises(InvalidParams) as info:
        parse_level(text, path="$.thinking_level")
    data = info.value.data
    assert data["allowed"] == ALLOWED_LEVEL_NAMES
    assert set(data["allowed"]) >= {"off", "minimal", "low", "medium", "high", "xhigh", "max", "none", "med", "ultra"}
    assert data["errors"][0]["path"] == "$.thinking_level"


@pytest.mark.parametrize(
    ("parse", "good", "bad", "allowed"),
    [
        (parse_display, " Omitted", "hidden", ["summarized", "omitted"]),
        (parse_fallback, "ERROR", "closest", ["nearest", "off", "default", "error"]),
    ],
)
def test_display_and_fallback_parse_or_refuse_with_allowed(parse, good, bad, allowed):
    assert parse(good) == good.strip().lower()
    with pytest.raises(InvalidParams) as info:
        parse(bad, path="$.params.x")
    assert info.value.data["allowed"] == allowed and info.value.data["errors"][0]["path"] == "$.params.x"


def test_resolve_rejects_an_unknown_level():
    with pytest.raises(InvalidParams):
        resolve_thinking(spec("mock/thinker"), "loud")


def test_aliases_resolve_like_their_levels():
    model = spec("anthropic/claude-opus-4-7")
    assert resolve_thinking(model, "ultra") == resolve_thinking(model, "max")
    assert resolve_thinking(model, "none") == resolve_thinking(model, "off")
    assert resolve_thinking(model, "xhigh").request_params["output_config"] == {"effort": "xhigh"}


# --- default -------------------------------------------------------------------------


def test_default_resolves_to_the_models_default_and_records_it():
    thinking = resolve_thinking(spec("mock/thinker"), "default")
    assert (thinking.requested, thinking.effective, thinking.reason) == ("medium", "medium", None)
    assert resolve_thinking(spec("gemini/gemini-3.1-pro-preview"), "auto").requested == "high"


def test_default_can_be_overridden_and_is_then_resolved_honestly():
    thinking = resolve_thinking(spec("openai/gpt-5.1"), "default", default_level="xhigh")
    assert (thinking.requested, thinking.effective) == ("xhigh", "high")
    assert thinking.reason is not None


def test_resolution_is_pure():
    model = spec("anthropic/claude-sonnet-4-5")
    assert resolve_thinking(model, "high") == resolve_thinking(model, "high")
