"""Measure 8, the store backends side by side: SQLite (one home's ``sessions.db``) and PostgreSQL
(a throwaway server started for the run, Unix socket, as the tests start it; or the one
``PONDER_BENCH_POSTGRES_URL`` names, a fresh schema in it per figure). Issue 34.

- appends/s: messages saved per second through ``daemon.store.Store`` / ``PostgresStore``
  (``save_message`` of a one-part message, one transaction each, as a turn's checkpoints
  and final saves are), by 1 and by 4 processes ("daemons") at once, each on its own session,
  for ``seconds`` each;
- lease takeover: two real ``ponder serve`` processes (SQLite: one home; PostgreSQL: two homes,
  one URL); the first streams a turn, is killed with SIGKILL, and the second prompts every
  10 ms until it is admitted: the time from the kill to the admission (median, max of ``rounds``);
- notification latency (PostgreSQL only: SQLite has no feed): daemon B renames a session that
  daemon A's client follows; from B's request written to A's ``session/updated`` read, p50/p99;
- 200-session burst: one daemon, 200 sessions, one prompt each written at once (mock/echo, no
  delay): time until every prompt is answered and until every turn has ended;
- cold start: spawn ``ponder serve`` -> ``initialize`` answered (median of ``rounds``, after a
  warm-up start that creates or migrates the store).

``uv run python -m scripts.bench --only backends`` (or ``uv run python scripts/bench/store_backends.py``).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``scripts.bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]


class _Daemon:
    """``ponder serve`` on stdio with a reader thread: answers by id, every notification timestamped."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.started_ns = time.monotonic_ns()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "serve"],
            cwd=ROOT,
            env={**os.environ, "PONDER_HOME": str(home), "PONDER_MOCK_DELAY_MS": "0", **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._ids = iter(range(1, 1 << 30))
        self._lock = threading.Lock()
        self.answers: dict[int, tuple[int, Any]] = {}
        self.updates: list[tuple[int, dict[str, Any]]] = []  # (arrival ns, session)
        self.turn_ends: set[str] = set()
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic_ns()
            message = json.loads(line)
            with self.changed:
                if "id" in message and "method" not in message:
                    self.answers[message["id"]] = (now, message)
                elif message.get("method") == "session/updated":
                    self.updates.append((now, message["params"]["session"]))
                elif message.get("method") == "agent/event" and message["params"]["type"] == "turn_end":
                    self.turn_ends.add(message["params"]["turn_id"])
                self.changed.notify_all()

    def send(self, method: str, params: Any) -> int:
        request_id = next(self._ids)
        data = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode() + b"\n"
        with self._lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        return request_id

    def answer(self, request_id: int, timeout: float = 60) -> tuple[int, dict[str, Any]]:
        with self.changed:
            if not self.changed.wait_for(lambda: request_id in self.answers, timeout=timeout):
                raise TimeoutError(f"no answer to request {request_id}")
            return self.answers.pop(request_id)

    def call(self, method: str, params: Any) -> Any:
        _, message = self.answer(self.send(method, params))
        if "error" in message:
            raise RuntimeError(message["error"]["message"])
        return message["result"]

    def initialize(self) -> Any:
        return self.call("initialize", {"protocol_version": 1, "client_info": {"name": "bench", "version": "1"}})

    def wait_turns(self, turn_ids: set[str], timeout: float = 120) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: turn_ids <= self.turn_ends, timeout=timeout):
                raise TimeoutError(f"{len(turn_ids - self.turn_ends)} turns did not end")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- the stores ----------------------------------------------------------------------------------


class _Backends:
    """Where each figure's store is: a fresh SQLite home, or a fresh PostgreSQL schema."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.server: Any = None
        self.base_url = os.environ.get("PONDER_BENCH_POSTGRES_URL", "")
        if not self.base_url:
            from tests.support.postgres import ThrowawayPostgres

            self.server = ThrowawayPostgres()
            self.base_url = self.server.url()

    def fresh_url(self) -> str:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.base_url, autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {schema}")
        separator = "&" if "?" in self.base_url else "?"
        return f"{self.base_url}{separator}options=-csearch_path%3D{schema}"

    def fresh_home(self) -> Path:
        home = Path(tempfile.mkdtemp(prefix="home-", dir=self.work))
        return home

    def env(self, backend: str) -> tuple[dict[str, str], Path]:
        """The environment of a daemon on a fresh store of ``backend``, and a home for it."""
        home = self.fresh_home()
        return ({"PONDER_STORE_URL": self.fresh_url()} if backend == "postgresql" else {}), home

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


_APPENDER = """
import sys, time
from daemon.conversation import ChatMessage, Part
from daemon.store import SessionRow
backend, where, session_id, seconds, pooler = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
if backend == "sqlite":
    from daemon.store import Store
    store = Store(where)
