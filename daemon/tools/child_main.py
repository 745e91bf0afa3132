"""The scan child's side (see ``daemon.tools.child``): read the request, die with the daemon,
limit its CPU time, run ``list_files``'s or ``search``'s scan, and write the reply."""

import json
import math
import os
import signal
import sys
from pathlib import Path

from daemon.tools.base import ToolError, ToolResult

__all__ = ["main"]


def main() -> None:
    """The child's side: read the request, run the scan, write the reply."""
    request = json.loads(sys.stdin.buffer.read())
    _die_with(request["parent_pid"])
    _limit_cpu(request["time_limit_s"])
    from daemon.tools import list_files, search  # after the limits: importing costs time too

    scans = {"list_files": list_files.scan, "search": search.scan}
    try:
        result = scans[request["tool"]](Path(request["root"]), Path(request["start"]), **request["args"])
    except ToolError as exc:
        result = ToolResult(str(exc), is_error=True)
    sys.stdout.buffer.write(json.dumps({"text": result.text, "is_error": result.is_error}).encode())
    sys.stdout.flush()


def _die_with(parent_pid: int) -> None:
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)  # the daemon is already gone


def _limit_cpu(time_limit_s: float) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    wanted = math.ceil(time_limit_s) + 2  # the daemon normally kills it first, by wall-clock time
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft == resource.RLIM_INFINITY or wanted < soft:
        resource.setrlimit(resource.RLIMIT_CPU, (wanted, hard))
