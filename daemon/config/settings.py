"""The home directory, ``config.toml`` and the provider settings drawn from it and the environment.

Environment variables override ``config.toml``. Each section is read as a typed Struct
(``daemon.config.sections``): a key of the wrong type or value is one sentence in
``Config.problems`` and keeps its default, the rest applies. A config file that does not parse,
cannot be read as one (a FIFO, a device, a dangling symlink) or a provider with an unknown
``api`` is recorded there too (with its line where known) and the daemon still starts with the
rest. Secrets are wrapped in ``Secret`` so that no repr, log line or error message can show
them, and every ``Secret`` is added to ``daemon.util.redact``'s known credentials, masked in
tool output, events, the store and logs.

What each built-in provider is (base URL, key variables, endpoints) is read from
``daemon.vendors.table``, as is which environment variables hold credentials
(``CREDENTIAL_ENV_VARS``). Also owns ``child_env``: the daemon's environment minus those
and any variable holding a known credential, for ``run_command``'s children; ``[tools]
pass_env`` names variables to pass anyway.
"""

import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from msgspec import field

from daemon.config.sandbox import SandboxSettings, parse_sandbox
from daemon.config.sections import (
    BudgetSection,
    CompactionSection,
    DefaultsSection,
    ProviderSection,
    ReliabilitySection,
    SandboxSection,
    ServeSection,
    StoreSection,
    ToolsSection,
    read_section,
)
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
        if name in passed or (name not in CREDENTIAL_ENV_VARS and name not in STORE_ENV_VARS and value not in secrets)
    }


# The store's URL may carry a password (and libpq reads one from PGPASSWORD): never a child's.
STORE_ENV_VARS = ("PONDER_STORE_URL", "PONDER_STORE_LISTEN_URL", "PGPASSWORD")


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
    # [serve] idle_unload_s: a loaded session nobody drives (nor, on a listening daemon, follows)
    # is unloaded after this long (daemon.sessions.actor).
    idle_unload_s: float = 600.0
    # [serve] approval_timeout_s: on a listening daemon, how long a permission request waits for a
    # controller able to answer to attach before it is denied (PROTOCOL.md "Transports").
    serve_approval_timeout_s: float = 300.0
    # [serve] client_queue_bytes: what may wait for one client of a listening daemon before it is
    # dropped as not reading (daemon.jsonrpc.backlog).
    serve_client_queue_bytes: int = 4 * 1024 * 1024
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

    # [store] url or PONDER_STORE_URL: a PostgreSQL store; None, sessions.db in the home. May hold a
    # password (masked by util.redact wherever text leaves the daemon).
    store_url: str | None = None
    # [store] pooler / PONDER_STORE_POOLER: "transaction" or "session" when the URL goes through a
    # connection pooler; listen_url / PONDER_STORE_LISTEN_URL: a direct connection for LISTEN.
    store_pooler: Literal["transaction", "session"] | None = None
    store_listen_url: str | None = None

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
    problems = config.problems
    defaults = read_section(raw.get("defaults"), "defaults", DefaultsSection, problems)
    config.default_model, config.default_thinking_level = defaults.model or None, defaults.thinking_level or None
    config.default_thinking_display = defaults.thinking_display
    config.default_thinking_fallback = defaults.thinking_fallback
    config.default_approval_policy = defaults.approval_policy
    config.max_tool_steps, config.max_queued_prompts = defaults.max_tool_steps, defaults.max_queued_prompts
    serve = read_section(raw.get("serve"), "serve", ServeSection, problems)
    config.serve_approval_timeout_s, config.idle_unload_s = serve.approval_timeout_s, serve.idle_unload_s
    config.serve_client_queue_bytes = serve.client_queue_bytes
    reliability = read_section(raw.get("reliability"), "reliability", ReliabilitySection, problems)
    config.retry_max_attempts = reliability.max_attempts
    config.stall_timeout_s, config.no_progress_timeout_s = (
        reliability.stall_timeout_s,
        reliability.no_progress_timeout_s,
    )
    config.max_event_bytes, config.max_response_bytes = reliability.max_event_bytes, reliability.max_response_bytes
    store = read_section(raw.get("store"), "store", StoreSection, problems)
    config.store_url = (env.get("PONDER_STORE_URL") or store.url or "").strip() or None
    config.store_listen_url = (env.get("PONDER_STORE_LISTEN_URL") or store.listen_url or "").strip() or None
    for url in (config.store_url, config.store_listen_url):
        if url:
            _remember_url_password(url)
    pooler = (env.get("PONDER_STORE_POOLER") or store.pooler).strip().lower()
    if pooler == "transaction":
        config.store_pooler = "transaction"
    elif pooler == "session":
        config.store_pooler = "session"
    elif pooler not in ("none", ""):
        problems.append(f"PONDER_STORE_POOLER = {pooler!r} is not one of none, transaction, session; using none.")
    tools = read_section(raw.get("tools"), "tools", ToolsSection, problems)
    config.scan_time_limit_s, config.pass_env = tools.scan_time_limit_s, tuple(tools.pass_env)
    config.compaction = _compaction(
        read_section(raw.get("compaction"), "compaction", CompactionSection, problems), problems
    )
    config.budget = _budget(read_section(raw.get("budget"), "budget", BudgetSection, problems))
    config.sandbox = parse_sandbox(read_section(raw.get("sandbox"), "sandbox", SandboxSection, problems), problems)
    providers = raw.get("providers")
    if providers is not None and not isinstance(providers, dict):
        problems.append(f"config.toml: [providers] must be a table, not {providers!r}; using the defaults.")
    config.providers, config.mock_delay_ms = _load_providers(providers, env, problems)
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
    if isinstance(mcp, dict):  # each server's table is checked by daemon.mcp.spec
        config.mcp_servers = {k: v for k, v in mcp.items() if isinstance(v, dict)}
        for name in [k for k, v in mcp.items() if not isinstance(v, dict)]:
            config.problems.append(f"config.toml: [mcp_servers.{name}] must be a table; skipping it.")
    else:
        config.problems.append(f"config.toml: [mcp_servers] must be a table, not {mcp!r}; no MCP servers.")
    apply_stored_login(config)  # a stored device sign-in: configured, source "login"
    config.text = text or ""
    config.problems[:] = [with_line(problem, config.text) for problem in config.problems]
    return config


