"""Processes under measurement: a lean JSON-RPC client for ``ponder serve``, /proc readers.

The bench does not use ``daemon.jsonrpc.client.RpcClient`` on the hot path on purpose: a reader
*thread* doing blocking reads timestamps each line the moment it arrives (the latency
measure needs that), and keeps the client's own cost small and off any event loop, so
the client is not what limits the daemon on a 2-core machine.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
CLK_TCK = os.sysconf("SC_CLK_TCK")
DELTA_TYPES = frozenset({"thinking_delta", "text_delta"})
READ_BUFFER = 64 * 1024


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads, living and finished), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def syscalls(pid: int) -> tuple[int, int]:
    """(read-like, write-like) system calls made so far by ``pid``, from /proc/<pid>/io."""
    counts = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        counts[key] = int(value)
    return counts.get("syscr", 0), counts.get("syscw", 0)


def peak_rss_mb(pid: int) -> float:
    """VmHWM (peak resident set) of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('message')} ({error.get('code')})")
        self.error = error


class Turn:
    """What the client saw of one turn: delta arrivals and the other events."""

    __slots__ = ("deltas", "end_ns", "ended", "events", "first_ns", "seqs", "session_id", "turn_id")

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.session_id = ""
        self.deltas: list[tuple[int, str, str]] = []  # (arrival ns, type, delta text)
        self.events: list[dict[str, Any]] = []  # every non-delta event, whole
        self.seqs: list[int] = []  # seq of every event in arrival order
        self.ended = threading.Event()
        self.end_ns = 0
        self.first_ns = 0


class DaemonProcess:
    """``ponder serve`` as a subprocess with a blocking JSON-RPC client and a reader thread."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: Path, cwd: str | None = None) -> None:
        self.argv = argv
        self.stderr_file = open(stderr_path, "ab")
        self.spawned_ns = time.monotonic_ns()
        # Read 64 KiB at a time, as an editor does (Node's pipe streams, anyio's buffered
        # streams, ponder's own client): Popen's default 8 KiB makes a 23 MB reply ~2,800
        # reads and the daemon's writer wake for each, which is the bench, not the daemon.
        self.proc = subprocess.Popen(
            argv,
            bufsize=READ_BUFFER,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            env=env,
            cwd=cwd,
        )
        self.pid = self.proc.pid
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._pending: dict[int, list[Any]] = {}
        self._turns: dict[str, Turn] = defaultdict(lambda: Turn(""))
        self._turns_lock = threading.Lock()
        self.notifications = 0
        self.bytes_read = 0
        self._reader = threading.Thread(target=self._read_loop, name="bench-reader", daemon=True)
        self._reader.start()

    # --- sending ---------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        data = _encode(message) + b"\n"
        with self._write_lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def request_async(self, method: str, params: Any = None) -> list[Any]:
        """Send a request; the returned slot is [event, reply, arrival_ns, sent_ns] once answered."""
        request_id = next(self._ids)
        slot: list[Any] = [threading.Event(), None, 0, 0]
        self._pending[request_id] = slot
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        slot[3] = time.monotonic_ns()
        self.send(message)
        return slot

    def wait_reply(self, slot: list[Any], timeout: float = 120.0) -> Any:
        if not slot[0].wait(timeout):
            raise TimeoutError(f"no reply within {timeout:g} s")
        reply = slot[1]
        if "error" in reply:
            raise RpcError(reply["error"])
        return reply.get("result")

    def call(self, method: str, params: Any = None, timeout: float = 120.0) -> Any:
        return self.wait_reply(self.request_async(method, params), timeout)

    def call_timed(self, method: str, params: Any = None, timeout: float = 120.0) -> tuple[Any, float]:
        """(result, seconds from writing the request to the reply's last byte arriving)."""
        slot = self.request_async(method, params)
        result = self.wait_reply(slot, timeout)
        return result, (slot[2] - slot[3]) / 1e9

    def initialize(self) -> Any:
        return self.call("initialize", {"protocol_version": 1, "client_info": {"name": "ponder-bench", "version": "1"}})

    # --- turns -----------------------------------------------------------------------

    def turn(self, turn_id: str) -> Turn:
        with self._turns_lock:
            turn = self._turns[turn_id]
            turn.turn_id = turn_id
            return turn

    def prompt(self, session_id: str, text: str) -> Turn:
        result = self.call("session/prompt", {"session_id": session_id, "text": text})
        return self.turn(result["turn_id"])

    def wait_turn(self, turn: Turn, timeout: float = 300.0) -> Turn:
        if not turn.ended.wait(timeout):
            raise TimeoutError(f"turn {turn.turn_id} did not end within {timeout:g} s")
        return turn

    def forget(self, turn: Turn) -> None:
        with self._turns_lock:
            self._turns.pop(turn.turn_id, None)

    # --- reading ---------------------------------------------------------------------

    def _read_loop(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        readline = stdout.readline
        while True:
            line = readline()
            if not line:
                break
            now = time.monotonic_ns()
            self.bytes_read += len(line)
            message = _decode(line)
            method = message.get("method")
            if method is None:
                slot = self._pending.pop(message.get("id"), None)
                if slot is not None:
                    slot[1], slot[2] = message, now
                    slot[0].set()
                continue
            if "id" in message:  # a daemon → client request (permission/request): decline
                self.send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "bench client"}})
                continue
            self.notifications += 1
            if method != "agent/event":
                continue
            params = message["params"]
            turn = self.turn(params["turn_id"])
            if not turn.first_ns:
                turn.first_ns = now
                turn.session_id = params["session_id"]
            turn.seqs.append(params["seq"])
            kind = params["type"]
            if kind in DELTA_TYPES:
                turn.deltas.append((now, kind, params["delta"]))
            else:
                turn.events.append(params)
                if kind == "turn_end":
                    turn.end_ns = now
                    turn.ended.set()

    # --- lifetime --------------------------------------------------------------------

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.pid)

    def close(self, timeout: float = 15.0) -> int:
        """Close stdin (graceful shutdown) and wait; kill if it hangs. Returns the exit code."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        self.stderr_file.close()
        return code

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.close()
