"""The macOS ``sandbox-exec`` (Seatbelt) command line for one command: best effort.

Apple deprecated ``sandbox-exec`` but still ships it (Codex and Claude Code use it too).
The profile allows everything, then denies writes outside the writable roots (and the
terminal and ``/dev/null``), writes to each root's ``.git``, any access to the ponder home,
and the network when it is off; in SBPL the last matching rule wins. Not tested on CI.
"""

from __future__ import annotations

from pathlib import Path

from daemon.sandbox.confinement import Confinement

__all__ = ["SANDBOX_EXEC", "seatbelt_argv", "seatbelt_profile"]

SANDBOX_EXEC = "/usr/bin/sandbox-exec"


def seatbelt_profile(confinement: Confinement, home: Path) -> str:
    rules = ["(version 1)", "(allow default)", '(deny file-write* (subpath "/"))']
    allowed = [f"(subpath {_quote(root)})" for root in confinement.writable_roots]
    allowed += ['(literal "/dev/null")', '(regex #"^/dev/tty")', '(regex #"^/dev/fd/")']
    rules.append(f"(allow file-write* {' '.join(allowed)})")
    rules += [f"(deny file-write* (subpath {_quote(root / '.git')}))" for root in confinement.writable_roots]
    rules.append(f"(deny file-read* file-write* (subpath {_quote(home.resolve())}))")
    if not confinement.network:
        rules.append("(deny network*)")
    return "\n".join(rules)


def seatbelt_argv(confinement: Confinement, command: str, home: Path) -> list[str]:
    return [SANDBOX_EXEC, "-p", seatbelt_profile(confinement, home), "/bin/sh", "-c", command]


def _quote(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'
