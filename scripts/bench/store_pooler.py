"""The PostgreSQL store behind PgBouncer in transaction mode, beside the same server reached
directly (issue 34's pooler fault): a throwaway PostgreSQL and a throwaway PgBouncer in front of
it (``tests/support``), a fresh schema per figure.

- appends/s: ``save_message`` of a one-part message, one transaction each, by 1 and by 4
  processes at once (as ``store_backends``), direct and through the pooler (``pooler="transaction"``);
- lease takeover after SIGKILL: two real ``ponder serve`` processes through the pooler
  (``PONDER_STORE_POOLER=transaction``); the first streams a turn and is killed, the second
  prompts every 10 ms until admitted: kill -> admission (median, max of ``rounds``). Behind a
  pooler the holder's liveness is its heartbeat, so this is bounded by the lease's length
  past the last heartbeat (``POOLED_LEASE_TTL_S``), not the connection's end.

``uv run --group dev python scripts/bench/store_pooler.py`` (``BENCH_SECONDS``, ``BENCH_ROUNDS``).
Not part of ``python -m scripts.bench``: it needs PgBouncer installed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``scripts.bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench.store_backends import _Daemon, appends


def _takeover(url: str, work: Path, rounds: int) -> dict[str, float]:
    times = []
    env = {"PONDER_STORE_URL": url, "PONDER_STORE_POOLER": "transaction", "PONDER_MOCK_DELAY_MS": "20"}
    for _ in range(rounds):
        a = _Daemon(Path(tempfile.mkdtemp(prefix="home-", dir=work)), env)
        b = _Daemon(Path(tempfile.mkdtemp(prefix="home-", dir=work)), env)
        try:
            a.initialize()
            b.initialize()
            started = a.call("session/start", {"model_id": "mock/thinker", "thinking_level": "max"})
            session_id = started["session"]["session_id"]
            a.call("session/prompt", {"session_id": session_id, "text": "a long one"})
            time.sleep(1.5)  # streaming, under A's lease, renewed by A's heartbeat
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


def measure_pooler(seconds: float = 3.0, rounds: int = 5) -> dict[str, Any]:
    from tests.support.pgbouncer import ThrowawayPgBouncer
    from tests.support.postgres import ThrowawayPostgres

    work = Path(tempfile.mkdtemp(prefix="ponder-bench-pooler-"))
    server = ThrowawayPostgres()
    bouncer = ThrowawayPgBouncer(server)
    result: dict[str, Any] = {"loadavg_at_start": os.getloadavg()}

    def fresh(through: str) -> str:
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        server._psql(f"CREATE SCHEMA {schema}")
        return bouncer.url(schema) if through == "pgbouncer" else server.url(schema)

    try:
        for through, pooler in (("direct", ""), ("pgbouncer", "transaction")):
            result[through] = {
                f"appends_per_s_{processes}": appends(fresh(through), "postgresql", processes, seconds, pooler)
                for processes in (1, 4)
            }
        result["pgbouncer"]["takeover"] = _takeover(fresh("pgbouncer"), work, rounds)
    finally:
        bouncer.close()
        server.close()
        result["loadavg_at_end"] = os.getloadavg()
    return result


if __name__ == "__main__":
    measured = measure_pooler(
        seconds=float(os.environ.get("BENCH_SECONDS", "3")), rounds=int(os.environ.get("BENCH_ROUNDS", "5"))
    )
    print(json.dumps(measured, indent=2))
