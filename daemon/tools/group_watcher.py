"""The watcher program (see ``daemon.tools.procgroup``): ends process groups when the daemon dies.

Run as ``python -I -S group_watcher.py GRACE_S`` with the read end of the daemon's pipe
as stdin; it imports nothing of ours, so it starts in milliseconds. Lines on stdin:
``+PGID`` registers a group, ``-PGID`` forgets it. End-of-file means the daemon is
gone (however it ended): every group still registered gets SIGTERM, then after
``GRACE_S`` SIGKILL. Every few seconds groups that are gone are forgotten, so a number
the system reuses later is never killed.
"""

import os
import select
import signal
import sys
import time

PRUNE_EVERY_S = 5.0


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill(groups: set[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass


def watch(fd: int) -> set[int]:
    """Follow the registrations on ``fd`` until end-of-file; the groups still registered."""
    groups: set[int] = set()
    buffer = b""
    while True:
        if not select.select([fd], [], [], PRUNE_EVERY_S)[0]:
            groups = {g for g in groups if alive(g)}
            continue
        data = os.read(fd, 4096)
        if not data:
            return groups
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))


def main() -> None:
    grace_s = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    groups = watch(0)
    kill(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while groups and time.monotonic() < deadline:
        time.sleep(0.05)
        groups = {g for g in groups if alive(g)}
    kill(groups, signal.SIGKILL)


if __name__ == "__main__":
    main()
