"""What ``run_command`` holds for one command: how to spawn it (confined, unconfined, or not
at all) and how to report it (``tool_execution_end.sandbox``).

``CommandSandbox.spawn_argv`` is the argv to start (None: run ``/bin/sh -c`` unconfined, as
without a sandbox); ``refusal`` set means no command may run (``[sandbox] required`` and no
sandbox here). ``unconfined()`` is the same command run once outside the sandbox, after the
person allowed it (``permission/request`` with ``reason: "sandbox"``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from daemon.sandbox.bwrap import bwrap_argv
from daemon.sandbox.confinement import Confinement
from daemon.sandbox.denial import looks_denied
from daemon.sandbox.landlock import landlock_argv
from daemon.sandbox.probe import Support
from daemon.sandbox.seatbelt import seatbelt_argv
from protocol.events import ToolSandbox

__all__ = ["CommandSandbox"]


@dataclass(frozen=True)
class CommandSandbox:
    confinement: Confinement
    support: Support
    home: Path  # the ponder home: hidden inside
    hidden: tuple[Path, ...] = ()  # more paths hidden inside (a --listen unix: socket)
    tmp_dir: Path | None = None  # the session's temporary directory (TMPDIR inside)
    escaped: bool = False  # run unconfined once, by the person's leave

    @property
    def enforced(self) -> bool:
        return self.confinement.enforced and not self.escaped

    @property
    def refusal(self) -> str | None:
        return None if self.escaped else self.confinement.refusal

    def unconfined(self) -> CommandSandbox:
        return replace(self, escaped=True)

    def spawn_argv(self, command: str, cwd: Path) -> list[str] | None:
        """The argv that runs ``command`` confined in ``cwd``; None: run it unconfined."""
        if not self.enforced:
            return None
        if self.tmp_dir is not None:
            self.tmp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        mechanism = self.confinement.mechanism
        if mechanism == "bubblewrap":
            return bwrap_argv(self.support, self.confinement, command, cwd, self.home, self.hidden)
        if mechanism == "landlock":
            return landlock_argv(self.support, self.confinement, command)
        return seatbelt_argv(self.confinement, command, self.home)

    def env(self) -> dict[str, str]:
        """Variables the confined command gets on top of its environment."""
        if not self.enforced or self.tmp_dir is None or self.tmp_dir not in self.confinement.writable_roots:
            return {}
        return {"TMPDIR": str(self.tmp_dir)}

    def report(self, returncode: int | None, output: str) -> ToolSandbox:
        return ToolSandbox(
            enforced=self.enforced,
            mechanism=self.confinement.mechanism if self.enforced else None,
            denied=looks_denied(self.enforced, self.confinement.network, returncode, output),
        )
