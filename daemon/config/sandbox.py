"""``config.toml`` ``[sandbox]``: how ``run_command`` is confined (PROTOCOL.md "Sandbox").

``mode`` (``off | read_only | workspace_write``, default ``workspace_write``), ``network``
(default false), ``writable_roots`` (more directories a command may write, besides the
session's ``cwd`` and its temporary directory), ``required`` (no sandbox working here: no new
session, and no command of a stored one runs), ``auto_approve`` (an enforced sandbox stands
in for the ``ask`` prompt of ``run_command``) and ``landlock`` (false: never fall back to
Landlock, which cannot keep ``.git`` read-only, hide the home or cut UDP; with ``required``,
a machine without a working bubblewrap then fails closed). A bad value is a problem and keeps its default;
a relative or missing writable root is a problem and is left out.
"""

from pathlib import Path
from typing import Any, Literal, get_args

import msgspec

SandboxMode = Literal["off", "read_only", "workspace_write"]

__all__ = ["SandboxMode", "SandboxSettings", "parse_sandbox"]


class SandboxSettings(msgspec.Struct, frozen=True):  # a Struct: built on every start (no compiled methods)
    mode: SandboxMode = "workspace_write"
    network: bool = False
    writable_roots: tuple[Path, ...] = ()
    required: bool = False
    auto_approve: bool = True
    landlock: bool = True


def parse_sandbox(section: Any, problems: list[str]) -> SandboxSettings:
    """``[sandbox]`` as settings; each bad value is reported and replaced by its default."""
    defaults = SandboxSettings()
    if not isinstance(section, dict):
        problems.append("config.toml: [sandbox] must be a table; using the defaults.")
        return defaults
    mode = section.get("mode", defaults.mode)
    if mode not in get_args(SandboxMode):
        problems.append(
            f"config.toml: [sandbox] mode = {mode!r} is not one of off, read_only, workspace_write; "
            f"using {defaults.mode!r}."
        )
        mode = defaults.mode
    flags = {
        key: _flag(section, key, getattr(defaults, key), problems)
        for key in ("network", "required", "auto_approve", "landlock")
    }
    return SandboxSettings(mode=mode, writable_roots=_roots(section.get("writable_roots", []), problems), **flags)


def _flag(section: dict[str, Any], key: str, default: bool, problems: list[str]) -> bool:
    value = section.get(key, default)
    if isinstance(value, bool):
        return value
    problems.append(f"config.toml: [sandbox] {key} must be true or false, not {value!r}; using {str(default).lower()}.")
    return default


def _roots(value: Any, problems: list[str]) -> tuple[Path, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(
            f'config.toml: [sandbox] writable_roots must be a list of absolute paths, e.g. ["/var/cache/build"], '
            f"not {value!r}; adding none."
        )
        return ()
    roots: list[Path] = []
    for text in value:
        path = Path(text).expanduser()
        if not path.is_absolute():
            problems.append(f"config.toml: [sandbox] writable_roots: {text!r} is not an absolute path; left out.")
        elif not path.is_dir():
            problems.append(f"config.toml: [sandbox] writable_roots: {text!r} is not a directory; left out.")
        else:
            roots.append(path.resolve())
    return tuple(roots)
