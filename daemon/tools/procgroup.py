"""Ending a command's whole process group: SIGTERM, a short grace, then SIGKILL.

``run_command`` starts each command in a new session, so its process group holds the
shell and everything it spawned (unless they deliberately left it). Killing only the
shell would orphan its children, still running and still holding the output pipe.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
from anyio.abc import Process

__all__ = ["group_alive", "signal_group", "terminate_group"]

_POLL_S = 0.05
_AFTER_KILL_S = 1.0
_PROC = Path("/proc")


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running.

    On Linux this reads /proc and ignores zombies: where PID 1 does not reap orphans
    (containers, some VMs), a dead child stays a zombie forever and ``killpg(pgid, 0)``
    would call the group alive.
    """
    if not _PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    with os.scandir(_PROC) as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue
            # Fields after the ')' that ends the command name: state, ppid, pgrp, ...
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


async def terminate_group(process: Process, grace_s: float) -> None:
    """SIGTERM the group led by ``process``, SIGKILL whatever is left after ``grace_s``.

    Returns once the leader is reaped. Call it shielded: it must finish even when the
    caller is being cancelled.
    """
    pgid = process.pid
    signal_group(pgid, signal.SIGTERM)
    with anyio.move_on_after(grace_s):
        await process.wait()
        while group_alive(pgid):
            await anyio.sleep(_POLL_S)
        return
    signal_group(pgid, signal.SIGKILL)
    await process.wait()
    # SIGKILL lands when each process is next scheduled, not at once; wait for it (but
    # not forever: a process stuck in uninterruptible I/O dies when the I/O ends).
    with anyio.move_on_after(_AFTER_KILL_S):
        while group_alive(pgid):
            await anyio.sleep(_POLL_S / 5)