def _remember_url_password(url: str) -> None:
    """Mask the password a store URL carries (``user:PASSWORD@`` or ``password=``) everywhere."""
    match = re.search(r"://[^/@:]*:([^@/]+)@", url) or re.search(r"(?:^|[\s?&])password=([^\s&]+)", url)
    if match:
        from urllib.parse import unquote

        redact.remember(unquote(match.group(1)))
        redact.remember(match.group(1))


# Patterns, not compiled ones: they are needed only with a problem to place, and compiling them
# at import would cost every start ~1.3 M instructions (``re`` compiles and caches them on first use).
_PROBLEM_KEY = r"^config\.toml: \[\[?([\w.-]+)\]\]?(?: ([\w-]+))?"
_TABLE = r"^\s*\[\[?\s*([\w.\-\" ]+?)\s*\]\]?\s*(?:#.*)?$"


def with_line(problem: str, text: str) -> str:
    """``problem`` ("config.toml: [section] key ...") with the line of config.toml it is about:
    the key's line within that table, else the table's header. Unchanged when neither is found."""
    match = re.match(_PROBLEM_KEY, problem)
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
        table = re.match(_TABLE, line)
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


def _load_providers(raw: Any, env: dict[str, str], problems: list[str]) -> tuple[dict[str, ProviderConfig], float]:
    """The built-in providers (``daemon.vendors.table``), then those only config.toml names; and the
    mock provider's ``delay_ms``."""
    raw = raw if isinstance(raw, dict) else {}
    providers: dict[str, ProviderConfig] = {}
    mock_delay_ms = ProviderSection().delay_ms
    for name in list(PROVIDERS) + [n for n in raw if n not in PROVIDERS]:
        table = raw.get(name)
        section = read_section(table, f"providers.{name}", ProviderSection, problems)
        providers[name] = _load_provider(name, section, table if isinstance(table, dict) else {}, env, problems)
        if name == "mock":
            mock_delay_ms = section.delay_ms
    return providers, mock_delay_ms


