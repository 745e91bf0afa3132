"""``config.toml``'s sections as typed msgspec Structs, and ``read_section``: one table read as one.

Each section is decoded by msgspec, not checked key by key: a key of the wrong type or value
(a list where a string goes, ``nan``, ``inf``, 2.5 for a whole number, a word outside a choice)
is one sentence in ``problems`` naming the section, the key, what it must be and what is used
instead, and takes its default; every other key of the section still applies. A section that
is not a table is one sentence, and the whole section keeps its defaults. Keys ponder does not
know are left alone (a provider's endpoints, settings of a newer ponder).

The sentences start ``config.toml: [section] key``; ``daemon.config.settings.with_line`` adds the
line. Sections with checks beyond their types (``[compaction] thinking_level``, ``[sandbox]
writable_roots``, a provider's ``api``) are finished by their readers.
"""

import re
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta

from protocol.objects import ApprovalPolicy, ThinkingDisplay, ThinkingFallback

__all__ = [
    "MAX_NUMBER",
    "BudgetSection",
    "CompactionSection",
    "DefaultsSection",
    "ProviderSection",
    "ReliabilitySection",
    "SandboxMode",
    "SandboxSection",
    "Section",
    "ServeSection",
    "ToolsSection",
    "read_section",
]

# No setting of config.toml is a number this large (and a larger one would not fit where it goes).
MAX_NUMBER = 2**53

# The kinds of number config.toml holds; a bound also refuses nan and inf (no comparison holds for nan).
Count = Annotated[int, Meta(ge=1, le=MAX_NUMBER)]
Tokens = Annotated[int, Meta(ge=0, le=MAX_NUMBER)]
ByteLimit = Annotated[int, Meta(ge=1024, le=MAX_NUMBER)]
Seconds = Annotated[float, Meta(ge=0.1, le=MAX_NUMBER)]
AtLeastZero = Annotated[float, Meta(ge=0, le=MAX_NUMBER)]
Dollars = Annotated[float, Meta(ge=0, le=MAX_NUMBER)]
ModelId = Annotated[str, Meta(pattern=r"\S")]  # not empty, not only blanks

SandboxMode = Literal["off", "read_only", "workspace_write"]
StorePooler = Literal["none", "transaction", "session"]


class Section(msgspec.Struct, kw_only=True):
    """One table of config.toml. ``expected`` says, per key, what it must be (the sentence of a bad
    value); ``instead`` what happens then (default: "using <the default>", or "ignoring it" for an
    optional key); ``SECTION`` in them stands for the table's name; ``lowered`` are choices matched
    whatever their case."""

    expected: ClassVar[dict[str, str]] = {}
    instead: ClassVar[dict[str, str]] = {}
    lowered: ClassVar[tuple[str, ...]] = ()


class DefaultsSection(Section):
    """``[defaults]``: what a new session starts with, and limits of a turn and of the waiting input."""

    model: str | None = None
    thinking_level: str | None = None
    thinking_display: ThinkingDisplay = "summarized"
    thinking_fallback: ThinkingFallback = "nearest"
    approval_policy: ApprovalPolicy = "ask"
    max_tool_steps: Count = 50
    max_queued_prompts: Count = 16

    expected = {"model": "a string", "thinking_level": "a string"}
    lowered = ("thinking_display", "thinking_fallback", "approval_policy")


class ReliabilitySection(Section):
    """``[reliability]``: retries of a failed call, and when a response counts as stalled or too big."""

    max_attempts: Count = 4
    stall_timeout_s: Seconds = 90.0
    no_progress_timeout_s: Seconds = 600.0
    max_event_bytes: ByteLimit = 16 * 1024 * 1024
    max_response_bytes: ByteLimit = 1024 * 1024 * 1024


class ServeSection(Section):
    """``[serve]``: the daemon's settings for its clients (PROTOCOL.md "Transports and several clients")."""

    approval_timeout_s: AtLeastZero = 300.0  # how long a permission request waits for a controller to attach
    # How long a loaded session nobody drives stays in memory (on a listening daemon: once nobody
    # follows it either); stdio daemons use it too.
    idle_unload_s: Seconds = 600.0
    # What may wait for one client of a listening daemon before it counts as not reading (dropped).
    client_queue_bytes: ByteLimit = 4 * 1024 * 1024


class StoreSection(Section):
    """``[store]``: where the sessions are (PROTOCOL.md "Store backends"): ``url`` a PostgreSQL server
    (``postgresql://…`` or libpq's key=value form); none, ``sessions.db`` in the home.
    ``PONDER_STORE_URL`` wins over it. ``pooler``: the URL reaches the server through a
    connection pooler (PgBouncer) in that mode; ``listen_url``: a direct connection for the
    change feed's ``LISTEN`` (a transaction pooler cannot carry it). ``PONDER_STORE_POOLER`` and
    ``PONDER_STORE_LISTEN_URL`` win over them."""

    url: str | None = None
    pooler: StorePooler = "none"
    listen_url: str | None = None

    expected = {"url": "a string", "listen_url": "a string"}
    lowered = ("pooler",)


