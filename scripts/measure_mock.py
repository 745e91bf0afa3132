"""Time from ``session/prompt`` to the first ``thinking_delta``, and the delta rate, on the mock.

Spawns ``ponder serve`` (mock at zero delay) and runs N turns of ``mock/thinker`` at ``max``;
prints medians. Not a test; see ``scripts/bench`` for the full benchmark suite.

    uv run python scripts/measure_mock.py [turns]
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.jsonrpc.client import spawn_daemon


async def main(turns: int) -> None:
    with tempfile.TemporaryDirectory() as home:
        async with spawn_daemon(home=home, env={"PONDER_MOCK_DELAY_MS": "0"}, log_level="warning") as client:
            await client.request("initialize", {"protocol_version": 1})
            started = await client.request("session/start", {"model_id": "mock/thinker", "thinking_level": "max"})
            session_id = started["session"]["session_id"]
            first, rates = [], []
            for i in range(turns):
                sent = time.perf_counter()
                turn = await client.request("session/prompt", {"session_id": session_id, "text": f"question {i}"})
                deltas, first_at = 0, None
                async for event in client.events(turn["turn_id"]):
                    if event["type"] in ("thinking_delta", "text_delta"):
                        deltas += 1
                        if first_at is None:
                            first_at = time.perf_counter()
                ended = time.perf_counter()
                first.append((first_at - sent) * 1000)
                rates.append(deltas / (ended - first_at))
            await client.request("shutdown")
    print(f"prompt -> first thinking_delta: median {statistics.median(first):.2f} ms over {turns} turns")
    print(f"delta rate (mock at 0 ms): median {statistics.median(rates):,.0f} deltas/s ({deltas} deltas per turn)")


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 20)