def _load_provider(
    name: str, section: ProviderSection, table: dict[str, Any], env: dict[str, str], problems: list[str]
) -> ProviderConfig:
    """One provider from its ``[providers.NAME]`` section (``table``: the same as TOML read it, for
    the provider-specific endpoint keys) and the environment."""
    # A provider only config.toml names starts from nothing: no API, URL or key variable.
    info = PROVIDERS.get(name) or ProviderInfo(name, name, api="", base_url="", needs_key=False)
    api = section.api or info.api or None
    provider = ProviderConfig(
        name=name,
        api=str(api or ""),
        base_url=_base_url(info, section, env),
        needs_key=info.needs_key,
        models=_models(name, section.models, problems),
        default_thinking_level=section.default_thinking_level or None,
        headers=dict(section.headers),
        endpoints=_endpoints(info, table, env),
    )
    provider.prices = _prices(name, provider.models, problems)
    if api not in KNOWN_APIS:
        provider.problem = f"[providers.{name}] names unknown api {api!r}; use one of: {', '.join(KNOWN_APIS[:-1])}."
        problems.append(f"config.toml: {provider.problem}")
    key_envs = ([section.api_key_env] if section.api_key_env else []) + list(info.key_envs)
    provider.api_key, provider.key_source = _find_key(key_envs, section, env)
    provider.key_hint = vendor_key_hint(name, key_envs)
    return provider


def _models(provider: str, models: list[Any], problems: list[str]) -> list[dict[str, Any]]:
    """``[[providers.NAME.models]]``: the tables of the list (checked by the catalogue); anything else is a problem."""
    for entry in models:
        if not isinstance(entry, dict):
            problems.append(f"config.toml: [[providers.{provider}.models]] {entry!r} is not a table; skipping it.")
    return [m for m in models if isinstance(m, dict)]


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


def _compaction(section: CompactionSection, problems: list[str]) -> CompactionSettings:
    """``[compaction]`` as settings; a thinking level that is no level is reported and left to the session."""
    level = section.thinking_level or None
    if level is not None:
        from daemon.models.levels import parse_level  # only for a config that sets one: off the start path

        try:
            level = parse_level(level, path="compaction.thinking_level")
        except InvalidParams as exc:
            problems.append(f"config.toml: [compaction] thinking_level: {exc.message} Using the session's level.")
            level = None
    return CompactionSettings(
        auto=section.auto,
        reserve_tokens=section.reserve_tokens,
        keep_recent_tokens=section.keep_recent_tokens,
        model=section.model,
        thinking_level=level,
    )


def _budget(section: BudgetSection) -> Budget | None:
    """``[budget]`` as the default budget; None when it sets no limit."""
    if section.max_cost is None and section.max_tokens is None:
        return None
    return Budget(max_cost=section.max_cost, max_tokens=section.max_tokens)


def _base_url(info: ProviderInfo, section: ProviderSection, env: dict[str, str]) -> str:
    """The table's variable (given a scheme where it may lack one), else config.toml, else the table's URL."""
    url = env.get(info.base_url_env) if info.base_url_env else None
    if not url:
        return section.base_url or info.base_url
    if info.default_scheme and not url.startswith(("http://", "https://")):
        return info.default_scheme + url
    return url


def _endpoints(info: ProviderInfo, table: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The provider's URLs besides base_url: the environment, else config.toml (a string), else the table's default."""
    return {e.name: env.get(e.env) or _string(table.get(e.config_key)) or e.default for e in info.endpoints}


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _find_key(key_envs: list[str], section: ProviderSection, env: dict[str, str]) -> tuple[Secret | None, str | None]:
    """The provider's key and where it came from: the first variable set, else config.toml's api_key."""
    # Every alias and the config's key are masked, also those another one overrides.
    for value in [env.get(var) for var in key_envs] + [section.api_key]:
        if value:
            redact.remember(value)
    for var in key_envs:
        if env.get(var):
            return Secret(env[var]), "env"
    if section.api_key:
        return Secret(section.api_key), "config"
    return None, None


def table_lines(text: str, name: str) -> list[int]:
    """The 1-based line of each ``[[name]]`` header in ``text``, in order (a rule's ``line``)."""
    header = re.compile(r"^\s*\[\[\s*" + re.escape(name).replace(r"\.", r"\s*\.\s*") + r"\s*\]\]")
    return [number for number, line in enumerate(text.splitlines(), 1) if header.match(line)]


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
