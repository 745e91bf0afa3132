"""``config.toml`` ``[sandbox]``: how ``run_command`` is confined (PROTOCOL.md "Sandbox").

``mode`` (``off | read_only | workspace_write``, default ``workspace_write``), ``network``
(default false), ``writable_roots`` (more directories a command may write, besides the
session's ``cwd`` and its temporary directory), ``required`` (no sandbox working here: no new
session, and no command of a stored one runs), ``auto_approve`` (an enforced sandbox stands
in for the ``ask`` prompt of ``run_command``) and ``landlock`` (false: never fall back to
Landlock, which cannot keep ``.git`` read-only, hide the home or cut UDP; with ``required``,
a machine without a working bubblewrap then fails closed). A bad value is a problem and keeps its default
(``daemon.config.sections``); a relative or missing writable root is a problem and is left out.
"""

from pathlib import Path

import msgspec

from daemon.config.sections import SandboxMode, SandboxSection

__all__ = ["SandboxMode", "SandboxSettings", "parse_sandbox"]


class SandboxSettings(msgspec.Struct, frozen=True):  # a Struct: built on every start (no compiled methods)
    mode: SandboxMode = "workspace_write"
    network: bool = False
    writable_roots: tuple[Path, ...] = ()
    required: bool = False
    auto_approve: bool = True
    landlock: bool = True


def parse_sandbox(section: SandboxSection, problems: list[str]) -> SandboxSettings:
    """``[sandbox]`` (its types already checked) as settings; a relative or missing writable root is a
    problem and is left out."""
    return SandboxSettings(
        mode=section.mode,
        network=section.network,
        writable_roots=_roots(section.writable_roots, problems),
        required=section.required,
        auto_approve=section.auto_approve,
        landlock=section.landlock,
    )


def _roots(value: list[str], problems: list[str]) -> tuple[Path, ...]:
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
