"""The command line that runs one command under Landlock (the fallback where bubblewrap
cannot run): ``landlock_exec.py`` confines itself, then runs ``/bin/sh -c``.

Everything stays readable and executable; the writable roots are writable; of ``/dev``
only the terminal and the usual character devices (``/dev/null``, ``/dev/zero``, …) can
be written, so ``/dev/shm`` cannot. What Landlock cannot do (keep ``.git`` read-only
inside a writable root, hide the ponder home, cut UDP) is in ``Confinement.degraded``.
"""

from __future__ import annotations

import json

from daemon.sandbox.bwrap import MAX_PROCESSES
from daemon.sandbox.confinement import Confinement
from daemon.sandbox.probe import LANDLOCK_EXEC, Support

__all__ = ["DEVICES", "landlock_argv"]

DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)


def landlock_argv(support: Support, confinement: Confinement, command: str) -> list[str]:
    spec = {
        "read": ["/"],
        "write": [str(root) for root in confinement.writable_roots],
        "devices": list(DEVICES),
        "network": confinement.network,
        "max_processes": MAX_PROCESSES,
    }
    return [support.python, "-I", "-S", str(LANDLOCK_EXEC), json.dumps(spec), "--", "/bin/sh", "-c", command]
