"""The floor for the relay and latency measures: the least a relay on ponder's stack can do.

Standalone: ``python scripts/bench/floor.py URL PROMPT [--flush]``. It uses the daemon's
own stack (httpx.AsyncClient + httpx-sse + msgspec on asyncio), POSTs an Anthropic
Messages request carrying PROMPT to URL, parses the SSE stream, and writes one JSON line
per thinking/text delta to stdout (a pipe) — nothing else: no agent, no store, no
JSON-RPC envelope.

Protocol with the driver, so both sides are measured the same way (from /proc, outside):

1. after imports and one small warm-up request (connection pooled, code paths warm) it
   prints ``READY``;
2. it waits for a line on stdin, then streams (delta lines go to stdout);
3. it prints ``DONE <deltas>`` and waits for stdin to close before exiting.

``--flush`` flushes after every line (for the latency floor); otherwise stdout is
block-buffered like any program writing to a pipe.
"""

import asyncio
import io
import sys

import httpx
import msgspec
from httpx_sse import EventSource

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


async def relay(client: httpx.AsyncClient, url: str, prompt: str, out, flush: bool) -> int:  # type: ignore[no-untyped-def]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16000,
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
    }
    headers = {"x-api-key": "bench-fake-key", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    count = 0
    async with client.stream("POST", url, content=_encode(body), headers=headers) as response:
        response.raise_for_status()
        async for event in EventSource(response).aiter_sse():
            payload = _decode(event.data)
            kind = payload.get("type")
            if kind == "content_block_delta":
                delta = payload["delta"]
                dtype = delta.get("type")
                if dtype == "thinking_delta":
                    text = delta["thinking"]
                elif dtype == "text_delta":
                    text = delta["text"]
                else:
                    continue
                out.write(_encode({"type": dtype, "index": payload["index"], "delta": text}) + b"\n")
                if flush:
                    out.flush()
                count += 1
            elif kind == "message_stop":
                break
    out.flush()
    return count


async def main() -> None:
    url, prompt = sys.argv[1], sys.argv[2]
    flush = "--flush" in sys.argv[3:]
    out = sys.stdout.buffer
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=15.0)) as client:
        await relay(client, url, "bench:mode=fast,n=200", io.BytesIO(), False)
        out.write(b"READY\n")
        out.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.readline)
        count = await relay(client, url, prompt, out, flush)
        out.write(b"DONE %d\n" % count)
        out.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)


if __name__ == "__main__":
    asyncio.run(main())
