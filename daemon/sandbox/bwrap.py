"""The bubblewrap command line that runs one command confined.

A new user, PID, IPC, UTS (and, where it can, cgroup) namespace; ``--die-with-parent`` and
``--new-session`` (a command cannot reach the terminal with TIOCSTI); no capabilities; no
user namespace inside (``--disable-userns``, bwrap 0.8+), so ``unshare`` and ``mount``
fail; a network namespace of its own (loopback only) unless the network is on. The whole
file system read-only (``--ro-bind / /``), a fresh ``/dev`` (so ``/dev/shm`` is private),
``/proc`` of the new PID namespace (the daemon and its environment are not in it), a
private ``/tmp``; then each writable root bound read-write, each root's ``.git`` bound back
read-only, the ponder home replaced by an empty read-only directory and a listening socket
elsewhere by ``/dev/null``. Mounts are made parents first, so a root inside the home, or
the home inside a root, comes out right. The command runs as ``/bin/sh -c`` under
``prlimit --nproc`` (a fork bomb meets RLIMIT_NPROC, counted in the new user namespace).
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.sandbox.confinement import Confinement
from daemon.sandbox.probe import Support

__all__ = ["MAX_PROCESSES", "bwrap_argv"]

MAX_PROCESSES = 1024  # RLIMIT_NPROC inside: far above a build's needs, far below the kernel's pid_max


def bwrap_argv(
    support: Support,
    confinement: Confinement,
    command: str,
    cwd: Path,
    home: Path,
    hidden: tuple[Path, ...],
) -> list[str]:
    assert support.bwrap is not None
    argv = [str(support.bwrap), "--die-with-parent", "--new-session", "--unshare-user", "--unshare-pid"]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not confinement.network:
        argv.append("--unshare-net")
    if support.bwrap_disable_userns:
        argv.append("--disable-userns")
    mounts: list[tuple[Path, list[str]]] = [
        (Path("/"), ["--ro-bind", "/", "/"]),
        (Path("/dev"), ["--dev", "/dev"]),
        (Path("/proc"), ["--proc", "/proc"]),
        (Path("/tmp"), ["--tmpfs", "/tmp"]),
    ]
    # The private /tmp would hide programs the person runs from there (a virtualenv under /tmp on
    # PATH): those stay visible, read-only, as the rest of the file system is.
    for tool_dir in _path_dirs_under_tmp():
        mounts.append((tool_dir, ["--ro-bind", str(tool_dir), str(tool_dir)]))
    if cwd not in confinement.writable_roots:  # read_only: the workspace is there, read-only (/tmp is not)
        mounts.append((cwd, ["--ro-bind", str(cwd), str(cwd)]))
    for root in confinement.writable_roots:
        mounts.append((root, ["--bind", str(root), str(root)]))
        git = root / ".git"
        if git.exists() and not git.is_symlink():  # a symlinked .git points outside: read-only there
            mounts.append((git, ["--ro-bind", str(git), str(git)]))
    real_home = home.resolve()
    remounts: list[str] = []
    if real_home.is_dir():
        mounts.append((real_home, ["--tmpfs", str(real_home)]))
        remounts += ["--remount-ro", str(real_home)]
    for path in hidden:
        if path.exists() and not _within(path, real_home):
            mounts.append((path, ["--ro-bind", "/dev/null", str(path)]))
    # Parents before children (a stable sort keeps a root's --bind before its .git's --ro-bind).
    for _, flags in sorted(mounts, key=lambda mount: len(mount[0].parts)):
        argv += flags
    argv += remounts
    argv += ["--cap-drop", "ALL", "--chdir", str(cwd), "--"]
    if support.prlimit is not None:
        argv += [str(support.prlimit), f"--nproc={MAX_PROCESSES}:{MAX_PROCESSES}", "--"]
    return [*argv, "/bin/sh", "-c", command]


def _path_dirs_under_tmp() -> list[Path]:
    """PATH entries under /tmp (a virtualenv's whole tree when the entry is its bin/)."""
    found: list[Path] = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real = Path(entry).resolve()
        if not real.is_dir() or Path("/tmp") not in real.parents:
            continue
        found.append(real.parent if (real.parent / "pyvenv.cfg").is_file() else real)
    return found


def _within(path: Path, directory: Path) -> bool:
    real = path.resolve()
    return real == directory or directory in real.parents
