"""The measures of the benchmark suite (see README.md beside this file for what each means).

Each ``measure_*`` function takes the ``Bench`` context and returns a plain dict of
numbers (seconds unless the key says otherwise) that ``run.py`` prints and saves.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench.proc import DaemonProcess, Turn, cpu_seconds, syscalls

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODEL_ID = "anthropic/claude-sonnet-4-5"
PROVIDER_ENV_PREFIXES = (
    "ANTHROPIC_",
    "OPENAI_",
    "GEMINI_",
    "GOOGLE_API_KEY",
    "DEEPSEEK_",
    "DASHSCOPE_",
    "OPENROUTER_",
    "OLLAMA_",
    "PONDER_",
)
BENCH_CACHE = REPO / ".bench-cache"  # gitignored
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


# --- statistics --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank-with-interpolation percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- the context -------------------------------------------------------------------------


def compiled_install(notes: list[str]) -> Path | None:
    """Install this tree with compiled bytecode into ``.bench-cache/venv``, as an installed
    ponder has it (``uv tool install --compile-bytecode``); return that venv's bin dir.

    The dev environment's editable install runs from source, and with
    ``PYTHONDONTWRITEBYTECODE=1`` nothing is ever cached, so every start would compile
    every module: not what users run. None (and a note) when uv is missing or fails.
    """
    uv = shutil.which("uv")
    if uv is None:
        notes.append("uv not found: measured the dev environment (no compiled bytecode)")
        return None
    venv = BENCH_CACHE / "venv"
    python = venv / "bin" / "python"
    try:
        if not python.exists():
            subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, capture_output=True)
        subprocess.run(
            [
                uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(python),
                "--compile-bytecode",
                "--reinstall-package",
                "ponder",
                str(REPO),
            ],
            check=True,
            capture_output=True,
        )
    except subprocess.CalledProcessError as exc:
        notes.append(
            f"could not install with compiled bytecode ({exc.stderr.decode(errors='replace').strip()[-200:]}); "
            "measured the dev environment"
        )
        return None
    return venv / "bin"


@dataclass
class Bench:
    work: Path  # a temp dir for homes, logs and cwd
    quick: bool = False
    bin_dir: Path | None = None  # where ``ponder`` and ``python`` are installed with compiled bytecode
    server_port: int = 0
    server: subprocess.Popen[bytes] | None = None
    notes: list[str] = field(default_factory=list)

    # -- the replay server --

    def start_server(self) -> None:
        self.server = subprocess.Popen(
            [sys.executable, str(HERE / "replay.py"), "--max-lifetime-s", "3600"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.clean_env(),
        )
        assert self.server.stdout is not None
        line = self.server.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the replay server did not start: {line!r}")
        self.server_port = int(line.split()[1])

    def stop_server(self) -> None:
        if self.server is not None:
            assert self.server.stdin is not None
            self.server.stdin.close()
            try:
                self.server.wait(5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
            self.server = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def server_stats(self, reset: bool = False) -> dict[str, int]:
        request = urllib.request.Request(
            self.base_url + "/stats", method="POST" if reset else "GET", data=b"" if reset else None
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as response:
            return json.loads(response.read())

    # -- processes --

    def clean_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(PROVIDER_ENV_PREFIXES) and k not in PROXY_VARS and k not in ("VIRTUAL_ENV",)
        }
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        return env

    def daemon_env(self) -> dict[str, str]:
        env = self.clean_env()
        env["ANTHROPIC_API_KEY"] = "bench-fake-key"
        env["ANTHROPIC_BASE_URL"] = self.base_url
        return env

    @property
    def python(self) -> str:
        return str(self.bin_dir / "python") if self.bin_dir else sys.executable

    def ponder_argv(self, home: Path) -> list[str]:
        # What an editor spawns: the ``ponder`` console script (of the compiled install if any).
        script = Path(self.python).parent / "ponder"
        base = [str(script)] if script.exists() else [self.python, "-m", "daemon"]
        return [*base, "--home", str(home)]

    def daemon_argv(self, home: Path) -> list[str]:
        return [*self.ponder_argv(home), "serve"]

    def home(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def spawn(self, home: Path, env: dict[str, str] | None = None) -> DaemonProcess:
        return DaemonProcess(
            self.daemon_argv(home), env or self.daemon_env(), self.work / "daemon-stderr.log", cwd=str(self.work)
        )

    def start_session(self, daemon: DaemonProcess) -> str:
        result = daemon.call("session/start", {"model_id": MODEL_ID, "cwd": str(self.work), "approval_policy": "auto"})
        return result["session"]["session_id"]


def _delta_index_and_stamp(text: str) -> tuple[int, int]:
    i, t, _ = text.split("|", 2)
    return int(i), int(t)


def check_turn(turn: Turn, n: int, th: int | None = None, first_seq: int | None = None) -> list[str]:
    """Problems with one received turn: lost, reordered or misnumbered events."""
    problems: list[str] = []
    th = n // 2 if th is None else th
    indexes = [_delta_index_and_stamp(d)[0] for _, _, d in turn.deltas]
    if indexes != list(range(n)):
        problems.append(f"deltas: got {len(indexes)} of {n}, in order: {indexes == sorted(indexes)}")
    kinds = [k for _, k, _ in turn.deltas]
    if kinds != ["thinking_delta"] * th + ["text_delta"] * (n - th):
        problems.append("delta kinds out of order")
    seqs = turn.seqs
    if not seqs or seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        problems.append("seq not contiguous")
    if first_seq is not None and seqs and seqs[0] != first_seq:
        problems.append(f"first seq {seqs[0]} != {first_seq}")
    types = [e["type"] for e in turn.events]
    expected = [
        "turn_start",
        "message_start",
        "thinking_start",
        "thinking_end",
        "text_start",
        "text_end",
        "message_end",
        "usage",  # after every model call (issue 19)
        "turn_end",
    ]
    if th == 0:
        expected = [t for t in expected if not t.startswith("thinking")]
    if types != expected:
        problems.append(f"events {types}")
    ends = {e["type"]: e for e in turn.events}
    thinking = "".join(d for _, k, d in turn.deltas if k == "thinking_delta")
    text = "".join(d for _, k, d in turn.deltas if k == "text_delta")
    if th and ends.get("thinking_end", {}).get("text") != thinking:
        problems.append("thinking_end text differs from its deltas")
    if ends.get("text_end", {}).get("text") != text:
        problems.append("text_end text differs from its deltas")
    stop = ends.get("turn_end", {}).get("stop_reason")
    if stop != "end_turn":
        problems.append(f"stop_reason {stop} ({ends.get('turn_end', {}).get('error')})")
    return problems


# --- 1. cold start -----------------------------------------------------------------------


def measure_cold_start(b: Bench, runs: int) -> dict[str, Any]:
    """Interleaved rounds of: ``python -c pass``; the floor (``start_floor.py``: sqlite3,
    anyio on asyncio and msgspec imported, one JSON-RPC line from stdin answered) spawn →
    answer, then stdin EOF → exit; ``ponder serve`` spawn → ``initialize`` answered, then
    stdin EOF → exit (nothing running); ``ponder ask --model mock/echo hi`` and ``ponder
    sessions`` end to end (the CLI spawns its own daemon). Ratios are to the floor's median."""
    home = b.home("cold")
    env = b.daemon_env()
    env["PONDER_MOCK_DELAY_MS"] = "0"
    ask = [*b.ponder_argv(home), "ask", "--model", "mock/echo", "hi"]
    sessions = [*b.ponder_argv(home), "sessions"]
    floor_argv = [b.python, str(HERE / "start_floor.py")]
    for _ in range(2):  # create the database and warm the page cache; not counted
        with b.spawn(home, env) as d:
            d.initialize()
        subprocess.run(ask, check=True, env=env, cwd=b.work, capture_output=True)
    ponder, python, floor, floor_exit, shutdown, rss, asks, listing = [], [], [], [], [], [], [], []

    def timed(argv: list[str]) -> float:
        t0 = time.monotonic_ns()
        done = subprocess.run(argv, env=env, cwd=b.work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode != 0:
            b.notes.append(f"cold start: {' '.join(argv[-3:])} exited {done.returncode}: {done.stderr.decode()[-200:]}")
        return (time.monotonic_ns() - t0) / 1e9

    def answered_then_eof(d: DaemonProcess, answers: list[float], exits: list[float]) -> None:
        slot = d.request_async("initialize", {"protocol_version": 1})
        d.wait_reply(slot, 30)
        answers.append((slot[2] - d.spawned_ns) / 1e9)
        if answers is ponder:
            rss.append(d.peak_rss_mb())
        t1 = time.monotonic_ns()
        code = d.close()
        exits.append((time.monotonic_ns() - t1) / 1e9)
        if code != 0:
            b.notes.append(f"cold start: {' '.join(d.argv[-2:])} exited {code}")

    for _ in range(runs):
        python.append(timed([b.python, "-c", "pass"]))
        answered_then_eof(
            DaemonProcess(floor_argv, env, b.work / "floor-stderr.log", cwd=str(b.work)), floor, floor_exit
        )
        answered_then_eof(b.spawn(home, env), ponder, shutdown)
        asks.append(timed(ask))
        listing.append(timed(sessions))
    base = median(floor)
    return {
        "runs": runs,
        "compiled_bytecode": b.bin_dir is not None,
        "ponder_median_s": median(ponder),
        "ponder_p90_s": percentile(ponder, 90),
        "python_pass_median_s": median(python),
        "floor_median_s": base,
        "floor_p90_s": percentile(floor, 90),
        "floor_exit_median_s": median(floor_exit),
        "shutdown_median_s": median(shutdown),
        "shutdown_p90_s": percentile(shutdown, 90),
        "ask_median_s": median(asks),
        "ask_p90_s": percentile(asks, 90),
        "sessions_median_s": median(listing),
        "sessions_p90_s": percentile(listing, 90),
        "ratios_to_floor": {
            "python_pass": median(python) / base,
            "serve": median(ponder) / base,
            "ask": median(asks) / base,
            "sessions": median(listing) / base,
        },
        "peak_rss_after_initialize_mb": median(rss),
        "ponder_all_s": ponder,
        "floor_all_s": floor,
        "python_all_s": python,
        "shutdown_all_s": shutdown,
        "ask_all_s": asks,
        "sessions_all_s": listing,
    }


# --- 2. relay cost -----------------------------------------------------------------------


def _run_floor(b: Bench, prompt: str, flush: bool) -> dict[str, Any]:
    argv = [sys.executable, str(HERE / "floor.py"), b.base_url + "/v1/messages", prompt]
    if flush:
        argv.append("--flush")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=b.clean_env())
    assert proc.stdout is not None and proc.stdin is not None
    ready = proc.stdout.readline()
    if ready.strip() != b"READY":
        proc.kill()
        raise RuntimeError(f"the floor script did not start: {ready!r}")
    arrivals: list[tuple[int, bytes]] = []
    done: list[int] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic_ns()
            if line.startswith(b"DONE"):
                done.extend([now, int(line.split()[1])])
                return
            if flush:
                arrivals.append((now, line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    cpu0 = cpu_seconds(proc.pid)
    t0 = time.monotonic_ns()
    proc.stdin.write(b"GO\n")
    proc.stdin.flush()
    reader.join(300)
    cpu1 = cpu_seconds(proc.pid)
    proc.stdin.close()
    proc.wait(10)
    latencies = []
    for now, line in arrivals:
        delta = json.loads(line)["delta"]
        latencies.append((now - _delta_index_and_stamp(delta)[1]) / 1e9)
    return {"wall_s": (done[0] - t0) / 1e9, "cpu_s": cpu1 - cpu0, "deltas": done[1], "latencies_s": latencies}


def _daemon_turn(
    b: Bench, d: DaemonProcess, session_id: str, prompt: str, timeout: float = 300
) -> tuple[Turn, float, float]:
    """(turn, wall s from prompt to turn_end arrival, daemon CPU s over the turn)."""
    cpu0 = d.cpu_seconds()
    io0 = syscalls(d.pid)
    t0 = time.monotonic_ns()
    turn = d.prompt(session_id, prompt)
    d.wait_turn(turn, timeout)
    time.sleep(0.05)  # the turn's trailing work (session/updated, lease release) counts too
    io1 = syscalls(d.pid)
    d.last_syscalls = (io1[0] - io0[0], io1[1] - io0[1])  # type: ignore[attr-defined]
    return turn, (turn.end_ns - t0) / 1e9, d.cpu_seconds() - cpu0


def measure_relay(b: Bench, n: int, runs: int) -> dict[str, Any]:
    prompt = f"bench:mode=fast,n={n},size=12"
    daemon_runs: list[dict[str, float]] = []
    floor_runs: list[dict[str, float]] = []
    problems: list[str] = []
    with b.spawn(b.home("relay")) as d:
        d.initialize()
        warm = b.start_session(d)
        _daemon_turn(b, d, warm, "bench:mode=fast,n=200")  # imports httpx, opens the connection
        for _ in range(runs):
            sid = b.start_session(d)
            turn, wall, cpu = _daemon_turn(b, d, sid, prompt)
            problems += check_turn(turn, n)
            reads, writes = d.last_syscalls  # type: ignore[attr-defined]
            daemon_runs.append(
                {
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "deltas": len(turn.deltas),
                    "read_syscalls": reads,
                    "write_syscalls": writes,
                }
            )
            d.forget(turn)
            floor_runs.append(_run_floor(b, prompt, flush=False))
    d_cpu = median([r["cpu_s"] for r in daemon_runs]) / n
    f_cpu = median([r["cpu_s"] for r in floor_runs]) / n
    d_wall = median([r["wall_s"] for r in daemon_runs])
    f_wall = median([r["wall_s"] for r in floor_runs])
    return {
        "deltas": n,
        "runs": runs,
        "ponder_wall_s": d_wall,
        "ponder_cpu_per_delta_us": d_cpu * 1e6,
        "floor_wall_s": f_wall,
        "floor_cpu_per_delta_us": f_cpu * 1e6,
        "cpu_ratio": d_cpu / f_cpu if f_cpu else float("nan"),
        "wall_ratio": d_wall / f_wall if f_wall else float("nan"),
        "ponder_deltas_per_s": n / d_wall,
        "ponder_write_syscalls_per_delta": median([r["write_syscalls"] for r in daemon_runs]) / n,
        "ponder_read_syscalls_per_delta": median([r["read_syscalls"] for r in daemon_runs]) / n,
        "floor_deltas_per_s": n / f_wall,
        "problems": problems,
        "ponder_runs": daemon_runs,
        "floor_runs": [{k: v for k, v in r.items() if k != "latencies_s"} for r in floor_runs],
    }


# --- 3. added latency --------------------------------------------------------------------


def _turn_latencies(turn: Turn) -> list[float]:
    return [(now - _delta_index_and_stamp(text)[1]) / 1e9 for now, _, text in turn.deltas]


def measure_latency(b: Bench, n: int, runs: int) -> dict[str, Any]:
    """``runs`` paced turns of ``n`` deltas (one per 20 ms) through ponder, and as many
    through the floor script; percentiles per run, then the median over runs (one burst of
    load from elsewhere on the machine then spoils one run, not the verdict)."""
    prompt = f"bench:mode=paced,n={n},iv=20"
    ponder_runs, floor_runs, problems, pooled, cpu_total = [], [], [], [], 0.0
    with b.spawn(b.home("latency")) as d:
        d.initialize()
        _daemon_turn(b, d, b.start_session(d), "bench:mode=fast,n=200")
        for _ in range(runs):
            turn, _, cpu = _daemon_turn(b, d, b.start_session(d), prompt, timeout=n * 0.02 + 60)
            problems += check_turn(turn, n)
            lat = _turn_latencies(turn)
            pooled += lat
            cpu_total += cpu
            ponder_runs.append({"p50_s": percentile(lat, 50), "p99_s": percentile(lat, 99), "max_s": max(lat)})
            d.forget(turn)
            flat = _run_floor(b, prompt, flush=True)["latencies_s"]
            floor_runs.append({"p50_s": percentile(flat, 50), "p99_s": percentile(flat, 99), "max_s": max(flat)})

    def pick(rs: list[dict[str, float]], key: str) -> float:
        return median([r[key] for r in rs])

    return {
        "deltas_per_run": n,
        "runs": runs,
        "interval_ms": 20,
        "ponder_p50_s": pick(ponder_runs, "p50_s"),
        "ponder_p99_s": pick(ponder_runs, "p99_s"),
        "ponder_max_s": max(r["max_s"] for r in ponder_runs),
        "ponder_pooled_p99_s": percentile(pooled, 99),
        "floor_p50_s": pick(floor_runs, "p50_s"),
        "floor_p99_s": pick(floor_runs, "p99_s"),
        "floor_max_s": max(r["max_s"] for r in floor_runs),
        "ponder_cpu_per_delta_us": cpu_total / (n * runs) * 1e6,
        "ponder_runs": ponder_runs,
        "floor_runs": floor_runs,
        "problems": problems,
    }


# --- 4. concurrency ----------------------------------------------------------------------


def measure_concurrency(b: Bench, sessions: int, n: int, interval_ms: int, burst: int) -> dict[str, Any]:
    prompt = f"bench:mode=paced,n={n},iv={interval_ms},b={burst}"
    ideal_s = -(-n // burst) * interval_ms / 1000
    with b.spawn(b.home("concurrency")) as d:
        d.initialize()
        _daemon_turn(b, d, b.start_session(d), "bench:mode=fast,n=200")
        slots = [
            d.request_async("session/start", {"model_id": MODEL_ID, "cwd": str(b.work), "approval_policy": "auto"})
            for _ in range(sessions)
        ]
        ids = [d.wait_reply(s)["session"]["session_id"] for s in slots]
        b.server_stats(reset=True)
        rss_before = d.peak_rss_mb()
        cpu0 = d.cpu_seconds()
        t0 = time.monotonic_ns()
        slots = [d.request_async("session/prompt", {"session_id": sid, "text": prompt}) for sid in ids]
        turns = [d.turn(d.wait_reply(s)["turn_id"]) for s in slots]
        admitted_s = (time.monotonic_ns() - t0) / 1e9
        deadline = time.monotonic() + 120 + ideal_s * 4
        unfinished = 0
        for turn in turns:
            if not turn.ended.wait(max(0.1, deadline - time.monotonic())):
                unfinished += 1
        time.sleep(0.1)
        cpu = d.cpu_seconds() - cpu0
        peak = d.peak_rss_mb()
        stats = b.server_stats()
    problems: list[str] = []
    lost = 0
    for turn in turns:
        issues = check_turn(turn, n, first_seq=1)
        if issues:
            problems.append(f"{turn.turn_id}: {'; '.join(issues)}")
        lost += max(0, n + 8 - len(turn.seqs))  # the deltas + 8 bracketing events per turn
    ended = [t.end_ns for t in turns if t.end_ns]
    firsts = [(t.deltas[0][0] - t0) / 1e9 for t in turns if t.deltas]
    durations = [(t.end_ns - t.deltas[0][0]) / 1e9 for t in turns if t.deltas and t.end_ns]
    return {
        "sessions": sessions,
        "deltas_per_session": n,
        "server_pacing": f"{burst} deltas every {interval_ms} ms",
        "ideal_stream_s": ideal_s,
        "total_s": (max(ended) - t0) / 1e9 if ended else float("nan"),
        "admission_s": admitted_s,
        "first_delta_p50_s": percentile(firsts, 50),
        "first_delta_max_s": max(firsts) if firsts else float("nan"),
        "stream_duration_p50_s": percentile(durations, 50),
        "stream_duration_max_s": max(durations) if durations else float("nan"),
        "peak_concurrent_upstream_streams": stats["peak_streams"],
        "peak_rss_mb": peak,
        "peak_rss_before_prompts_mb": rss_before,
        "daemon_cpu_s": cpu,
        "turns_unfinished": unfinished,
        "turns_with_problems": len(problems),
        "events_lost": lost,
        "problems": problems[:10],
    }


# --- 5. store at scale -------------------------------------------------------------------


def seed_store(home: Path, sessions: int, messages: int) -> dict[str, Any]:
    """Write ``sessions`` sessions, one of which holds ``messages`` messages, with the sync Store."""
    sys.path.insert(0, str(REPO))
    from daemon.conversation import ChatMessage, Part
    from daemon.store import SessionRow, Store
    from protocol.objects import Usage

    db = home / "sessions.db"
    if db.exists():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    base = time.time() - sessions - 3600
    t0 = time.perf_counter()
    store = Store(db)
    big_id = "ses_bench_big"
    try:
        for i in range(sessions):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i)) + ".000000Z"
            store.create_session(
                SessionRow(
                    id=big_id if i == 0 else f"ses_bench_{i:06d}",
                    cwd=f"/work/project-{i % 20}",
                    model_id=MODEL_ID,
                    thinking_level="medium",
                    title=f"Bench session {i}: a title of ordinary length",
                    created_at=stamp,
                    updated_at=stamp,
                )
            )
        sessions_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        thinking = ("Let me think about how the pieces fit together before answering. " * 9)[:600]
        answer = ("Here is the answer, with a short explanation of why it holds. " * 7)[:400]
        for seq in range(1, messages + 1):
            if seq % 2:
                parts = [Part(type="text", text=f"Question {seq}: what does the function on line {seq} do, and why?")]
                message = ChatMessage(
                    message_id=f"msg_bench_{seq:06d}", session_id=big_id, seq=seq, role="user", parts=parts
                )
            else:
                parts = [
                    Part(
                        type="thinking",
                        text=thinking,
                        provider="anthropic",
                        model="claude-sonnet-4-5",
                        signature="RXVjbGlk" * 50,
                    ),
                    Part(type="text", text=answer),
                ]
                message = ChatMessage(
                    message_id=f"msg_bench_{seq:06d}",
                    session_id=big_id,
                    seq=seq,
                    role="assistant",
                    parts=parts,
                    model_id=MODEL_ID,
                    thinking_requested="medium",
                    thinking_effective="medium",
                    stop_reason="end_turn",
                    usage=Usage(input_tokens=1200, output_tokens=300, reasoning_tokens=150),
                )
            store.save_message(message)
        messages_s = time.perf_counter() - t1
    finally:
        store.close()
    return {
        "big_session_id": big_id,
        "seed_sessions_per_s": sessions / sessions_s,
        "seed_messages_per_s": messages / messages_s if messages else float("nan"),
        "db_mb": sum(Path(f"{db}{s}").stat().st_size for s in ("", "-wal") if Path(f"{db}{s}").exists()) / 2**20,
    }


def measure_store(b: Bench, sessions: int, messages: int, cold_resumes: int) -> dict[str, Any]:
    home = b.home("store")
    seeded = seed_store(home, sessions, messages)
    big = seeded["big_session_id"]
    first_list, lists, lists_1000, walks = 0.0, [], [], []
    cold, warm, response_mb = [], [], 0.0
    for attempt in range(cold_resumes):
        with b.spawn(home) as d:
            d.initialize()
            if attempt == 0:
                result, first_list = d.call_timed("session/list", {})
                assert len(result["sessions"]) == 50, len(result["sessions"])
                for _ in range(20):
                    lists.append(d.call_timed("session/list", {})[1])
                for _ in range(5):
                    lists_1000.append(d.call_timed("session/list", {"limit": 1000})[1])
                for _ in range(3):
                    t0 = time.monotonic_ns()
                    cursor, seen = None, 0
                    while True:
                        page = d.call("session/list", {"limit": 1000, **({"cursor": cursor} if cursor else {})})
                        seen += len(page["sessions"])
                        cursor = page["next_cursor"]
                        if not cursor:
                            break
                    walks.append((time.monotonic_ns() - t0) / 1e9)
                    if seen != sessions:
                        b.notes.append(f"session/list walk saw {seen} of {sessions} sessions")
            before = d.bytes_read
            result, elapsed = d.call_timed("session/resume", {"session_id": big})
            response_mb = (d.bytes_read - before) / 2**20
            cold.append(elapsed)
            if len(result["messages"]) != messages:
                b.notes.append(f"resume returned {len(result['messages'])} of {messages} messages")
            del result
            if attempt == 0:
                for _ in range(3):
                    warm.append(d.call_timed("session/resume", {"session_id": big})[1])
            rss = d.peak_rss_mb()
    return {
        **seeded,
        "sessions": sessions,
        "messages": messages,
        "list_first_s": first_list,
        "list_p50_s": median(lists),
        "list_limit1000_p50_s": median(lists_1000),
        "list_walk_all_p50_s": median(walks),
        "resume_cold_p50_s": median(cold),
        "resume_cold_all_s": cold,
        "resume_warm_p50_s": median(warm),
        "resume_response_mb": response_mb,
        "peak_rss_after_resume_mb": rss,
    }


def _rate_profile(turn: Turn, buckets: int = 10) -> dict[str, Any]:
    """Delta arrival rate per tenth of the stream, and the longest gap between two deltas."""
    times = [now for now, _, _ in turn.deltas]
    if len(times) < buckets * 2:
        return {}
    size = len(times) // buckets
    rates = []
    for k in range(buckets):
        chunk = times[k * size : (k + 1) * size]
        span = (chunk[-1] - chunk[0]) / 1e9
        rates.append((len(chunk) - 1) / span if span > 0 else float("inf"))
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
    return {
        "rate_first_tenth_per_s": rates[0],
        "rate_last_tenth_per_s": rates[-1],
        "rate_last_over_first": rates[-1] / rates[0] if rates[0] else float("nan"),
        "rates_per_tenth_per_s": rates,
        "max_gap_s": max(gaps),
        "gaps_over_50ms": sum(1 for g in gaps if g > 0.05),
    }


def measure_persisting(b: Bench, n_small: int, n_big: int, size: int, probe_n: int, background: int) -> dict[str, Any]:
    """Does streaming slow down while the store is writing?

    (a) growth: the daemon's CPU per delta for a reply of ``n_big`` deltas of ``size``
        bytes against replies ten times shorter. The agent checkpoints the whole partial
        message every 0.5 s and accumulates its text, so a cost that grows with the
        message shows as a higher CPU per delta in the long reply; the longest gap
        between two deltas of the long reply shows a checkpoint stalling the stream;
    (b) contention: the paced latency probe (one delta per 20 ms) while ``background``
        client threads each run back-to-back one-turn sessions whose reply is a 200 KB
        message streamed over 0.5 s (so the store is always writing: session rows, user
        messages, checkpoints, final saves), compared with the quiet probe of measure 3.
    """
    out: dict[str, Any] = {}
    with b.spawn(b.home("persist")) as d:
        d.initialize()
        _daemon_turn(b, d, b.start_session(d), "bench:mode=fast,n=200")
        small_cpu = 0.0
        for _ in range(3):
            turn, _, cpu = _daemon_turn(b, d, b.start_session(d), f"bench:mode=fast,n={n_small},size={size}")
            small_cpu += cpu
            d.forget(turn)
        small = small_cpu / (3 * n_small)
        turn, wall, cpu = _daemon_turn(b, d, b.start_session(d), f"bench:mode=fast,n={n_big},size={size}", timeout=600)
        big = cpu / n_big
        profile = _rate_profile(turn)
        out["growing"] = {
            "deltas_small": n_small,
            "deltas_big": n_big,
            "reply_small_mb": n_small * (size + 10) / 2**20,
            "reply_big_mb": n_big * (size + 10) / 2**20,
            "cpu_per_delta_small_us": small * 1e6,
            "cpu_per_delta_big_us": big * 1e6,
            "big_over_small": big / small if small else float("nan"),
            "big_wall_s": wall,
            "max_gap_s": profile.get("max_gap_s", float("nan")),
            "gaps_over_50ms": profile.get("gaps_over_50ms", 0),
            "problems": check_turn(turn, n_big),
        }
        d.forget(turn)

        stop = threading.Event()
        persisted = [0]

        def churn() -> None:
            # A fresh session per turn keeps each request small: what loads the daemon
            # here is persisting (session, user message, checkpoints, the 200 KB reply),
            # not rebuilding a long history.
            while not stop.is_set():
                t = d.prompt(b.start_session(d), "bench:mode=paced,n=50,size=4000,iv=10")
                d.wait_turn(t, 120)
                persisted[0] += 1
                d.forget(t)

        workers = [threading.Thread(target=churn, daemon=True) for _ in range(background)]
        for w in workers:
            w.start()
        time.sleep(0.5)
        probe_sid = b.start_session(d)
        t0 = time.monotonic()
        before = persisted[0]
        probe, _, _ = _daemon_turn(b, d, probe_sid, f"bench:mode=paced,n={probe_n},iv=20", timeout=probe_n * 0.02 + 120)
        span = time.monotonic() - t0
        done = persisted[0] - before
        stop.set()
        for w in workers:
            w.join(60)
        lat = _turn_latencies(probe)
        out["under_load"] = {
            "background_sessions": background,
            "background_messages_per_s": done / span,
            "background_mb_per_s": done * 50 * 4010 / 2**20 / span,
            "probe_p50_s": percentile(lat, 50),
            "probe_p99_s": percentile(lat, 99),
            "probe_max_s": max(lat) if lat else float("nan"),
            "problems": check_turn(probe, probe_n),
        }
    return out


def measure_streams(b: Bench, reply_mb: int, endless_mb: int) -> dict[str, Any]:
    """Memory and throughput on hostile or huge provider streams (issue #15).

    (a) endless: the provider sends one event of ``endless_mb`` MiB that never has a line
        break (generated on the fly by the replay server). The daemon must end the turn at
        ``[reliability] max_event_bytes`` with a clear error; its peak RSS must stay near
        its idle size plus that cap, whatever the stream's length.
    (b) long reply: one reply of ``reply_mb`` MiB of text in 1000-byte deltas. Checkpoints
        append only the new text, so the delta rate of the last tenth of the reply stays
        near that of the first tenth, and the peak RSS stays near the size of the reply.
    """
    out: dict[str, Any] = {}
    with b.spawn(b.home("streams-endless")) as d:
        d.initialize()
        idle = d.peak_rss_mb()
        t0 = time.monotonic()
        turn, wall, _ = _daemon_turn(
            b, d, b.start_session(d), f"bench:mode=endless,bytes={endless_mb * 2**20}", timeout=600
        )
        end = turn.events[-1]
        out["endless"] = {
            "stream_mb": endless_mb,
            "peak_rss_idle_mb": idle,
            "peak_rss_mb": d.peak_rss_mb(),
            "wall_s": wall,
            "elapsed_s": time.monotonic() - t0,
            "stop_reason": end.get("stop_reason"),
            "error": (end.get("error") or {}).get("message"),
        }
    size = 1000
    n = reply_mb * 2**20 // (size + 10)
    with b.spawn(b.home("streams-reply")) as d:
        d.initialize()
        idle = d.peak_rss_mb()
        turn, wall, cpu = _daemon_turn(b, d, b.start_session(d), f"bench:mode=fast,n={n},th=0,size={size}", timeout=900)
        profile = _rate_profile(turn)
        out["long_reply"] = {
            "reply_mb": n * (size + 10) / 2**20,
            "deltas": n,
            "peak_rss_idle_mb": idle,
            "peak_rss_mb": d.peak_rss_mb(),
            "peak_rss_over_reply": (d.peak_rss_mb() - idle) / (n * (size + 10) / 2**20),
            "wall_s": wall,
            "cpu_s": cpu,
            "rate_first_tenth_mb_per_s": profile.get("rate_first_tenth_per_s", float("nan")) * (size + 10) / 2**20,
            "rate_last_tenth_mb_per_s": profile.get("rate_last_tenth_per_s", float("nan")) * (size + 10) / 2**20,
            "rate_last_over_first": profile.get("rate_last_over_first", float("nan")),
            # The last tenth also holds the deltas still queued for stdout when the reply ends,
            # which wait while the daemon joins and encodes text_end; the ninth has no such tail.
            "rate_ninth_over_first": (profile["rates_per_tenth_per_s"][8] / profile["rates_per_tenth_per_s"][0])
            if profile
            else float("nan"),
            "rates_per_tenth_mb_per_s": [r * (size + 10) / 2**20 for r in profile.get("rates_per_tenth_per_s", [])],
            "max_gap_s": profile.get("max_gap_s", float("nan")),
            "stop_reason": turn.events[-1].get("stop_reason"),
            "problems": check_turn(turn, n, th=0),
        }
        d.forget(turn)
    return out


# --- housekeeping ------------------------------------------------------------------------


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
