"""How long a steer takes to reach the model when the reply's tools finish at once.

A real ``ponder serve`` (a subprocess with its own home) talks to an Anthropic-shaped replay
server on 127.0.0.1 (a thread of this process; both read CLOCK_MONOTONIC). Each round: a prompt
whose reply calls ``write_file`` (a tool that finishes at once); while its ``permission/request``
waits, the client sends a steer (``delivery: "steer"``), and when the steer is answered it
allows the tool. The server stamps the arrival of the request that carries the steer.

Printed, per round and as median / p90 over the rounds:
- ``steer -> call``: from sending the steer to the model call that carries it;
- ``allow -> call``: from allowing the tool (the moment the tools can finish) to that call;
- the same ``allow -> call`` without a steer, as the baseline the steer adds to.

    uv run python -m scripts.bench.steer_latency [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio

from daemon.jsonrpc.client import spawn_daemon


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _reply(blocks: list[tuple[dict[str, Any], dict[str, Any] | None]], stop: str) -> bytes:
    start = {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
             "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}  # fmt: skip
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, (block, delta) in enumerate(blocks):
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": block}))
        if delta is not None:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 3}})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse(events)


TOOL_REPLY = _reply(
    [
        (
            {"type": "tool_use", "id": "call_w", "name": "write_file", "input": {}},
            {"type": "input_json_delta", "partial_json": json.dumps({"path": "out.txt", "content": "x"})},
        )
    ],
    "tool_use",
)
TEXT_REPLY = _reply([({"type": "text", "text": ""}, {"type": "text_delta", "text": "ok"})], "end_turn")


class Provider:
    """Answers a request without tool results with ``TOOL_REPLY``, one with them with ``TEXT_REPLY``;
    stamps when each request carrying a tool result arrived."""

    def __init__(self) -> None:
        self.answered: list[tuple[float, bool]] = []  # (arrival, carried the steer)
        self.arrived = threading.Condition()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                at = time.monotonic()
                sent = json.loads(body)
                last = sent["messages"][-1]["content"]
                results = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
                if results:
                    steered = any(b.get("type") == "text" for b in last)
                    with provider.arrived:
                        provider.answered.append((at, steered))
                        provider.arrived.notify_all()
                reply = TEXT_REPLY if results else TOOL_REPLY
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(reply)))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(reply)
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"


async def measure(rounds: int) -> dict[str, list[float]]:
    provider = Provider()
    out: dict[str, list[float]] = {"steer -> call": [], "allow -> call": [], "allow -> call, no steer": []}
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        state: dict[str, Any] = {}

        async def on_request(method: str, params: Any) -> Any:
            if state.get("steer"):
                state["steer_sent"] = time.monotonic()
                await client.request(
                    "session/prompt",
                    {"session_id": params["session_id"], "text": "Name it out2.txt instead.", "delivery": "steer"},
                )
            state["allowed"] = time.monotonic()
            return {"decision": "allow_once"}

        env = {"ANTHROPIC_API_KEY": "sk-ant-bench", "ANTHROPIC_BASE_URL": provider.url, "PONDER_HOME": str(home)}
        async with spawn_daemon(home=home, env=env, on_request=on_request, log_level="warning") as client:
            await client.request(
                "initialize",
                {
                    "protocol_version": 1,
                    "client_info": {"name": "bench"},
                    "capabilities": {"permission_requests": True},
                },
            )
            for i in range(rounds * 2):
                steer = i % 2 == 0
                state.clear()
                state["steer"] = steer
                started = await client.request(
                    "session/start",
                    {"model_id": "anthropic/claude-sonnet-4-5", "thinking_level": "off", "cwd": str(work),
                     "approval_policy": "ask"},
                )  # fmt: skip
                session_id = started["session"]["session_id"]
                turn = await client.request("session/prompt", {"session_id": session_id, "text": "Write it."})
                with anyio.fail_after(30):
                    await client.collect_turn(turn["turn_id"])
                arrival, carried = provider.answered[-1]
                assert carried == steer, "the request after the tool carries the steer exactly when one was sent"
                if steer:
                    out["steer -> call"].append((arrival - state["steer_sent"]) * 1000)
                    out["allow -> call"].append((arrival - state["allowed"]) * 1000)
                else:
                    out["allow -> call, no steer"].append((arrival - state["allowed"]) * 1000)
            await client.request("shutdown")
    provider.httpd.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    results = anyio.run(measure, args.rounds, backend=args.backend)
    for name, values in results.items():
        values.sort()
        p90 = values[max(0, int(len(values) * 0.9) - 1)]
        print(f"{name:26} median {statistics.median(values):7.1f} ms   p90 {p90:7.1f} ms   (n={len(values)})")


if __name__ == "__main__":
    main()
