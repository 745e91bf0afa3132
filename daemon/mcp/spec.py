"""What an MCP server is before it runs: ``ServerSpec``, parsed from ``config.toml`` or ACP.

``[mcp_servers.NAME]`` takes ``command``, ``args``, ``env``, ``cwd``, ``timeout_s`` (per
tool call, default 60), ``startup_timeout_s`` (spawn to tool list, default 30),
``enabled`` and ``trusted`` (default false: whether its tools' ``readOnlyHint`` is
believed, which is what lets them run without asking and under ``read_only``). ACP
clients send stdio entries ``{name, command, args, env: [{name, value}]}``; http/sse
entries are skipped (ponder speaks stdio only). A malformed entry becomes a one-sentence
problem instead of a spec, so the manager can report it in ``mcp/list``.

The child's environment is a short list of harmless variables from ours plus the
configured ``env``, never our whole environment: ours holds provider API keys, and an
MCP server is third-party code that has no business seeing them. The configured ``env``
values usually are credentials (tokens for the server's service): each one is added to
``daemon.util.redact``'s known credentials, so it is masked in tool output, events, the store
and logs. Except what plainly is no secret and would mask every mention of a directory
or a site: absolute paths (``/...``, ``~/...``) and plain http(s) URLs (no user, no query).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.util import redact

__all__ = ["INHERITED_ENV", "ServerSpec", "parse_acp_server", "parse_config_server", "server_env"]

log = logging.getLogger("ponder.mcp")

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_STARTUP_TIMEOUT_S = 30.0

# What a typical server needs to find its runtime (npx, uvx, python), its caches and
# the network, and nothing that could carry a credential of ours.
INHERITED_ENV = (
    "HOME", "LOGNAME", "USER", "PATH", "SHELL", "TERM", "TMPDIR", "TZ", "LANG", "LC_ALL", "LC_CTYPE",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)  # fmt: skip
_KNOWN_KEYS = {"command", "args", "env", "cwd", "timeout_s", "startup_timeout_s", "enabled", "trusted"}


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # values may be secrets
    cwd: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    enabled: bool = True
    trusted: bool = False  # from config.toml only: a client cannot vouch for a server

    def __post_init__(self) -> None:
        for _, value in self.env:
            if not _plainly_no_secret(value):
                redact.remember(value)


def server_env(spec: ServerSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    env = {key: environ[key] for key in INHERITED_ENV if key in environ}
    env.update(dict(spec.env))
    return env


def parse_config_server(name: str, raw: Any) -> ServerSpec | str:
    """A spec from ``[mcp_servers.NAME]``, or the problem with it."""
    where = f"[mcp_servers.{name}]"
    if not isinstance(raw, dict):
        return f"{where} must be a table."
    if "url" in raw and "command" not in raw:
        return f"{where} names a url; ponder runs stdio MCP servers only (give command and args)."
    unknown = sorted(set(raw) - _KNOWN_KEYS)
    command = raw.get("command")
    if not isinstance(command, str) or not command.strip():
        return f'{where} needs command, the program to run (e.g. command = "npx").'
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        return f"{where} args must be a list of strings."
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, (str, int, float, bool)) for v in env.values()):
        return f'{where} env must be a table of strings, e.g. env = {{ TOKEN = "..." }}.'
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        return f"{where} cwd must be a string."
    timeouts: dict[str, float] = {}
    for key, default in (("timeout_s", DEFAULT_TIMEOUT_S), ("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            return f"{where} {key} must be a positive number of seconds."
        timeouts[key] = float(value)
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        return f"{where} enabled must be true or false."
    trusted = raw.get("trusted", False)
    if not isinstance(trusted, bool):
        return f"{where} trusted must be true or false."
    if unknown:
        # Not fatal: a typo should not take the server away, but it should be visible.
        log.warning("%s: ignoring unknown keys %s", where, ", ".join(unknown))
    return ServerSpec(
        name=name,
        command=command,
        args=tuple(str(a) for a in args),
        env=tuple(sorted((str(k), _env_value(v)) for k, v in env.items())),
        cwd=str(Path(cwd).expanduser()) if cwd else None,
        timeout_s=timeouts["timeout_s"],
        startup_timeout_s=timeouts["startup_timeout_s"],
        enabled=enabled,
        trusted=trusted,
    )


def parse_acp_server(raw: Any, cwd: str | None = None) -> ServerSpec | str | None:
    """A spec from an ACP ``mcpServers`` entry; None for a non-stdio entry (skipped)."""
    if not isinstance(raw, dict):
        return "an ACP mcpServers entry must be an object."
    if raw.get("type") not in (None, "stdio") or ("url" in raw and "command" not in raw):
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        return "an ACP mcpServers entry has no name."
    command = raw.get("command")
    if not isinstance(command, str) or not command.strip():
        return f"MCP server {name!r} from the client has no command."
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return f"MCP server {name!r} from the client: args must be a list of strings."
    env: list[tuple[str, str]] = []
    for item in raw.get("env") or []:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            return f"MCP server {name!r} from the client: env entries must be {{name, value}} strings."
        env.append((item["name"], item["value"]))
    return ServerSpec(name=name, command=command, args=tuple(args), env=tuple(sorted(env)), cwd=cwd)


def _plainly_no_secret(value: str) -> bool:
    if value.startswith(("/", "~/")):
        return True
    scheme, sep, rest = value.partition("://")
    return bool(sep) and scheme in ("http", "https") and not any(c in rest for c in "@?#")


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