class ToolsSection(Section):
    """``[tools]``: a scan's time limit, and the credential variables commands get anyway."""

    scan_time_limit_s: Seconds = 30.0
    pass_env: list[str] = msgspec.field(default_factory=list)

    expected = {"pass_env": 'a list of variable names, e.g. ["GITHUB_TOKEN"]'}
    instead = {"pass_env": "passing none"}


class CompactionSection(Section):
    """``[compaction]`` (PROTOCOL.md "Context, cost and compaction"); the level is checked by its reader."""

    auto: bool = True
    reserve_tokens: Tokens = 20_000
    keep_recent_tokens: Tokens = 20_000
    model: ModelId | None = None
    thinking_level: str | None = None

    expected = {"model": "a model id", "thinking_level": "a thinking level"}
    instead = {"model": "using the session's", "thinking_level": "using the session's level"}


class BudgetSection(Section):
    """``[budget]``: the budget of every session that does not set its own."""

    max_cost: Dollars | None = None
    max_tokens: Count | None = None

    expected = {"max_cost": "an amount in USD of at least 0", "max_tokens": "a whole number of tokens of at least 1"}
    instead = {"max_cost": "no cost budget", "max_tokens": "no token budget"}


class SandboxSection(Section):
    """``[sandbox]`` (``daemon.config.sandbox`` checks the roots and builds its settings)."""

    mode: SandboxMode = "workspace_write"
    network: bool = False
    writable_roots: list[str] = msgspec.field(default_factory=list)
    required: bool = False
    auto_approve: bool = True
    landlock: bool = True

    expected = {"writable_roots": 'a list of absolute paths, e.g. ["/var/cache/build"]'}
    instead = {"writable_roots": "adding none"}


class ProviderSection(Section):
    """``[providers.NAME]``: a built-in provider's overrides, or a provider of one's own.
    ``models`` are the ``[[providers.NAME.models]]`` tables, checked by the catalogue."""

    api: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    default_thinking_level: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    models: list[Any] = msgspec.field(default_factory=list)
    delay_ms: AtLeastZero = 15.0  # the mock provider's pause between events

    expected = {
        "headers": 'a table of strings, e.g. { "x-team" = "docs" }',
        "models": "a list of tables ([[SECTION.models]])",
    }
    instead = {"headers": "sending none", "models": "no models declared", "api_key": "ignoring it"}


S = TypeVar("S", bound=Section)
# A pattern, not a compiled one: only a bad key needs it (compiled and cached by ``re`` then,
# not at every start).
_AT = r" - at `\$\.([^`.\[]+)"


def read_section(value: Any, name: str, kind: type[S], problems: list[str]) -> S:
    """``value`` (the table ``[name]`` as TOML read it, None when absent) as ``kind``. Each bad key is
    a problem and takes its default; a value that is not a table is a problem and gives the defaults."""
    if value is None:
        return kind()
    if not isinstance(value, dict):
        problems.append(f"config.toml: [{name}] must be a table, not {value!r}; using the defaults.")
        return kind()
    table = {
        key: item.strip().lower() if key in kind.lowered and isinstance(item, str) else item
        for key, item in value.items()
    }
    for _ in range(len(table) + 1):  # at most one pass per key: each failing pass drops one
        try:
            return msgspec.convert(table, kind)
        except msgspec.ValidationError as exc:
            match = re.search(_AT, str(exc))
            key = match.group(1) if match else None
            if key is None or key not in table:  # not about one key: should not happen, never a crash
                problems.append(f"config.toml: [{name}] cannot be read ({exc}); using the defaults.")
                return kind()
            problems.append(_sentence(name, kind, key, value.get(key, table[key])))
            del table[key]
    return kind()


def _sentence(name: str, kind: type[Section], key: str, value: Any) -> str:
    """One problem: the key, what it must be, what it was, and what is used instead."""
    hint = get_type_hints(kind, include_extras=True)[key]
    default = getattr(kind(), key)
    instead = kind.instead.get(key) or ("ignoring it" if default is None else f"using {_shown(default)}")
    choices = _choices(hint)
    if choices:
        return f"config.toml: [{name}] {key} = {value!r} is not one of {', '.join(choices)}; {instead}."
    expected = kind.expected.get(key, "").replace("SECTION", name) or _expected(hint)
    return f"config.toml: [{name}] {key} must be {expected}, not {value!r}; {instead}."


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, str):
        return repr(default)
    return f"{default:g}" if isinstance(default, float) else str(default)


def _choices(hint: Any) -> tuple[str, ...]:
    if get_origin(hint) is Literal:
        return tuple(str(choice) for choice in get_args(hint))
    return ()


def _expected(hint: Any) -> str:
    """What a value of ``hint`` is, in words: "a whole number of at least 1", "true or false"."""
    if get_origin(hint) in (Union, UnionType):  # an optional key: what it is when given
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    base, meta = hint, None
    if get_origin(hint) is Annotated:
        base, *extras = get_args(hint)
        meta = next((extra for extra in extras if isinstance(extra, Meta)), None)
    if base is bool:
        return "true or false"
    if base is str:
        return "a string"
    if base in (int, float):
        words = "a whole number" if base is int else "a number"
        if meta is not None and meta.ge is not None:
            words += f" of at least {meta.ge:g}"
        return words
    return f"a value of type {getattr(base, '__name__', base)}"
