"""What the OS sandbox adds to one ``run_command``: the median wall time of N ``true`` runs
through the real tool (spawn, stream, reap), unconfined and under each sandbox that works here.

    uv run python scripts/sandbox_overhead.py [N]      # N defaults to 50
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from daemon.config.sandbox import SandboxSettings
from daemon.sandbox.command import CommandSandbox
from daemon.sandbox.confinement import Override, decide_confinement
from daemon.sandbox.probe import Support, probe
from daemon.tools.base import ToolContext
from daemon.tools.run_command import RunCommand, RunCommandArgs


async def median_ms(runs: int, cwd: Path, sandbox: CommandSandbox | None) -> float:
    tool, args, times = RunCommand(), RunCommandArgs(command="true"), []
    await tool.run(args, ToolContext(cwd=cwd, sandbox=sandbox))  # warm: page cache, the first mkdir
    for _ in range(runs):
        started = time.perf_counter()
        result = await tool.run(args, ToolContext(cwd=cwd, sandbox=sandbox))
        times.append(time.perf_counter() - started)
        assert not result.is_error, result.text
        assert sandbox is None or (result.sandbox is not None and result.sandbox.enforced)
    return statistics.median(times) * 1000


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as base:
        cwd, home = Path(base, "work"), Path(base, "home")
        cwd.mkdir()
        home.mkdir()
        supports: list[Support] = [probe(), probe(path_env="/nonexistent")]  # bubblewrap, then the fallback
        unconfined = await median_ms(runs, cwd, None)
        print(f"unconfined       median of {runs}: {unconfined:6.1f} ms")
        seen = set()
        for support in supports:
            if support.mechanism is None or support.mechanism in seen:
                continue
            seen.add(support.mechanism)
            confinement = decide_confinement(SandboxSettings(), Override(), support, cwd, Path(base, "tmp"))
            sandbox = CommandSandbox(confinement, support, home, tmp_dir=Path(base, "tmp"))
            confined = await median_ms(runs, cwd, sandbox)
            added = confined - unconfined
            print(f"{support.mechanism:<16} median of {runs}: {confined:6.1f} ms  (+{added:.1f} ms per run)")


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 50)
