"""Prompt content under load (issue 27): admission time and the daemon's peak RSS for a prompt of
20 large images, and the size of the provider request after 50 screenshots in one session.

Runs a real ``ponder serve`` subprocess (a fresh home) and, for the request size, a replay
server on 127.0.0.1 standing in for Anthropic; nothing touches the internet.

    uv run --group dev python scripts/bench/images.py

Images are random pixels (incompressible), so their stored size is what the limits say, not
what a screenshot of flat colour would compress to: the worst case for the daemon's memory.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.replay import ReplayServer  # noqa: E402


def noisy_png(width: int, height: int, seed: int) -> bytes:
    rng = __import__("random").Random(seed)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3)).save(out, "PNG")
    return out.getvalue()


class Daemon:
    """``ponder serve`` on pipes, one request at a time (notifications are read and dropped)."""

    def __init__(self, home: Path, env: dict[str, str], max_line: int | None = None) -> None:
        args = [sys.executable, "-m", "daemon", "--home", str(home), "--log-level", "warning", "serve"]
        if max_line:
            args += ["--max-line-bytes", str(max_line)]
        clean = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={**clean, "PONDER_MOCK_DELAY_MS": "0", **env},
        )
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()
        while True:
            message = json.loads(self.process.stdout.readline())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(message["error"]["message"])
                return message["result"]

    def wait_turn(self, turn_id: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            message = json.loads(self.process.stdout.readline())
            params = message.get("params") or {}
            if params.get("turn_id") == turn_id and params.get("type") == "turn_end":
                return params

    def cpu_s(self) -> float:
        """The daemon's CPU time so far (user + system): what admission cost, whatever the load."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


def admission(kind: str, size: tuple[int, int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        work = root / "work"
        work.mkdir()
        images = [noisy_png(*size, seed=n) for n in range(20)]
        for n, data in enumerate(images):
            (work / f"{n}.png").write_bytes(data)
        raw = sum(len(d) for d in images)
        if kind == "data":
            blocks = [{"type": "image", "data": base64.b64encode(d).decode()} for d in images]
        else:
            blocks = [{"type": "image", "path": f"{n}.png"} for n in range(20)]
        daemon = Daemon(root / "home", {}, max_line=256 * 1024 * 1024 if kind == "data" else None)
        try:
            daemon.request("initialize", {"protocol_version": 1})
            session = daemon.request("session/start", {"model_id": "mock/echo", "cwd": str(work)})["session"]
            before = daemon.peak_rss_mb()
            cpu = daemon.cpu_s()
            started = time.perf_counter()
            turn = daemon.request("session/prompt", {"session_id": session["session_id"], "content": blocks})
            admitted = time.perf_counter() - started
            cpu = daemon.cpu_s() - cpu
            daemon.wait_turn(turn["turn_id"])
            stored = daemon.request("session/messages", {"session_id": session["session_id"]})["messages"][0]
            kept = sum(b["bytes"] for b in stored["content"])
            shape = {(b["width"], b["height"]) for b in stored["content"]}
            print(
                f"20 images {size[0]}x{size[1]} as {kind}: {raw / 1e6:.1f} MB given, {kept / 1e6:.1f} MB stored "
                f"{sorted(shape)}; admission {admitted:.2f} s ({cpu:.2f} s of daemon CPU); "
                f"daemon peak RSS {daemon.peak_rss_mb():.0f} MB "
                f"(before the prompt {before:.0f} MB); load average {os.getloadavg()[0]:.1f}"
            )
        finally:
            daemon.close()


def fifty_screenshots() -> None:
    fixture_dir = REPO / "tests" / "fixtures" / "providers" / "anthropic"
    reply = (fixture_dir / "thinking-text.sse").read_bytes()
    with tempfile.TemporaryDirectory() as tmp, ReplayServer() as server:
        from tests.support.replay import ScriptedResponse

        root = Path(tmp)
        (root / "home").mkdir()
        work = root / "work"
        work.mkdir()
        for _ in range(50):
            server.enqueue(ScriptedResponse(headers={"content-type": "text/event-stream"}, body=reply))
        env = {"ANTHROPIC_API_KEY": "sk-ant-bench", "ANTHROPIC_BASE_URL": server.url}
        daemon = Daemon(root / "home", env)
        try:
            daemon.request("initialize", {"protocol_version": 1})
            started = daemon.request(
                "session/start",
                {"model_id": "anthropic/claude-sonnet-4-5", "cwd": str(work), "thinking_level": "off"},
            )
            session_id = started["session"]["session_id"]
            notes: list[str] = []
            for n in range(50):
                # A 1600x1000 screenshot of random pixels: ~4.8 MB of PNG, stored scaled to <= 3.75 MB.
                (work / "shot.png").write_bytes(noisy_png(1600, 1000, seed=1000 + n))
                content = [{"type": "text", "text": f"screenshot {n}"}, {"type": "image", "path": "shot.png"}]
                turn = daemon.request("session/prompt", {"session_id": session_id, "content": content})
                start = None
                while True:  # the turn's first event is turn_start
                    assert daemon.process.stdout is not None
                    message = json.loads(daemon.process.stdout.readline())
                    params = message.get("params") or {}
                    if params.get("turn_id") == turn["turn_id"] and params.get("type") == "turn_start":
                        start = params
                    if params.get("turn_id") == turn["turn_id"] and params.get("type") == "turn_end":
                        break
                notes = start["notes"] if start else []
            sizes = [len(r.body) for r in server.requests]
            last = server.requests[-1].json()
            sent = sum(
                1 for m in last["messages"] for b in m["content"] if isinstance(b, dict) and b["type"] == "image"
            )
            as_notes = sum(
                1
                for m in last["messages"]
                for b in m["content"]
                if isinstance(b, dict) and b.get("type") == "text" and b["text"].startswith("[image omitted")
            )
            print(
                f"50 screenshots in one session: request 50 is {sizes[-1] / 1e6:.1f} MB "
                f"({sent} images as bytes, {as_notes} as notes; largest request {max(sizes) / 1e6:.1f} MB); "
                f"turn_start.notes: {notes}; daemon peak RSS {daemon.peak_rss_mb():.0f} MB; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
        finally:
            daemon.close()


if __name__ == "__main__":
    admission("path", (1100, 1100))
    admission("data", (1100, 1100))
    admission("path", (4000, 2500))
    fifty_screenshots()
