"""Turn leases: which process may run a session's turn, across daemons sharing one file.

The owner is ``"<pid>:<process start time>:<random>"``, so a lease whose process died (or
whose pid was reused by another process) is taken over before it expires.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable

from daemon.store.db import Database


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


def _owner_alive(owner: str) -> bool:
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


class LeaseQueries(Database):
    def acquire_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        """Take (or extend) the session's turn lease for ``owner``.

        False while another owner holds it unexpired and that owner's process is alive.
        """
        return self._write(self._acquire_lease_body(session_id, owner, ttl_s))

    def _acquire_lease_body(self, session_id: str, owner: str, ttl_s: float) -> Callable[[sqlite3.Connection], bool]:
        def body(db: sqlite3.Connection) -> bool:
            now = self._clock()
            held = db.execute(
                "SELECT owner, expires_at FROM turn_leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if held is not None and held[0] != owner and held[1] > now and _owner_alive(held[0]):
                return False
            self._require_session(db, session_id)
            db.execute(
                """
                INSERT INTO turn_leases (session_id, owner, expires_at) VALUES (?, ?, ?)
                ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
                """,
                (session_id, owner, now + ttl_s),
            )
            return True

        return body

    def lease_holder(self, session_id: str) -> str | None:
        """Who holds the session's turn lease, as a person reads it (``process 4242``); None when nobody."""
        row = self._read(
            lambda db: db.execute("SELECT owner FROM turn_leases WHERE session_id = ?", (session_id,)).fetchone()
        )
        if row is None:
            return None
        pid = str(row[0]).split(":", 1)[0]
        return f"process {pid}" if pid.isdigit() else "another process"

    def release_lease(self, session_id: str, owner: str) -> bool:
        """Drop ``owner``'s lease; False if it did not hold it."""
        return self._write(
            lambda db: (
                db.execute("DELETE FROM turn_leases WHERE session_id = ? AND owner = ?", (session_id, owner)).rowcount
                > 0
            )
        )
