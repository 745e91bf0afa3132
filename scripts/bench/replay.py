"""A replay HTTP server on 127.0.0.1 for the benchmarks: streams provider SSE at a chosen rate.

Standalone (stdlib only, no project imports) so it runs as its own process and never shares
an interpreter (or a GIL) with the driver or the daemon being measured:

    python scripts/bench/replay.py [--port 0] [--max-lifetime-s 3600]

It prints ``PORT <n>`` on stdout once listening and exits when its stdin closes (the
driver's end of the pipe) or after ``--max-lifetime-s``, whichever comes first.

What to stream is read from the request itself: the last ``bench:k=v,k=v`` token found in
the request body (the prompt of the newest user message), so any client that forwards a
prompt (ponder, the floor script, a peer agent) drives it without out-of-band set-up.
Keys:

* ``n``      number of deltas (default 100); the first ``th`` of them are thinking deltas
* ``th``     how many are thinking (default n // 2); the rest are text
* ``size``   bytes of filler per delta (default 12)
* ``mode``   ``fast`` (the whole body written as fast as the socket takes it, in 64 KiB
             writes; the body is built once and cached) or ``paced``
* ``iv``     paced: milliseconds between writes (default 20)
* ``b``      paced: deltas per write (default 1)
* ``mode=endless``: the head of a reply, then one event of ``bytes`` bytes (default 2 GiB)
             that never has a line break, generated on the fly (Anthropic wire only)

Every delta's text starts ``<i>|<t>|`` where ``i`` counts deltas from 0 and ``t`` is
``time.monotonic_ns()`` just before the write that carries it (0 in fast mode): the
receiver checks order with ``i`` and, on the same machine (CLOCK_MONOTONIC is shared
between processes), latency with ``t``.

Wire formats (chosen by path): Anthropic Messages (``/v1/messages``), OpenAI Chat
Completions (``/chat/completions``, thinking as ``reasoning_content``) and OpenAI Responses
(``/responses``, thinking as reasoning summary text). ``GET /stats`` answers JSON counters
(requests, streams now open, the peak of streams open at once) and ``POST /stats/reset``
zeroes the peak.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import threading
import time

CHUNK = 64 * 1024
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
_SCENARIO = re.compile(rb"bench:([a-z0-9=,._-]+)")


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.open_streams = 0
        self.peak_streams = 0
        self.connections = 0
        self.peak_connections = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


STATS = Stats()


def parse_scenario(body: bytes) -> dict[str, str]:
    found = _SCENARIO.findall(body)
    if not found:
        return {}
    pairs = (item.split(b"=", 1) for item in found[-1].split(b",") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}


def delta_text(i: int, t_ns: int, size: int) -> str:
    filler = (FILLER * (size // len(FILLER) + 1))[:size]
    return f"{i}|{t_ns}|{filler}"


# --- wire formats ------------------------------------------------------------------------
# Each format is (head events, one delta -> event bytes, block switch, tail events). The
# delta encoders get (i, kind, text) where kind is "thinking" or "text".


def _sse(event: str | None, data: object) -> bytes:
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


class Anthropic:
    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, model: str) -> None:
        self.model = model or "claude-sonnet-4-5-20250929"

    def head(self, first_kind: str) -> bytes:
        start = _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
        return start + self._block_start(0, first_kind)

    @staticmethod
    def _block_start(index: int, kind: str) -> bytes:
        block = (
            {"type": "thinking", "thinking": "", "signature": ""}
            if kind == "thinking"
            else {"type": "text", "text": ""}
        )
        return _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})

    def delta(self, index: int, kind: str, text: str) -> bytes:
        delta = (
            {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
        )
        return _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def switch(self, index: int, old_kind: str, new_kind: str) -> bytes:
        out = b""
        if old_kind == "thinking":
            out += _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": "RXVjbGlk" * 40},
                },
            )
        out += _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        return out + self._block_start(index + 1, new_kind)

    def tail(self, index: int, kind: str, n: int) -> bytes:
        out = b""
        if kind == "thinking":
            out += _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": "RXVjbGlk" * 40},
                },
            )
        out += _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        out += _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": n},
            },
        )
        return out + _sse("message_stop", {"type": "message_stop"})


class OpenAIChat:
    content_type = "text/event-stream"

    def __init__(self, model: str) -> None:
        self.model = model or "bench-model"
        self.created = int(time.time())

    def _chunk(self, delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
        data = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
        }
        if usage is not None:
            data["usage"] = usage
        return _sse(None, data)

    def head(self, first_kind: str) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def delta(self, index: int, kind: str, text: str) -> bytes:
        return self._chunk({"reasoning_content": text} if kind == "thinking" else {"content": text})

    def switch(self, index: int, old_kind: str, new_kind: str) -> bytes:
        return b""

    def tail(self, index: int, kind: str, n: int) -> bytes:
        return (
            self._chunk({}, finish="stop")
            + self._chunk({}, usage={"prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10})
            + b"data: [DONE]\n\n"
        )


class OpenAIResponses:
    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, model: str) -> None:
        self.model = model or "bench-model"
        self.seq = 0
        self.parts: dict[str, list[str]] = {"thinking": [], "text": []}
        self.output_index = 0

    def _event(self, data: dict) -> bytes:
        data["sequence_number"] = self.seq
        self.seq += 1
        return _sse(data["type"], data)

    def _response(self, status: str, output: list) -> dict:
        return {
            "id": "resp_bench",
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": self.model,
            "output": output,
            "usage": None
            if status != "completed"
            else {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 5},
                "total_tokens": 20,
            },
        }

    def _open(self, kind: str) -> bytes:
        if kind == "thinking":
            item = {"id": "rs_bench", "type": "reasoning", "summary": []}
            return self._event(
                {"type": "response.output_item.added", "output_index": self.output_index, "item": item}
            ) + self._event(
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": "rs_bench",
                    "output_index": self.output_index,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
        item = {"id": "msg_bench", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        return self._event(
            {"type": "response.output_item.added", "output_index": self.output_index, "item": item}
        ) + self._event(
            {
                "type": "response.content_part.added",
                "item_id": "msg_bench",
                "output_index": self.output_index,
                "content_index": 0,
                "part": {"type": "output_text", "annotations": [], "text": ""},
            }
        )

    def _item(self, kind: str) -> dict:
        text = "".join(self.parts[kind])
        if kind == "thinking":
            return {"id": "rs_bench", "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
        return {
            "id": "msg_bench",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "text": text}],
        }

    def _close(self, kind: str) -> bytes:
        text = "".join(self.parts[kind])
        if kind == "thinking":
            out = self._event(
                {
                    "type": "response.reasoning_summary_text.done",
                    "item_id": "rs_bench",
                    "output_index": self.output_index,
                    "summary_index": 0,
                    "text": text,
                }
            ) + self._event(
                {
                    "type": "response.reasoning_summary_part.done",
                    "item_id": "rs_bench",
                    "output_index": self.output_index,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": text},
                }
            )
        else:
            out = self._event(
                {
                    "type": "response.output_text.done",
                    "item_id": "msg_bench",
                    "output_index": self.output_index,
                    "content_index": 0,
                    "text": text,
                }
            ) + self._event(
                {
                    "type": "response.content_part.done",
                    "item_id": "msg_bench",
                    "output_index": self.output_index,
                    "content_index": 0,
                    "part": {"type": "output_text", "annotations": [], "text": text},
                }
            )
        out += self._event(
            {"type": "response.output_item.done", "output_index": self.output_index, "item": self._item(kind)}
        )
        self.output_index += 1
        return out

    def head(self, first_kind: str) -> bytes:
        created = self._event({"type": "response.created", "response": self._response("in_progress", [])})
        progress = self._event({"type": "response.in_progress", "response": self._response("in_progress", [])})
        return created + progress + self._open(first_kind)

    def delta(self, index: int, kind: str, text: str) -> bytes:
        self.parts[kind].append(text)
        if kind == "thinking":
            return self._event(
                {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": "rs_bench",
                    "output_index": self.output_index,
                    "summary_index": 0,
                    "delta": text,
                }
            )
        return self._event(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_bench",
                "output_index": self.output_index,
                "content_index": 0,
                "delta": text,
            }
        )

    def switch(self, index: int, old_kind: str, new_kind: str) -> bytes:
        return self._close(old_kind) + self._open(new_kind)

    def tail(self, index: int, kind: str, n: int) -> bytes:
        out = self._close(kind)
        output = [self._item(k) for k in ("thinking", "text") if self.parts[k]]
        return out + self._event({"type": "response.completed", "response": self._response("completed", output)})


def wire_for(path: str, model: str):  # type: ignore[no-untyped-def]
    if path.endswith("/messages"):
        return Anthropic(model)
    if path.endswith("/chat/completions"):
        return OpenAIChat(model)
    if path.endswith("/responses"):
        return OpenAIResponses(model)
    return None


# --- streaming ---------------------------------------------------------------------------

_FAST_CACHE: dict[tuple, bytes] = {}


def _plan(params: dict[str, str]) -> tuple[int, int, int]:
    n = int(params.get("n", "100"))
    th = int(params.get("th", str(n // 2)))
    size = int(params.get("size", "12"))
    return n, min(th, n), size


def _kind_of(i: int, th: int) -> str:
    return "thinking" if i < th else "text"


def build_fast_body(path: str, model: str, params: dict[str, str]) -> bytes:
    n, th, size = _plan(params)
    key = (type(wire_for(path, model)).__name__, model, n, th, size)
    cached = _FAST_CACHE.get(key)
    if cached is not None:
        return cached
    wire = wire_for(path, model)
    parts = [wire.head(_kind_of(0, th))]
    index, kind = 0, _kind_of(0, th)
    for i in range(n):
        new_kind = _kind_of(i, th)
        if new_kind != kind:
            parts.append(wire.switch(index, kind, new_kind))
            index, kind = index + 1, new_kind
        parts.append(wire.delta(index, kind, delta_text(i, 0, size)))
    parts.append(wire.tail(index, kind, n))
    body = b"".join(parts)
    if len(_FAST_CACHE) > 16:
        _FAST_CACHE.clear()
    _FAST_CACHE[key] = body
    return body


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def stream_fast(writer: asyncio.StreamWriter, body: bytes) -> None:
    for start in range(0, len(body), CHUNK):
        writer.write(_chunked(body[start : start + CHUNK]))
        await writer.drain()


async def stream_paced(writer: asyncio.StreamWriter, path: str, model: str, params: dict[str, str]) -> None:
    n, th, size = _plan(params)
    interval_s = float(params.get("iv", "20")) / 1000
    burst = max(1, int(params.get("b", "1")))
    wire = wire_for(path, model)
    index, kind = 0, _kind_of(0, th)
    writer.write(_chunked(wire.head(kind)))
    await writer.drain()
    loop = asyncio.get_running_loop()
    start = loop.time()
    i = 0
    tick = 0
    while i < n:
        tick += 1
        delay = start + tick * interval_s - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        pieces = []
        t_ns = time.monotonic_ns()
        end = min(n, i + burst)
        while i < end:
            new_kind = _kind_of(i, th)
            if new_kind != kind:
                pieces.append(wire.switch(index, kind, new_kind))
                index, kind = index + 1, new_kind
            pieces.append(wire.delta(index, kind, delta_text(i, t_ns, size)))
            i += 1
        writer.write(_chunked(b"".join(pieces)))
        await writer.drain()
    writer.write(_chunked(wire.tail(index, kind, n)))
    await writer.drain()


async def stream_endless(writer: asyncio.StreamWriter, path: str, model: str, params: dict[str, str]) -> None:
    """A reply whose first delta event never ends: ``bytes`` of filler without a line break."""
    total = int(params.get("bytes", str(2 * 1024**3)))
    wire = wire_for(path, model)
    writer.write(
        _chunked(wire.head("text") + b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,')
    )
    block = _chunked(b"x" * (1024 * 1024))
    for _ in range(total // (1024 * 1024)):
        writer.write(block)
        await writer.drain()


async def respond(writer: asyncio.StreamWriter, status: str, content_type: str, body: bytes) -> None:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    STATS.connections += 1
    STATS.peak_connections = max(STATS.peak_connections, STATS.connections)
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = [*lines[0].split(" "), "", ""][:3]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = b""
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";")[0], 16)
                    chunk = await reader.readexactly(size + 2)
                    if size == 0:
                        break
                    body += chunk[:-2]
            else:
                body = await reader.readexactly(length) if length else b""
            path = path.split("?", 1)[0]
            STATS.requests += 1
            if path == "/stats":
                if method == "POST":
                    STATS.peak_streams = STATS.open_streams
                    STATS.peak_connections = STATS.connections
                    STATS.requests = 0
                await respond(writer, "200 OK", "application/json", json.dumps(STATS.as_dict()).encode())
                continue
            model = ""
            try:
                parsed = json.loads(body) if body else {}
                model = str(parsed.get("model", "")) if isinstance(parsed, dict) else ""
            except ValueError:
                pass
            if path.endswith("/models") and method == "GET":
                await respond(writer, "200 OK", "application/json", json.dumps({"object": "list", "data": []}).encode())
                continue
            wire = wire_for(path, model)
            if method != "POST" or wire is None:
                await respond(
                    writer,
                    "404 Not Found",
                    "application/json",
                    b'{"error":{"type":"not_found","message":"no such path"}}',
                )
                continue
            params = parse_scenario(body)
            writer.write(
                f"HTTP/1.1 200 OK\r\ncontent-type: {wire.content_type}\r\ncache-control: no-cache\r\n"
                "transfer-encoding: chunked\r\n\r\n".encode()
            )
            STATS.open_streams += 1
            STATS.peak_streams = max(STATS.peak_streams, STATS.open_streams)
            try:
                if params.get("mode", "fast") == "paced":
                    await stream_paced(writer, path, model, params)
                elif params.get("mode") == "endless":
                    await stream_endless(writer, path, model, params)
                else:
                    await stream_fast(writer, build_fast_body(path, model, params))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            finally:
                STATS.open_streams -= 1
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        STATS.connections -= 1
        writer.close()


def _exit_when_stdin_closes() -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


async def main_async(port: int, max_lifetime_s: float) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"PORT {bound}\n")
    sys.stdout.flush()
    async with server:
        await asyncio.sleep(max_lifetime_s)  # a bounded life whatever happens to the driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-lifetime-s", type=float, default=3600.0)
    args = parser.parse_args()
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    asyncio.run(main_async(args.port, args.max_lifetime_s))


if __name__ == "__main__":
    main()
