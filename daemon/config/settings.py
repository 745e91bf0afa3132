"""The home directory, ``config.toml`` and the provider settings drawn from it and the environment.

Environment variables override ``config.toml``. A config file that does not parse, or a
provider with an unknown ``api``, is recorded in ``Config.problems`` (with its line where
known) and the daemon still starts with the rest. Secrets are wrapped in ``Secret`` so
that no repr, log line or error message can show them, and every ``Secret`` is added to
``daemon.util.redact``'s known credentials, masked in tool output, events, the store and logs.

What each built-in provider is (base URL, key variables, endpoints) is read from
``daemon.vendors.table``, as is which environment variables hold credentials
(``CREDENTIAL_ENV_VARS``). Also owns ``child_env``: the daemon's environment minus those
and any variable holding a known credential, for ``run_command``'s children; ``[tools]
pass_env`` names variables to pass anyway.
"""

import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import msgspec
from msgspec import field

from daemon.config.sandbox import SandboxSettings, parse_sandbox
from daemon.config.stored_login import load_github_token
from daemon.errors import InvalidParams
from daemon.util import redact
from daemon.util.secret import Secret
from daemon.vendors.table import CREDENTIAL_ENV_VARS, DEVICE_LOGIN_PROVIDERS, KNOWN_APIS, PROVIDERS, ProviderInfo
from daemon.vendors.table import key_hint as vendor_key_hint
from protocol.objects import ApprovalPolicy, Budget, ThinkingDisplay, ThinkingFallback

if TYPE_CHECKING:  # read only from a config that sets a price: off the start path otherwise
    from daemon.context.pricing import Price


