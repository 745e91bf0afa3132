"""What one session's commands get: the settings (config.toml ``[sandbox]``, then the
session's own ``session/start {sandbox}``) met with what this machine supports.

``Confinement`` is that decision: the mode and network in force, the writable roots, the
mechanism, whether it is enforced, and what it cannot enforce (``degraded``: ``git``,
``home``, ``network``), plus ``refusal`` when ``[sandbox] required`` finds no sandbox (each
command is then a tool error). ``Session.sandbox`` is its wire form.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from daemon.config.sandbox import SandboxMode, SandboxSettings
from daemon.sandbox.probe import INSTALL_HINT, Support
from protocol.objects import SandboxMechanism, SessionSandbox

__all__ = ["Confinement", "Override", "decide_confinement"]


# Structs, not dataclasses: session/list (``ponder sessions``) builds them in a fresh daemon,
# and a dataclass compiles its methods at import.
class Override(msgspec.Struct, frozen=True):
    """``session/start {sandbox: {mode?, network?}}``: None keeps config.toml's value."""

    mode: SandboxMode | None = None
    network: bool | None = None

    @classmethod
    def stored(cls, mode: str | None, network: bool | None) -> Override:
        """From a stored session's columns (an unknown mode follows config.toml)."""
        known: SandboxMode | None = mode if mode in ("off", "read_only", "workspace_write") else None  # type: ignore[assignment]
        return cls(known, network)


class Confinement(msgspec.Struct, frozen=True):
    mode: SandboxMode
    network: bool
    writable_roots: tuple[Path, ...]
    mechanism: SandboxMechanism | None
    enforced: bool
    degraded: tuple[str, ...]
    auto_approve: bool
    refusal: str | None = None  # set: no command runs (required, and no sandbox here)

    @property
    def approves(self) -> bool:
        """Whether this sandbox stands in for ``ask`` on ``run_command`` (PROTOCOL.md "Sandbox")."""
        return self.enforced and self.auto_approve and not self.degraded and not self.network

    def wire(self) -> SessionSandbox:
        return SessionSandbox(
            mode=self.mode,
            network=self.network,
            writable_roots=[str(root) for root in self.writable_roots],
            mechanism=self.mechanism,
            enforced=self.enforced,
            degraded=list(self.degraded),
            auto_approve=self.auto_approve,
        )


def decide_confinement(
    settings: SandboxSettings, override: Override, support: Support, cwd: Path, tmp_dir: Path
) -> Confinement:
    mode = override.mode or settings.mode
    network = settings.network if override.network is None else override.network
    if mode == "off":
        return Confinement("off", True, (), None, False, (), settings.auto_approve)
    usable = support.available and (support.mechanism != "bubblewrap" or support.bwrap_usable_for(cwd))
    if not usable:
        why = (
            support.reason
            if not support.available
            else f"the only bwrap found ({support.bwrap}) lies inside the session's working directory {cwd}."
        )
        refusal = (
            f"sandbox_unavailable: config.toml requires a sandbox ([sandbox] required = true) and none works here: "
            f"{why} {INSTALL_HINT}"
            if settings.required
            else None
        )
        return Confinement(mode, True, (), None, False, (), settings.auto_approve, refusal)
    roots: tuple[Path, ...] = ()
    if mode == "workspace_write":
        roots = tuple(dict.fromkeys([cwd, tmp_dir, *settings.writable_roots]))
    degraded: list[str] = []
    if support.mechanism == "landlock":
        # Landlock allows by tree and cannot take a subtree (.git, the home) back out of one.
        degraded += (["git"] if mode == "workspace_write" else []) + ["home"]
    if not network and not support.network_isolation:
        degraded.append("network")
    return Confinement(mode, network, roots, support.mechanism, True, tuple(degraded), settings.auto_approve)
