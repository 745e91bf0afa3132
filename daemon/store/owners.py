"""Who holds a turn lease on SQLite: an owner string per daemon process,
``"<pid>:<process start time>:<random>"``, so a lease whose process died (or whose pid was
reused by another process) is known to be free before it expires (one machine only: the
PostgreSQL backend asks the server whether the holder's connection is still there).
"""

from __future__ import annotations

import os
import sys


def process_start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from /proc), or "" where unknown.

    A pid is reused (a container restart hands the daemon the same pid again); the pid with
    its start time names one process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return ""
    # Field 2 (the command name) may hold spaces and parentheses: count from the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


def new_lease_owner() -> str:
    """An owner string for this process: pid and start time make a dead owner detectable."""
    pid = os.getpid()
    return f"{pid}:{process_start_time(pid)}:{os.urandom(8).hex()}"


def owner_alive(owner: str) -> bool:
    # "<pid>:<start time>:<random>", or "<pid>:<random>" from an older ponder.
    fields = owner.split(":")
    try:
        pid = int(fields[0])
    except ValueError:
        return True  # not ours to judge; the expiry still frees it
    if pid <= 0:
        return True
    if sys.platform == "win32":
        # os.kill(pid, 0) on Windows sends CTRL_C_EVENT; rely on the expiry there.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # EPERM: it exists, it just belongs to someone else
    if len(fields) != 3 or not fields[1]:
        return True  # no start time recorded: the pid is all there is to go on
    # The pid is alive, but it may be another process that got the dead owner's pid.
    current = process_start_time(pid)
    return not current or current == fields[1]
