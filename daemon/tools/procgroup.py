"""Ending a command's whole process group: SIGTERM, a short grace, then SIGKILL; also
when the daemon itself dies.

``run_command`` starts each command in a new session, so its process group holds the
shell and everything it spawned (unless they deliberately left it). Killing only the
shell would orphan its children, still running and still holding the output pipe.

``watch_group`` hands a group to the watcher: one small process per daemon (started on
first use, in its own session, so a signal to the daemon's group does not take it too)
that holds the read end of a pipe only the daemon writes to. When the daemon ends in
any way, SIGKILL included, the pipe reaches end-of-file and the watcher ends every group
still registered (SIGTERM, ``WATCHER_GRACE_S``, SIGKILL): grandchildren too, which
``PR_SET_PDEATHSIG`` cannot reach (it is per process, cleared on fork, and fires when the
parent *thread* exits). Only pipes, sessions and ``killpg`` are used, so this works
the same on macOS and the BSDs. A process that leaves the group (``setsid``) is on its
own, deliberately.

A group exists before the daemon can hand it over: between the fork and ``watch_group``
the daemon waits for its event loop (trio even spawns on a worker thread), and a daemon
killed in that window would leave the command running with no one to end it. A command
that may run for long therefore starts behind a gate (``gated_argv``): a shell that waits
for one line on its stdin, sent by ``watch_then_open_gate`` once the group is watched,
and then ``exec``s the command (same pid, same group) with stdin from ``/dev/null``. If
the daemon dies first, the gate reads end-of-file and the command never starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.abc import Process

__all__ = [
    "WATCHER_GRACE_S",
    "gated_argv",
    "group_alive",
    "release_group",
    "signal_group",
    "terminate_group",
    "watch_group",
    "watch_then_open_gate",
]

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
        # Polled, not awaited: the group's other members are not our children, and the kernel
        # has no event for "this process group is empty"; /proc is the only way to know.
        while group_alive(pgid):  # noqa: ASYNC110
            await anyio.sleep(_POLL_S)
        return
    signal_group(pgid, signal.SIGKILL)
    await process.wait()
    # SIGKILL lands when each process is next scheduled, not at once; wait for it (but
    # not forever: a process stuck in uninterruptible I/O dies when the I/O ends).
    with anyio.move_on_after(_AFTER_KILL_S):
        while group_alive(pgid):  # noqa: ASYNC110 (polled for the same reason as above)
            await anyio.sleep(_POLL_S / 5)


# --- the watcher: groups die with the daemon ---------------------------------------------

WATCHER_GRACE_S = 1.0

_WATCHER = Path(__file__).with_name("group_watcher.py")


class _Watcher:
    """The daemon's side of the watcher: the write end of its pipe, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None
        self._pid = 0  # the daemon process the watcher belongs to (a fork needs its own)

    def send(self, line: str) -> None:
        with self._lock:
            for _ in range(2):  # a watcher that died (someone killed it) is replaced once
                fd = self._ensure()
                if fd is None:
                    return
                try:
                    os.write(fd, line.encode())
                    return
                except OSError:
                    self._drop()

    def _ensure(self) -> int | None:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        read_end, write_end = os.pipe()  # not inheritable: no child of ours holds it open
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_WATCHER), str(WATCHER_GRACE_S)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={},
                start_new_session=True,
            )
        except OSError:
            os.close(write_end)
            return None
        finally:
            os.close(read_end)
        self._fd, self._pid = write_end, os.getpid()
        return write_end

    def _drop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        if self._process is not None:
            self._process.poll()  # reap it
        self._fd = self._process = None


_watcher = _Watcher()


def watch_group(pgid: int) -> None:
    """End the group ``pgid`` when this process ends, however it ends (SIGKILL included)."""
    _watcher.send(f"+{pgid}\n")


# "$@" is the command's argv; 125 is what env(1) and others use for "could not run the command".
_GATE = ("/bin/sh", "-c", 'read -r _ || exit 125; exec "$@" </dev/null', "ponder-gate")


def gated_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` behind the gate: start it with the read end of a pipe as stdin."""
    return [*_GATE, *argv]


def watch_then_open_gate(pgid: int, gate: int) -> None:
    """Hand the group to the watcher, then let its gated command start; closes ``gate``
    (the pipe's write end) in every case, so a command whose gate is never opened ends."""
    try:
        watch_group(pgid)
        os.write(gate, b"\n")
    except OSError:
        pass  # the gate already ended (killed): nothing to start
    finally:
        os.close(gate)


def release_group(pgid: int) -> None:
    """Tell the watcher the group ``pgid`` is gone, when it is (a zombie counts as there).

    A group still running (a background job) stays watched; the watcher forgets it on
    its own once it is gone. Cheap (one ``killpg``), unlike ``group_alive``.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        _watcher.send(f"-{pgid}\n")
    except PermissionError:
        pass