def child_env(environ: Mapping[str, str], pass_env: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` without credentials, for a command's children.

    Dropped: the variables in ``CREDENTIAL_ENV_VARS`` and any variable whose value is a
    known credential (e.g. a provider's ``api_key_env``), unless named in ``pass_env``.
    """
    passed = set(pass_env)
    secrets = set(redact.known())
    return {
        name: value
        for name, value in environ.items()
        if name in passed or (name not in CREDENTIAL_ENV_VARS and value not in secrets)
    }


# Structs, not dataclasses: making a dataclass compiles its methods at import, a cost paid
# by every start of the daemon (tests/server/test_start_path.py).
class ProviderConfig(msgspec.Struct):
    name: str
    api: str
    base_url: str
    api_key: Secret | None = None
    key_source: str | None = None  # "env" | "config" | "login" | None
    key_hint: str = ""  # how to configure it (``daemon.vendors.table.key_hint``); filled when empty
    needs_key: bool = True
    models: list[dict[str, Any]] = field(default_factory=list)  # user-declared models
    # ``price`` of a ``[[providers.NAME.models]]`` entry, by model name (see daemon.context.pricing).
    prices: "dict[str, Price]" = field(default_factory=dict)
    default_thinking_level: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    problem: str | None = None  # set when the provider is unusable because of the config
    # Provider-specific URLs besides base_url (``ProviderInfo.endpoints``), e.g. where a
    # device sign-in runs; see daemon.providers.device_login.
    endpoints: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.key_hint:
            self.key_hint = vendor_key_hint(self.name)

    @property
    def configured(self) -> bool:
        return self.problem is None and (self.api_key is not None or not self.needs_key)


class CompactionSettings(msgspec.Struct, frozen=True):
    """``[compaction]``: when the history is folded into a summary, and by which model.

    ``auto`` turns every automatic path off (threshold and overflow); ``reserve_tokens`` is the
    room kept free below the context window; ``keep_recent_tokens`` about how much recent history
    stays verbatim; ``model``/``thinking_level`` the summarizer (None: the session's own).
    """

    auto: bool = True
    reserve_tokens: int = 20_000
    keep_recent_tokens: int = 20_000
    model: str | None = None
    thinking_level: str | None = None


class Config(msgspec.Struct):
    home: Path
    default_model: str | None = None
    default_thinking_level: str | None = None
    # [defaults] thinking_display / thinking_fallback (PROTOCOL.md "Thinking controls").
    default_thinking_display: ThinkingDisplay = "summarized"
    default_thinking_fallback: ThinkingFallback = "nearest"
    default_approval_policy: ApprovalPolicy = "ask"
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    mock_delay_ms: float = 15.0
    max_tool_steps: int = 50
    max_queued_prompts: int = 16
    retry_max_attempts: int = 4
    stall_timeout_s: float = 90.0
    # No real output (only keep-alives) for this long ends a response: see agent.TurnSettings.
    no_progress_timeout_s: float = 600.0
    # Caps on one provider response (defaults as in providers.base.StreamLimits).
    max_event_bytes: int = 16 * 1024 * 1024
    max_response_bytes: int = 1024 * 1024 * 1024
    scan_time_limit_s: float = 30.0  # one list_files or search, in its child process
    idle_unload_s: float = 600.0
    # [serve] approval_timeout_s: on a listening daemon, how long a permission request waits for a
    # controller able to answer to attach before it is denied (PROTOCOL.md "Transports").
    serve_approval_timeout_s: float = 300.0
    # [tools] pass_env: credential variables run_command's children get anyway (see child_env).
    pass_env: tuple[str, ...] = ()
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    budget: Budget | None = None  # [budget]: every new session's default budget
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)  # [sandbox] (daemon.config.sandbox)
    # [[permissions.rules]] and [[hooks.EVENT]] as read: checked by daemon.permissions, which
    # needs the shell parser to try each rule's examples. ``rule_lines``: each rule's line.
    permission_rules: list[Any] = field(default_factory=list)
    rule_lines: list[int] = field(default_factory=list)
    hooks: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    text: str = ""  # config.toml as read (for the lines of problems found later, e.g. by the catalogue)

    @property
    def db_path(self) -> Path:
        return self.home / "sessions.db"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


def resolve_home(cli_home: str | None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if cli_home:
        return Path(cli_home).expanduser().resolve()
    if env.get("PONDER_HOME"):
        return Path(env["PONDER_HOME"]).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("ponder", appauthor=False))


def load_config(home: Path, env: dict[str, str] | None = None) -> Config:
    """Read ``home/config.toml`` (if any) and the environment. Never raises for a bad file."""
    env = dict(os.environ) if env is None else env
    config = Config(home=home)
    raw: dict[str, Any] = {}
    path = home / "config.toml"
    text, problem = read_config_file(path)
    if problem is not None:
        config.problems.append(f"{path}: {problem}; ignoring the whole file.")
    elif text is not None:
        try:
            import tomllib  # only when there is a file: it costs start-up time

            raw = tomllib.loads(text)
            config.rule_lines = table_lines(text, "permissions.rules")
        except ValueError as exc:  # TOMLDecodeError
            config.problems.append(f"{path}: {_toml_error(exc)}; ignoring the whole file.")
            raw = {}
        except RecursionError:
            config.problems.append(f"{path}: tables or arrays nested too deeply to read; ignoring the whole file.")
            raw = {}
    for name in ("defaults", "reliability", "tools", "providers", "mcp_servers"):
        if name in raw and not isinstance(raw[name], dict):
            config.problems.append(f"config.toml: [{name}] must be a table, not {raw[name]!r}; using the defaults.")
    defaults = raw.get("defaults", {})
    if isinstance(defaults, dict):
        config.default_model = _text(defaults, "defaults", "model", config.problems)
        config.default_thinking_level = _text(defaults, "defaults", "thinking_level", config.problems)
        config.default_thinking_display = _choice(
            defaults, "thinking_display", get_args(ThinkingDisplay), config.default_thinking_display, config.problems
        )
        config.default_thinking_fallback = _choice(
            defaults, "thinking_fallback", get_args(ThinkingFallback), config.default_thinking_fallback, config.problems
        )
        config.default_approval_policy = _choice(
            defaults, "approval_policy", get_args(ApprovalPolicy), "ask", config.problems
        )
        config.max_tool_steps = _number(defaults, "defaults", "max_tool_steps", config.max_tool_steps, config.problems)
        config.max_queued_prompts = _number(
            defaults, "defaults", "max_queued_prompts", config.max_queued_prompts, config.problems
        )
    serve = raw.get("serve", {})
    if isinstance(serve, dict):
        config.serve_approval_timeout_s = _number(
            serve, "serve", "approval_timeout_s", config.serve_approval_timeout_s, config.problems, minimum=0
        )
    reliability = raw.get("reliability", {})
    if isinstance(reliability, dict):
        config.retry_max_attempts = _number(
            reliability, "reliability", "max_attempts", config.retry_max_attempts, config.problems
        )
        config.stall_timeout_s = _number(
            reliability, "reliability", "stall_timeout_s", config.stall_timeout_s, config.problems, minimum=0.1
        )
        config.no_progress_timeout_s = _number(
            reliability,
            "reliability",
            "no_progress_timeout_s",
            config.no_progress_timeout_s,
            config.problems,
            minimum=0.1,
        )
        config.max_event_bytes = _number(
            reliability, "reliability", "max_event_bytes", config.max_event_bytes, config.problems, minimum=1024
        )
        config.max_response_bytes = _number(
            reliability, "reliability", "max_response_bytes", config.max_response_bytes, config.problems, minimum=1024
        )
    tools = raw.get("tools", {})
    if isinstance(tools, dict):
        config.scan_time_limit_s = _number(
            tools, "tools", "scan_time_limit_s", config.scan_time_limit_s, config.problems, minimum=0.1
        )
        if "pass_env" in tools:
            pass_env = tools["pass_env"]
            if isinstance(pass_env, list) and all(isinstance(v, str) for v in pass_env):
                config.pass_env = tuple(pass_env)
            else:
                config.problems.append(
                    "config.toml: [tools] pass_env must be a list of variable names, e.g. "
                    f'["GITHUB_TOKEN"], not {pass_env!r}; passing none.'
                )
    config.compaction = _compaction(raw.get("compaction", {}), config.problems)
    config.budget = _budget(raw.get("budget", {}), config.problems)
    config.sandbox = parse_sandbox(raw.get("sandbox", {}), config.problems)
    mock = raw.get("providers", {}).get("mock", {}) if isinstance(raw.get("providers"), dict) else {}
    if isinstance(mock, dict):
        config.mock_delay_ms = _number(
            mock, "providers.mock", "delay_ms", config.mock_delay_ms, config.problems, minimum=0
        )
    if env.get("PONDER_MOCK_DELAY_MS"):
        try:
            config.mock_delay_ms = float(env["PONDER_MOCK_DELAY_MS"])
        except ValueError:
            config.problems.append("PONDER_MOCK_DELAY_MS is not a number; using the default.")
    for var in CREDENTIAL_ENV_VARS:  # GitHub tokens, and every provider alias (not only the one in use)
        if env.get(var):
            redact.remember(env[var])
    permissions = raw.get("permissions", {})
    rules = permissions.get("rules", []) if isinstance(permissions, dict) else None
    if isinstance(rules, list):
        config.permission_rules = rules
    else:
        config.problems.append("config.toml: [permissions] rules must be an array of tables ([[permissions.rules]]).")
    hooks = raw.get("hooks", {})
    if isinstance(hooks, dict):
        config.hooks = hooks
    else:
        config.problems.append("config.toml: [hooks] must be a table of [[hooks.EVENT]] arrays; no hooks run.")
    mcp = raw.get("mcp_servers", {})
    if isinstance(mcp, dict):
        config.mcp_servers = {k: v for k, v in mcp.items() if isinstance(v, dict)}
        for name in [k for k, v in mcp.items() if not isinstance(v, dict)]:
            config.problems.append(f"config.toml: [mcp_servers.{name}] must be a table; skipping it.")
    config.providers = _load_providers(raw.get("providers", {}), env, config.problems)
    apply_stored_login(config)  # a stored device sign-in: configured, source "login"
    config.text = text or ""
    config.problems[:] = [with_line(problem, config.text) for problem in config.problems]
    return config


_PROBLEM_KEY = re.compile(r"^config\.toml: \[\[?([\w.-]+)\]\]?(?: ([\w-]+))?")
_TABLE = re.compile(r"^\s*\[\[?\s*([\w.\-\" ]+?)\s*\]\]?\s*(?:#.*)?$")


def with_line(problem: str, text: str) -> str:
    """``problem`` ("config.toml: [section] key ...") with the line of config.toml it is about:
    the key's line within that table, else the table's header. Unchanged when neither is found."""
    match = _PROBLEM_KEY.match(problem)
    if match is None or not text:
        return problem
    section, key = match.group(1), match.group(2)
    line = _line_of(text, section, key)
    return problem if line is None else f"config.toml line {line}:" + problem[len("config.toml:") :]


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """The line of ``key`` in table ``section``, else of the table's header, else of ``section`` written
    as a key of its parent table (``compaction = 5``, ``docs = "..."`` under ``[mcp_servers]``)."""
    parent, _, leaf = section.rpartition(".")
    current, header, found, as_key = "", None, None, None
    for number, line in enumerate(text.splitlines(), start=1):
        table = _TABLE.match(line)
        if table is not None:
            current = table.group(1).replace('"', "").replace(" ", "")
            if current == section and header is None:
                header = number
            continue
        name = line.split("=", 1)[0].strip() if "=" in line else None
        if name is None:
            continue
        if key is not None and current == section and name == key and found is None:
            found = number
        if current == parent and name == leaf and as_key is None:
            as_key = number
    return found or header or as_key


# No setting of config.toml is a number this large (and a larger one would not fit where it goes).
MAX_NUMBER = 2**53
# A config file is a page of settings: anything larger is not one (and is never read whole).
MAX_CONFIG_BYTES = 1024 * 1024


def read_config_file(path: Path) -> tuple[str | None, str | None]:
    """``(text, None)``; ``(None, None)`` when there is no file; ``(None, problem)`` when it cannot be
    read as a config: a dangling or looping symlink, not a regular file (a FIFO, a device such as
    /dev/zero, a directory), larger than ``MAX_CONFIG_BYTES``, or not UTF-8. Never blocks: a FIFO
    is refused before it is opened, and opened without waiting for a writer if it appears later."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None, "is a symbolic link to nothing (its target does not exist)"
    except OSError as exc:  # ELOOP: a symlink loop
        return None, f"cannot be followed ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return None, f"is not a regular file ({_file_kind(info.st_mode)})"
    if info.st_size > MAX_CONFIG_BYTES:
        return None, f"is {info.st_size:,} bytes; a config file has at most {MAX_CONFIG_BYTES:,}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # replaced since the stat above
                return None, "is not a regular file"
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    if len(data) > MAX_CONFIG_BYTES:
        return None, f"is larger than {MAX_CONFIG_BYTES:,} bytes"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"is not UTF-8 text (byte {exc.start})"


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def _load_providers(raw: Any, env: dict[str, str], problems: list[str]) -> dict[str, ProviderConfig]:
    """The built-in providers (``daemon.vendors.table``), then those only config.toml names."""
    raw = raw if isinstance(raw, dict) else {}
    providers: dict[str, ProviderConfig] = {}
    for name in list(PROVIDERS) + [n for n in raw if n not in PROVIDERS]:
        section = raw.get(name, {})
        if not isinstance(section, dict):
            problems.append(f"config.toml: [providers.{name}] must be a table, not {section!r}; using the defaults.")
            section = {}
        providers[name] = _load_provider(name, section, env, problems)
    return providers


def _load_provider(name: str, section: dict[str, Any], env: dict[str, str], problems: list[str]) -> ProviderConfig:
    # A provider only config.toml names starts from nothing: no API, URL or key variable.
    info = PROVIDERS.get(name) or ProviderInfo(name, name, api="", base_url="", needs_key=False)
    api = section.get("api") or info.api or None
    provider = ProviderConfig(
        name=name,
        api=str(api or ""),
        base_url=_base_url(info, section, env),
        needs_key=info.needs_key,
        models=_models(name, section.get("models", []), problems),
        default_thinking_level=_text(section, f"providers.{name}", "default_thinking_level", problems),
        headers=_headers(name, section.get("headers"), problems),
        endpoints=_endpoints(info, section, env),
    )
    provider.prices = _prices(name, provider.models, problems)
    if api not in KNOWN_APIS:
        provider.problem = f"[providers.{name}] names unknown api {api!r}; use one of: {', '.join(KNOWN_APIS[:-1])}."
        problems.append(f"config.toml: {provider.problem}")
    key_env = _text(section, f"providers.{name}", "api_key_env", problems)
    key_envs = ([key_env] if key_env else []) + list(info.key_envs)
    provider.api_key, provider.key_source = _find_key(key_envs, section, env)
    provider.key_hint = vendor_key_hint(name, key_envs)
    return provider


def _models(provider: str, models: Any, problems: list[str]) -> list[dict[str, Any]]:
    """``[[providers.NAME.models]]``: the tables of the list; anything else is a problem."""
    if not isinstance(models, list):
        problems.append(f"config.toml: [providers.{provider}] models must be a list of tables ([[providers."
                        f"{provider}.models]]), not {models!r}; no models declared.")  # fmt: skip
        return []
    for entry in models:
        if not isinstance(entry, dict):
            problems.append(f"config.toml: [[providers.{provider}.models]] {entry!r} is not a table; skipping it.")
    return [m for m in models if isinstance(m, dict)]


def _headers(provider: str, headers: Any, problems: list[str]) -> dict[str, str]:
    """``[providers.NAME] headers``: a table of strings; anything else is a problem."""
    if headers is None:
        return {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        problems.append(f"config.toml: [providers.{provider}] headers must be a table of strings, e.g. "
                        f'{{ "x-team" = "docs" }}, not {headers!r}; sending none.')  # fmt: skip
        return {}
    return {str(k): v for k, v in headers.items()}


def _prices(provider: str, models: list[dict[str, Any]], problems: list[str]) -> "dict[str, Price]":
    """The ``price`` overrides of a provider's ``[[providers.NAME.models]]``; a bad one is a problem, not a crash."""
    prices: dict[str, Price] = {}
    for entry in models:
        model = entry.get("model")
        if "price" not in entry or not isinstance(model, str) or not model:
            continue
        from daemon.context.pricing import parse_price_override  # only for a config that sets a price

        try:
            prices[model] = parse_price_override(entry["price"])
        except ValueError as exc:
            problems.append(
                f"config.toml: [[providers.{provider}.models]] {model}: {exc}; using the catalogue's price."
            )
    return prices


def _compaction(section: Any, problems: list[str]) -> CompactionSettings:
    """``[compaction]``; each bad value is reported and replaced by its default."""
    defaults = CompactionSettings()
    if not isinstance(section, dict):
        problems.append("config.toml: [compaction] must be a table; using the defaults.")
        return defaults
    auto = section.get("auto", defaults.auto)
    if not isinstance(auto, bool):
        problems.append(f"config.toml: [compaction] auto must be true or false, not {auto!r}; using true.")
        auto = defaults.auto
    level = _opt_str(section.get("thinking_level"))
    if level is not None:
        from daemon.models.levels import parse_level  # only for a config that sets one: off the start path

        try:
            level = parse_level(level, path="compaction.thinking_level")
        except InvalidParams as exc:
            problems.append(f"config.toml: [compaction] thinking_level: {exc.message} Using the session's level.")
            level = None
    model = section.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        problems.append(f"config.toml: [compaction] model must be a model id, not {model!r}; using the session's.")
        model = None
    return CompactionSettings(
        auto=auto,
        reserve_tokens=_number(section, "compaction", "reserve_tokens", defaults.reserve_tokens, problems, minimum=0),
        keep_recent_tokens=_number(
            section, "compaction", "keep_recent_tokens", defaults.keep_recent_tokens, problems, minimum=0
        ),
        model=model,
        thinking_level=level,
    )


def _budget(section: Any, problems: list[str]) -> Budget | None:
    """``[budget]`` max_cost (USD) and max_tokens; a bad value is reported and that limit left unset."""
    if not isinstance(section, dict):
        problems.append("config.toml: [budget] must be a table; no default budget.")
        return None
    max_cost = section.get("max_cost")
    if max_cost is not None and (
        isinstance(max_cost, bool)
        or not isinstance(max_cost, (int, float))
        or not math.isfinite(max_cost)
        or max_cost < 0
    ):
        problems.append(
            f"config.toml: [budget] max_cost must be an amount in USD of at least 0, not {max_cost!r}; no cost budget."
        )
        max_cost = None
    max_tokens = section.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_NUMBER
    ):
        problems.append(
            f"config.toml: [budget] max_tokens must be a whole number of tokens of at least 1, not {max_tokens!r}; "
            "no token budget."
        )
        max_tokens = None
    if max_cost is None and max_tokens is None:
        return None
    return Budget(max_cost=float(max_cost) if max_cost is not None else None, max_tokens=max_tokens)


def _base_url(info: ProviderInfo, section: dict[str, Any], env: dict[str, str]) -> str:
    """The table's variable (given a scheme where it may lack one), else config.toml, else the table's URL."""
    url = env.get(info.base_url_env) if info.base_url_env else None
    if not url:
        return str(section.get("base_url") or info.base_url)
    if info.default_scheme and not url.startswith(("http://", "https://")):
        return info.default_scheme + url
    return url


def _endpoints(info: ProviderInfo, section: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The provider's URLs besides base_url: the environment, else config.toml, else the table's default."""
    return {e.name: env.get(e.env) or str(section.get(e.config_key) or e.default) for e in info.endpoints}


def _find_key(key_envs: list[str], section: dict[str, Any], env: dict[str, str]) -> tuple[Secret | None, str | None]:
    """The provider's key and where it came from: the first variable set, else config.toml's api_key."""
    # Every alias and the config's key are masked, also those another one overrides.
    for value in [env.get(var) for var in key_envs] + [section.get("api_key")]:
        if value:
            redact.remember(str(value))
    for var in key_envs:
        if env.get(var):
            return Secret(env[var]), "env"
    if section.get("api_key"):
        return Secret(str(section["api_key"])), "config"
    return None, None


def _number(section: dict[str, Any], name: str, key: str, default: Any, problems: list[str], minimum: float = 1) -> Any:
    """``section[key]`` as a number of ``default``'s type, checked by msgspec (a whole number where the
    default is one, finite, at least ``minimum``); a bad value is a problem, not a crash."""
    value = section.get(key, default)
    kind = int if isinstance(default, int) else float
    try:
        number = msgspec.convert(value, Annotated[kind, msgspec.Meta(ge=minimum, le=MAX_NUMBER)])
        if not math.isfinite(number):
            raise msgspec.ValidationError("not finite")
    except msgspec.ValidationError:
        whole = "a whole number" if kind is int else "a number"
        problems.append(
            f"config.toml: [{name}] {key} must be {whole} of at least {minimum:g}, not {value!r}; using {default}."
        )
        return default
    return number


def _choice(section: dict[str, Any], key: str, allowed: tuple[str, ...], default: Any, problems: list[str]) -> Any:
    """``[defaults] key`` if it is one of ``allowed`` (case ignored); otherwise a problem, and ``default``."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    problems.append(f"config.toml: [defaults] {key} = {value!r} is not one of {', '.join(allowed)}; using {default!r}.")
    return default


def _text(section: dict[str, Any], name: str, key: str, problems: list[str]) -> str | None:
    """``section[key]`` when it is a string (None when absent or empty); anything else is a problem."""
    value = section.get(key)
    if value is None or isinstance(value, str):
        return value or None
    problems.append(f"config.toml: [{name}] {key} must be a string, not {value!r}; ignoring it.")
    return None


def table_lines(text: str, name: str) -> list[int]:
    """The 1-based line of each ``[[name]]`` header in ``text``, in order (a rule's ``line``)."""
    header = re.compile(r"^\s*\[\[\s*" + re.escape(name).replace(r"\.", r"\s*\.\s*") + r"\s*\]\]")
    return [number for number, line in enumerate(text.splitlines(), 1) if header.match(line)]


def _opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _toml_error(exc: Exception) -> str:
    text = str(exc)
    match = re.search(r"\(at line (\d+), column (\d+)\)", text)
    return f"line {match.group(1)}: {text}" if match else text


def apply_stored_login(config: Config) -> None:
    """Make the device-login providers' credentials reflect the token file.

    A token from the environment or config.toml wins (as for every provider) and is left
    alone; otherwise the file is the truth, also when another daemon signed in or out.
    """
    for name in DEVICE_LOGIN_PROVIDERS:
        settings = config.providers.get(name)
        if settings is None:
            continue
        token = load_github_token(config.home)  # read even when unused: as a Secret it is masked in output
        if settings.key_source in ("env", "config"):
            continue
        if token is not None:
            settings.api_key, settings.key_source = token, "login"
        elif settings.key_source == "login":
            settings.api_key, settings.key_source = None, None
