"""Measure 6 (``--peers``): the same start-up and relay measures for other agent daemons.

* ``codex app-server`` (npm ``@openai/codex``; the native binary it ships is spawned
  directly, as editor extensions do), pointed at the replay server's OpenAI Responses
  endpoint through a custom model provider in a private ``CODEX_HOME``;
* pi's RPC mode (npm ``@mariozechner/pi-coding-agent``, ``pi --mode rpc``), pointed at
  the replay server's Anthropic Messages endpoint through ``models.json`` in a private
  ``PI_CODING_AGENT_DIR``.

Both are installed on demand with ``npm install --prefix ~/.cache/ponder-bench`` (outside
the repository). A peer that cannot be installed or run here is reported with the reason
instead of a number. ponder is measured again beside them on the same relay size. Each relay is two turns in
one conversation after a 20-delta warm-up turn, 200 deltas then 5,000: the CPU per delta
of the second, and the marginal CPU per delta (the difference over the 4,800 extra deltas,
free of per-turn costs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.bench import measures as M
from scripts.bench.proc import cpu_seconds, peak_rss_mb

CACHE = Path(os.environ.get("PONDER_BENCH_CACHE", Path.home() / ".cache" / "ponder-bench"))
PACKAGES = ("@openai/codex", "@mariozechner/pi-coding-agent")
RELAY_DELTAS = 5_000  # pi resends the whole partial message with every delta: keep it bounded
SMALL = 200  # deltas of the first turn, whose cost is subtracted for the marginal cost


def install() -> str | None:
    """Install the peers into CACHE; None when done, else why not."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed"
    modules = CACHE / "node_modules"
    if all((modules / p / "package.json").exists() for p in PACKAGES):
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--loglevel=error", *PACKAGES],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        return f"npm install failed: {result.stderr.strip().splitlines()[-1:] or result.returncode}"
    return None