else:
    from daemon.store.postgres import PostgresStore
    store = PostgresStore(where, pooler=pooler or None)
store.create_session(SessionRow(id=session_id, cwd="/", model_id="mock/echo", thinking_level="off"))
print("ready", flush=True)
sys.stdin.readline()
count, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    count += 1
    store.save_message(ChatMessage(message_id=f"{session_id}-{count}", session_id=session_id, seq=count,
                                   role="assistant", parts=[Part(type="text", text="x" * 200)]))
print(count, flush=True)
store.close()
"""


def appends(where: str, backend: str, processes: int, seconds: float, pooler: str = "") -> float:
    """Messages saved per second by ``processes`` processes at once, each in its own session
    (``pooler``: PostgreSQL's ``pooler`` setting, as ``store_pooler`` uses it)."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, backend, where, f"s{index}", str(seconds), pooler],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(processes)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    total = 0
    for worker in workers:
        assert worker.stdout is not None
        total += int(worker.stdout.readline())
        worker.wait()
    return total / seconds


def _takeover(backends: _Backends, backend: str, rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        env, home_a = backends.env(backend)
        home_b = home_a if backend == "sqlite" else backends.fresh_home()  # SQLite: one home, one file
        env = {**env, "PONDER_MOCK_DELAY_MS": "20"}
        a, b = _Daemon(home_a, env), _Daemon(home_b, env)
        try:
            a.initialize()
            b.initialize()
            session_id = a.call("session/start", {"model_id": "mock/thinker", "thinking_level": "max"})["session"][
                "session_id"
            ]
            a.call("session/prompt", {"session_id": session_id, "text": "a long one"})
            time.sleep(0.3)  # streaming, under A's lease
            a.kill()
            killed = time.monotonic()
            while True:
                _, message = b.answer(b.send("session/prompt", {"session_id": session_id, "text": "mine now"}))
                if "result" in message:
                    break
                if time.monotonic() - killed > 30:
                    raise RuntimeError(f"not taken over: {message['error']['message']}")
                time.sleep(0.01)
            times.append(time.monotonic() - killed)
        finally:
            a.close()
            b.close()
    return {"median_s": statistics.median(times), "max_s": max(times), "rounds": len(times)}


def _notification_latency(backends: _Backends, samples: int) -> dict[str, float]:
    env, home_a = backends.env("postgresql")
    a, b = _Daemon(home_a, env), _Daemon(backends.fresh_home(), env)
    try:
        a.initialize()
        b.initialize()
        session_id = b.call("session/start", {"model_id": "mock/echo"})["session"]["session_id"]
        a.call("session/resume", {"session_id": session_id})
        latencies = []
        for index in range(samples):
            title = f"t{index}"
            sent = time.monotonic_ns()
            b.call("session/rename", {"session_id": session_id, "title": title})
            with a.changed:
                found = a.changed.wait_for(
                    lambda t=title: any(s["title"] == t for _, s in a.updates),  # type: ignore[misc]
                    timeout=10,
                )
                if not found:
                    raise TimeoutError("no session/updated within 10 s")
                arrived = next(at for at, s in a.updates if s["title"] == title)
                a.updates.clear()
            latencies.append((arrived - sent) / 1e9)
            time.sleep(0.02)
        latencies.sort()
        return {
            "p50_s": latencies[len(latencies) // 2],
            "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "samples": len(latencies),
        }
    finally:
        a.close()
        b.close()


def _burst(backends: _Backends, backend: str, sessions: int) -> dict[str, float]:
    env, home = backends.env(backend)
    daemon = _Daemon(home, env)
    try:
        daemon.initialize()
        ids = [
            daemon.call("session/start", {"model_id": "mock/echo"})["session"]["session_id"] for _ in range(sessions)
        ]
        started = time.monotonic_ns()
        requests = [daemon.send("session/prompt", {"session_id": sid, "text": "burst"}) for sid in ids]
        turn_ids = set()
        last_answer = 0
        for request_id in requests:
            at, message = daemon.answer(request_id)
            if "error" in message:
                raise RuntimeError(message["error"]["message"])
            turn_ids.add(message["result"]["turn_id"])
            last_answer = max(last_answer, at)
        daemon.wait_turns(turn_ids)
        ended = time.monotonic_ns()
        return {"all_admitted_s": (last_answer - started) / 1e9, "all_ended_s": (ended - started) / 1e9}
    finally:
        daemon.close()


def _cold(backends: _Backends, backend: str, rounds: int) -> dict[str, float]:
    env, home = backends.env(backend)
    times = []
    for index in range(rounds + 1):
        daemon = _Daemon(home, env)
        try:
            arrived, _ = daemon.answer(daemon.send("initialize", {"protocol_version": 1}))
            elapsed = (arrived - daemon.started_ns) / 1e9
        finally:
            daemon.close()
        if index:  # the first start creates (or migrates) the store
            times.append(elapsed)
    return {"median_s": statistics.median(times), "p90_s": sorted(times)[int(len(times) * 0.9) - 1]}


def measure_backends(bench: Any = None, seconds: float = 3.0, rounds: int = 5) -> dict[str, Any]:
    """Every figure on both backends; ``bench`` (the suite's ``Bench``) is not needed."""
    work = Path(tempfile.mkdtemp(prefix="ponder-bench-backends-"))
    backends = _Backends(work)
    result: dict[str, Any] = {"loadavg_at_start": os.getloadavg()}
    try:
        for backend in ("sqlite", "postgresql"):
            figures: dict[str, Any] = {}
            for processes in (1, 4):
                if backend == "sqlite":
                    where = str(backends.fresh_home() / "sessions.db")
                else:
                    where = backends.fresh_url()
                figures[f"appends_per_s_{processes}"] = appends(where, backend, processes, seconds)
            figures["takeover"] = _takeover(backends, backend, rounds)
            figures["burst_200"] = _burst(backends, backend, 200)
            figures["cold_start"] = _cold(backends, backend, rounds * 3)
            result[backend] = figures
        result["postgresql"]["notification"] = _notification_latency(backends, 100)
    finally:
        backends.close()
        result["loadavg_at_end"] = os.getloadavg()
    return result


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The table's rows: (measure, PostgreSQL, SQLite, "", "")."""
    sqlite, pg = result["sqlite"], result["postgresql"]

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.1f} ms"

    return [
        (
            "8 store backends (ponder: PostgreSQL, reference: SQLite): appends/s, 1 process",
            f"{pg['appends_per_s_1']:.0f}",
            f"{sqlite['appends_per_s_1']:.0f}",
            "",
            "",
        ),
        (
            "   appends/s, 4 processes at once",
            f"{pg['appends_per_s_4']:.0f}",
            f"{sqlite['appends_per_s_4']:.0f}",
            "",
            "",
        ),
        (
            "   lease takeover after SIGKILL (median, max)",
            f"{ms(pg['takeover']['median_s'])}, {ms(pg['takeover']['max_s'])}",
            f"{ms(sqlite['takeover']['median_s'])}, {ms(sqlite['takeover']['max_s'])}",
            "",
            "",
        ),
        (
            "   cross-daemon session/updated latency p50, p99",
            f"{ms(pg['notification']['p50_s'])}, {ms(pg['notification']['p99_s'])}",
            "n/a (no feed)",
            "",
            "",
        ),
        (
            "   200-session burst: all admitted, all ended",
            f"{ms(pg['burst_200']['all_admitted_s'])}, {ms(pg['burst_200']['all_ended_s'])}",
            f"{ms(sqlite['burst_200']['all_admitted_s'])}, {ms(sqlite['burst_200']['all_ended_s'])}",
            "",
            "",
        ),
        (
            "   cold start: spawn -> initialize (median, p90)",
            f"{ms(pg['cold_start']['median_s'])}, {ms(pg['cold_start']['p90_s'])}",
            f"{ms(sqlite['cold_start']['median_s'])}, {ms(sqlite['cold_start']['p90_s'])}",
            "",
            "",
        ),
    ]


if __name__ == "__main__":
    measured = measure_backends(seconds=float(os.environ.get("BENCH_SECONDS", "3")))
    print(json.dumps(measured, indent=2))
    for row in rows(measured):
        print(f"{row[0]:<55} PostgreSQL {row[1]:<22} SQLite {row[2]}")
    start, end = measured["loadavg_at_start"][0], measured["loadavg_at_end"][0]
    print(f"load average (1 min) at start {start:.2f}, at end {end:.2f} on {os.cpu_count()} CPUs")
