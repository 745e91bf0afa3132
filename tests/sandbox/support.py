"""What the sandbox tests share: the machine's sandboxes (probed once) and a way to run one
command through ``run_command`` confined, as a session would."""

import functools
from pathlib import Path

import pytest

from daemon.config.sandbox import SandboxMode, SandboxSettings
from daemon.sandbox.command import CommandSandbox
from daemon.sandbox.confinement import Override, decide_confinement
from daemon.sandbox.probe import Support, landlock_abi, probe
from daemon.tools.base import ToolContext, ToolResult
from daemon.tools.run_command import RunCommand, RunCommandArgs


@functools.cache
def bubblewrap() -> Support:
    return probe()


@functools.cache
def landlock() -> Support:
    # No bwrap on this PATH: the probe falls back to Landlock, as where user namespaces are blocked.
    return probe(path_env="/nonexistent-ponder-test")


needs_bwrap = pytest.mark.skipif(
    bubblewrap().mechanism != "bubblewrap",
    reason=f"bubblewrap does not work here ({bubblewrap().reason}); .ci/run installs it as root",
)
needs_landlock = pytest.mark.skipif(
    landlock().mechanism != "landlock", reason=f"Landlock does not work here (ABI {landlock_abi()})"
)


def sandbox_for(
    support: Support,
    cwd: Path,
    home: Path,
    *,
    mode: SandboxMode = "workspace_write",
    network: bool = False,
    hidden: tuple[Path, ...] = (),
) -> CommandSandbox:
    tmp_dir = cwd.parent / f"{cwd.name}-session-tmp"
    confinement = decide_confinement(SandboxSettings(mode=mode, network=network), Override(), support, cwd, tmp_dir)
    return CommandSandbox(confinement, support, home, hidden=hidden, tmp_dir=tmp_dir)


async def run(sandbox: CommandSandbox, cwd: Path, command: str, timeout_s: float = 60) -> ToolResult:
    return await RunCommand().run(
        RunCommandArgs(command=command, timeout_s=timeout_s), ToolContext(cwd=cwd, sandbox=sandbox)
    )