class JsonLinesPeer:
    """A child speaking JSON lines on stdio, with a timestamping reader thread."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.spawned_ns = time.monotonic_ns()
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=cwd
        )
        self.pid = self.proc.pid
        self.waiters: list[tuple[Callable[[dict[str, Any]], bool], threading.Event, list[Any]]] = []
        self.on_message: Callable[[int, dict[str, Any]], None] | None = None
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def expect(self, match: Callable[[dict[str, Any]], bool]) -> list[Any]:
        slot: list[Any] = [threading.Event(), None, 0]
        with self.lock:
            self.waiters.append((match, slot[0], slot))
        return slot

    @staticmethod
    def wait(slot: list[Any], timeout: float) -> dict[str, Any]:
        if not slot[0].wait(timeout):
            raise TimeoutError(f"no answer within {timeout:g} s")
        return slot[1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic_ns()
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if self.on_message is not None:
                self.on_message(now, message)
            with self.lock:
                for waiter in list(self.waiters):
                    match, event, slot = waiter
                    if match(message):
                        slot[1], slot[2] = message, now
                        event.set()
                        self.waiters.remove(waiter)

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --- peers -------------------------------------------------------------------------------


class Codex:
    name = "codex app-server"

    def __init__(self, b: M.Bench) -> None:
        self.b = b
        self.home = b.home("codex-home")
        vendor = CACHE / "node_modules" / "@openai" / "codex-linux-x64" / "vendor"
        found = sorted(vendor.glob("*/bin/codex")) if vendor.exists() else []
        self.binary = found[0] if found else None
        (self.home / "config.toml").write_text(
            "\n".join(
                [
                    'model = "bench-model"',
                    'model_provider = "bench"',
                    'model_reasoning_summary = "detailed"',
                    'approval_policy = "never"',
                    'sandbox_mode = "read-only"',
                    "[model_providers.bench]",
                    'name = "bench"',
                    f'base_url = "{b.base_url}/v1"',
                    'env_key = "BENCH_API_KEY"',
                    'wire_api = "responses"',
                    "request_max_retries = 0",
                    "stream_max_retries = 0",
                    "",
                ]
            )
        )

    def unavailable(self) -> str | None:
        return None if self.binary else "the codex native binary was not installed (no linux-x64 package)"

    def spawn(self) -> JsonLinesPeer:
        env = self.b.clean_env()
        env.update({"CODEX_HOME": str(self.home), "BENCH_API_KEY": "bench-fake-key", "RUST_LOG": "error"})
        return JsonLinesPeer([str(self.binary), "app-server"], env, self.b.work, self.b.work / "codex.log")

    def ready(self, peer: JsonLinesPeer) -> list[Any]:
        slot = peer.expect(lambda m: m.get("id") == 1)
        peer.send(
            {
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "ponder-bench", "title": "bench", "version": "1"}},
            }
        )
        return slot

    def prepare(self, peer: JsonLinesPeer) -> None:
        peer.send({"method": "initialized"})
        slot = peer.expect(lambda m: m.get("id") == 2)
        params = {"model": "bench-model", "cwd": str(self.b.work), "approvalPolicy": "never", "sandbox": "read-only"}
        peer.send({"id": 2, "method": "thread/start", "params": params})
        reply = peer.wait(slot, 60)
        if "error" in reply:
            raise RuntimeError(f"thread/start failed: {reply['error']}")
        self.thread_id = reply["result"]["thread"]["id"]
        self.next_id = 3

    def turn(self, peer: JsonLinesPeer, prompt: str, deltas: list[int], timeout: float) -> tuple[float, float]:
        delta_methods = {"item/agentMessage/delta", "item/reasoning/summaryTextDelta", "item/reasoning/textDelta"}
        peer.on_message = lambda now, m: deltas.append(now) if m.get("method") in delta_methods else None
        done = peer.expect(lambda m: m.get("method") in ("turn/completed", "error"))
        cpu0, t0 = cpu_seconds(peer.pid), time.monotonic_ns()
        params = {"threadId": self.thread_id, "input": [{"type": "text", "text": prompt}]}
        peer.send({"id": self.next_id, "method": "turn/start", "params": params})
        self.next_id += 1
        end = peer.wait(done, timeout)
        time.sleep(0.05)
        if end.get("method") == "error":
            raise RuntimeError(f"turn failed: {json.dumps(end)[:300]}")
        return (done[2] - t0) / 1e9, cpu_seconds(peer.pid) - cpu0


class Pi:
    name = "pi --mode rpc"

    def __init__(self, b: M.Bench) -> None:
        self.b = b
        self.agent_dir = b.home("pi-agent")
        package = CACHE / "node_modules" / "@mariozechner" / "pi-coding-agent"
        bin_field = {}
        if (package / "package.json").exists():
            bin_field = json.loads((package / "package.json").read_text()).get("bin", {})
        script = bin_field.get("pi") if isinstance(bin_field, dict) else bin_field
        self.script = package / script if script else None
        self.node = shutil.which("node")
        (self.agent_dir / "models.json").write_text(
            json.dumps(
                {
                    "providers": {
                        "bench": {
                            "baseUrl": b.base_url,
                            "api": "anthropic-messages",
                            "apiKey": "bench-fake-key",
                            "models": [
                                {
                                    "id": "claude-sonnet-4-5",
                                    "name": "bench",
                                    "reasoning": True,
                                    "contextWindow": 200000,
                                    "maxTokens": 16000,
                                }
                            ],
                        }
                    }
                }
            )
        )

    def unavailable(self) -> str | None:
        if self.node is None:
            return "node is not installed"
        return None if self.script and self.script.exists() else "the pi package has no CLI script"

    def spawn(self) -> JsonLinesPeer:
        env = self.b.clean_env()
        env.update({"PI_CODING_AGENT_DIR": str(self.agent_dir), "PI_SKIP_VERSION_CHECK": "1"})
        argv = [
            self.node,
            str(self.script),
            "--mode",
            "rpc",
            "--no-session",
            "--provider",
            "bench",
            "--model",
            "claude-sonnet-4-5",
        ]
        return JsonLinesPeer(argv, env, self.b.work, self.b.work / "pi.log")  # type: ignore[list-item]

    def ready(self, peer: JsonLinesPeer) -> list[Any]:
        slot = peer.expect(lambda m: m.get("id") == "1" and m.get("type") == "response")
        peer.send({"id": "1", "type": "get_state"})
        return slot

    def prepare(self, peer: JsonLinesPeer) -> None:
        self.next_id = 2

    def turn(self, peer: JsonLinesPeer, prompt: str, deltas: list[int], timeout: float) -> tuple[float, float]:
        def on_message(now: int, m: dict[str, Any]) -> None:
            if m.get("type") == "message_update" and (m.get("assistantMessageEvent") or {}).get("type") in (
                "thinking_delta",
                "text_delta",
            ):
                deltas.append(now)

        peer.on_message = on_message
        done = peer.expect(lambda m: m.get("type") == "agent_end")
        cpu0, t0 = cpu_seconds(peer.pid), time.monotonic_ns()
        peer.send({"id": str(self.next_id), "type": "prompt", "message": prompt})
        self.next_id += 1
        peer.wait(done, timeout)
        time.sleep(0.05)
        return (done[2] - t0) / 1e9, cpu_seconds(peer.pid) - cpu0


def _startup(peer_kind: Any, runs: int) -> dict[str, Any]:
    times: list[float] = []
    rss: list[float] = []
    for i in range(runs + 1):
        peer = peer_kind.spawn()
        try:
            slot = peer_kind.ready(peer)
            reply = peer.wait(slot, 60)
            if "error" in reply or reply.get("success") is False:
                raise RuntimeError(f"start-up request failed: {json.dumps(reply)[:300]}")
            if i:  # the first start fills caches (and may migrate state); not counted
                times.append((slot[2] - peer.spawned_ns) / 1e9)
                rss.append(peak_rss_mb(peer.pid))
        finally:
            peer.close()
    return {
        "runs": runs,
        "startup_median_s": M.median(times),
        "startup_p90_s": M.percentile(times, 90),
        "peak_rss_at_ready_mb": M.median(rss),
        "startup_all_s": times,
    }


def _relay_result(
    n: int, small: tuple[float, float], big: tuple[float, float], seen: int, rss: float
) -> dict[str, Any]:
    """Per-delta costs of a turn of ``n`` deltas; the marginal cost subtracts a 200-delta turn."""
    (_, cpu_small), (wall, cpu) = small, big
    result = {
        "deltas": n,
        "deltas_seen": seen,
        "wall_s": wall,
        "cpu_per_delta_us": cpu / n * 1e6,
        "marginal_cpu_per_delta_us": (cpu - cpu_small) / (n - SMALL) * 1e6,
        "peak_rss_mb": rss,
    }
    if seen != n:
        result["note"] = f"saw {seen} delta events for {n} deltas sent"
    return result


def _relay(peer_kind: Any, n: int) -> dict[str, Any]:
    peer = peer_kind.spawn()
    try:
        peer.wait(peer_kind.ready(peer), 60)
        peer_kind.prepare(peer)
        peer_kind.turn(peer, "bench:mode=fast,n=20", [], timeout=120)  # warm-up: first-turn costs
        small = peer_kind.turn(peer, f"bench:mode=fast,n={SMALL},size=12", [], timeout=120)
        deltas: list[int] = []
        big = peer_kind.turn(peer, f"bench:mode=fast,n={n},size=12", deltas, timeout=300)
        rss = peak_rss_mb(peer.pid)
    finally:
        peer.close()
    return _relay_result(n, small, big, len(deltas), rss)


def _ponder_relay(b: M.Bench, n: int) -> dict[str, Any]:
    with b.spawn(b.home("peers-ponder")) as d:
        d.initialize()
        sid = b.start_session(d)
        M._daemon_turn(b, d, sid, "bench:mode=fast,n=20")  # warm-up: imports httpx, connects
        _, small_wall, small_cpu = M._daemon_turn(b, d, sid, f"bench:mode=fast,n={SMALL},size=12")
        turn, wall, cpu = M._daemon_turn(b, d, sid, f"bench:mode=fast,n={n},size=12")
        return _relay_result(n, (small_wall, small_cpu), (wall, cpu), len(turn.deltas), d.peak_rss_mb())


def measure_peers(b: M.Bench, runs: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    problem = install()
    ponder: dict[str, Any] = {"name": "ponder", "startup": "measure 1"}
    try:
        ponder["relay"] = _ponder_relay(b, RELAY_DELTAS)
    except Exception as exc:
        ponder["relay"] = {"status": f"failed: {type(exc).__name__}: {exc}"}
    for kind in (Codex, Pi):
        entry: dict[str, Any] = {"name": kind.name}
        out.append(entry)
        if problem:
            entry["status"] = f"not measured: {problem}"
            continue
        peer_kind = kind(b)
        why = peer_kind.unavailable()
        if why:
            entry["status"] = f"not measured: {why}"
            continue
        try:
            entry.update(_startup(peer_kind, runs))
            entry["startup_note"] = (
                f"ready = answer to {'initialize' if kind is Codex else 'get_state'}; "
                f"RSS {entry['peak_rss_at_ready_mb']:.0f} MB"
            )
        except Exception as exc:
            entry["status"] = f"cannot run here: {type(exc).__name__}: {exc}"
            continue
        try:
            entry["relay"] = _relay(peer_kind, RELAY_DELTAS)
        except Exception as exc:
            entry["relay"] = {
                "deltas": RELAY_DELTAS,
                "status": f"relay not measured: {type(exc).__name__}: {str(exc)[:200]}",
            }
    out.append(ponder)
    return out


if __name__ == "__main__":  # a quick manual check: python -m scripts.bench.peers
    import tempfile

    bench = M.Bench(work=Path(tempfile.mkdtemp(prefix="ponder-bench-peers-")))
    bench.start_server()
    try:
        print(json.dumps(measure_peers(bench, 3), indent=2, default=str))
    finally:
        bench.stop_server()
    sys.exit(0)
