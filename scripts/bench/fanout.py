"""Measure 7, fan-out: what each extra subscriber of a session costs the daemon, and what the
event ring holds per session (issue 33).

A real ``ponder serve --listen unix:SOCK`` (mock provider, no delay) streams turns of about 240
events to one driver plus K observers (K = 0, 1, 2, 4, 8), each a thread reading its socket as
fast as it can. The daemon's CPU time (utime + stime from /proc) per event is measured for each
K; the slope of a least-squares line through (K, CPU per event) is the cost of one more
subscriber, per event. The ring's memory: 10,000 of the events the driver received (as the
daemon encoded them), put in an ``EventRing`` under tracemalloc.

``uv run python -m scripts.bench --only fanout`` (or ``uv run python scripts/bench/fanout.py``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``scripts.bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench.proc import cpu_seconds

ROOT = Path(__file__).resolve().parents[2]
SUBSCRIBERS = (0, 1, 2, 4, 8)


class _Reader(threading.Thread):
    """A client on the socket: sends what it is given, reads every line, counts turn_ends."""

    def __init__(self, path: Path, keep: bool = False) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.keep = keep
        self.lines: list[bytes] = []
        self.answers: dict[int, Any] = {}
        self.turn_ends = 0
        self.events = 0
        self.changed = threading.Condition()
        self.start()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def request(self, request_id: int, method: str, params: dict[str, Any]) -> Any:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        with self.changed:
            self.changed.wait_for(lambda: request_id in self.answers, timeout=30)
        answer = self.answers[request_id]
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["result"]

    def run(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:  # closed by ``close``
                return
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if b'"agent/event"' in line:
                    self.events += 1
                    if self.keep:
                        self.lines.append(line)
                    if b'"turn_end"' in line:
                        with self.changed:
                            self.turn_ends += 1
                            self.changed.notify_all()
                elif b'"id"' in line:
                    message = json.loads(line)
                    with self.changed:
                        self.answers[message.get("id")] = message
                        self.changed.notify_all()

    def wait_turn_ends(self, count: int, timeout: float = 120) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.turn_ends >= count, timeout=timeout):
                raise RuntimeError(f"only {self.turn_ends} of {count} turns ended")

    def close(self) -> None:
        self.sock.close()


def _one(work: Path, subscribers: int, turns: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    home.mkdir(mode=0o700)
    sock = Path(tempfile.mkdtemp(prefix="pfan-")) / "s.sock"
    env = {**os.environ, "PONDER_HOME": str(home), "PONDER_MOCK_DELAY_MS": "0"}
    stderr = open(work / f"serve-{subscribers}.stderr", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "daemon", "serve", "--listen", f"unix:{sock}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    readers: list[_Reader] = []
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("ponder serve --listen did not start")
            time.sleep(0.02)
        time.sleep(0.1)
        driver = _Reader(sock, keep=True)
        readers.append(driver)
        driver.request(1, "initialize", {"protocol_version": 1})
        session = driver.request(2, "session/start", {"model_id": "mock/thinker", "thinking_level": "max"})
        session_id = session["session"]["session_id"]
        # One warm-up turn (loads the session manager, the agent, the provider) before measuring.
        driver.request(3, "session/prompt", {"session_id": session_id, "text": "warm up"})
        driver.wait_turn_ends(1)
        for _ in range(subscribers):
            reader = _Reader(sock)
            readers.append(reader)
            reader.request(1, "initialize", {"protocol_version": 1, "capabilities": {"role": "observer"}})
            reader.request(2, "session/subscribe", {"session_id": session_id})
        events_before = driver.events
        cpu_before, wall_before = cpu_seconds(process.pid), time.monotonic()
        for turn in range(turns):
            driver.request(10 + turn, "session/prompt", {"session_id": session_id, "text": f"Think long {turn}"})
            driver.wait_turn_ends(2 + turn)
        for reader in readers[1:]:
            reader.wait_turn_ends(turns)
        cpu, wall = cpu_seconds(process.pid) - cpu_before, time.monotonic() - wall_before
        events = driver.events - events_before
        return {
            "subscribers": 1 + subscribers,
            "events": events,
            "cpu_s": cpu,
            "wall_s": wall,
            "cpu_us_per_event": cpu / events * 1e6,
            "lines": driver.lines,
        }
    finally:
        for reader in readers:
            reader.close()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        stderr.close()


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def ring_memory(lines: list[bytes], events: int = 10_000) -> dict[str, Any]:
    """The memory a full ring of ``events`` such events takes (the encoded bytes and the deque)."""
    from daemon.server.ring import EventRing

    sample = [line for line in lines if len(line) < 1024 * 1024]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ring = EventRing()
    for seq in range(1, events + 1):
        ring.append(seq, bytes(bytearray(sample[seq % len(sample)])))  # a copy each, as each event is its own
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "events": len(ring),
        "encoded_bytes": ring.size_bytes,
        "traced_bytes": after - before,
        "mean_event_bytes": ring.size_bytes / max(1, len(ring)),
    }


def queueing_cost(lines: list[bytes], events: int = 20_000) -> dict[str, Any]:
    """The fan-out itself, in process: ``RpcBridge.emit_nowait`` of real events (decoded from what
    the driver received) to 1..9 listening peers whose queues are drained as they fill; µs per
    event for each count, and the slope. No socket writes: those are in the end-to-end figure."""
    import anyio
    import msgspec

    from daemon.jsonrpc.backlog import Backlog
    from daemon.jsonrpc.connection import Connection
    from daemon.jsonrpc.framing import Outgoing
    from daemon.server.rpc_bridge import RpcBridge
    from protocol.events import AgentEvent

    decoded = [msgspec.json.decode(line)["params"] for line in lines]
    sample = [msgspec.convert(params, AgentEvent) for params in decoded if params.get("type") != "message_end"]

    async def run(peers: int) -> float:
        bridge = RpcBridge(listening=True)
        queues = []
        for _ in range(peers):
            send, receive = anyio.create_memory_object_stream[Outgoing](events + 10)
            queues.append((send, receive))
            # As the daemon's connections: the queue bounded in bytes (here never reached).
            connection = Connection(send, backlog=Backlog(1 << 40))
            peer = bridge.add_peer(connection, "unix", drop=lambda reason: None)
            bridge.follow(peer, sample[0].session_id)
        started = time.perf_counter()
        for seq in range(1, events + 1):
            event = sample[seq % len(sample)]
            event.seq = seq
            bridge.emit_nowait(event)
        elapsed = time.perf_counter() - started
        for send, receive in queues:
            send.close()
            receive.close()
        return elapsed / events * 1e6

    results = {}
    for peers in (1, 2, 3, 5, 9):
        results[peers] = min(anyio.run(run, peers) for _ in range(3))
    return {"us_per_event": results, "slope_us": _slope([(k, v) for k, v in results.items()])}


def measure_fanout(bench: Any = None, turns: int = 40, repeats: int = 3) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="ponder-fanout-")) if bench is None else bench.work / "fanout"
    work.mkdir(exist_ok=True)
    runs = []
    lines: list[bytes] = []
    for k in SUBSCRIBERS:
        tries = [_one(work / f"r{k}-{i}", k, turns) for i in range(repeats)]
        lines = lines or tries[0]["lines"]
        for run in tries:
            run.pop("lines")
        runs.append(sorted(tries, key=lambda run: run["cpu_us_per_event"])[len(tries) // 2])  # the median
    slope = _slope([(run["subscribers"], run["cpu_us_per_event"]) for run in runs])
    return {
        "runs": runs,
        "us_per_event_per_extra_subscriber": slope,
        "queueing": queueing_cost(lines),
        "ring": ring_memory(lines),
    }


if __name__ == "__main__":
    result = measure_fanout(turns=int(sys.argv[1]) if len(sys.argv) > 1 else 40)
    for run in result["runs"]:
        print(
            f"{run['subscribers']:2d} subscriber(s): {run['events']} events, daemon CPU {run['cpu_s']:.2f} s, "
            f"{run['cpu_us_per_event']:.1f} µs/event, wall {run['wall_s']:.2f} s"
        )
    print(f"fan-out: {result['us_per_event_per_extra_subscriber']:.1f} µs of daemon CPU per event per extra subscriber")
    queueing = result["queueing"]
    per = ", ".join(f"{k}: {v:.2f}" for k, v in queueing["us_per_event"].items())
    print(f"queueing alone (emit_nowait, in process), µs/event by peers: {per}; slope {queueing['slope_us']:.2f} µs")
    ring = result["ring"]
    print(
        f"ring: {ring['events']} events, {ring['encoded_bytes'] / 1e6:.2f} MB encoded "
        f"(mean {ring['mean_event_bytes']:.0f} B/event), {ring['traced_bytes'] / 1e6:.2f} MB allocated in all"
    )
