"""Helpers for the reliability tests: Anthropic SSE bodies built event by event, and a session
on an Anthropic model driven through the in-memory daemon against the replay server."""

from __future__ import annotations

import itertools
import json
from typing import Any

from daemon.jsonrpc.client import RpcClient
from tests.support.replay import ReplayServer, ScriptedResponse, load_fixture

MODEL = "anthropic/claude-opus-4-6"
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}
FAKE_KEY = "sk-ant-reliability-test-key-0123456789"


def anthropic_env(server: ReplayServer, key: str = FAKE_KEY) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": server.url}


def sse(*events: dict[str, Any] | str) -> bytes:
    """An SSE body: dicts become ``event: <type>`` blocks, strings are written as given."""
    out = []
    for event in events:
        if isinstance(event, str):
            out.append(event)
        else:
            out.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return "".join(out).encode()


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "content": [],
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}
PING = {"type": "ping"}


def text_start(index: int = 0) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}


def text_delta(text: str, index: int = 0) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}


def tool_use_start(name: str = "read_file", call_id: str = "toolu_1", index: int = 0) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def arguments_delta(partial_json: str, index: int = 0) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": partial_json},
    }


def block_stop(index: int = 0) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_end(stop_reason: str = "end_turn") -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]


def text_reply(*pieces: str) -> bytes:
    """A complete, well-formed streamed reply whose text is ``"".join(pieces)``."""
    return sse(MESSAGE_START, text_start(), *[text_delta(p) for p in pieces], block_stop(), *message_end())


def streamed(body: bytes, **kwargs: Any) -> ScriptedResponse:
    return ScriptedResponse(status=200, headers=dict(SSE_HEADERS), body=body, **kwargs)


def in_chunks(chunks: list[bytes], chunk_delay_s: float) -> ScriptedResponse:
    """One streamed body made of ``chunks``, each sent on its own, ``chunk_delay_s`` apart."""
    cuts = list(itertools.accumulate(len(chunk) for chunk in chunks))
    return streamed(b"".join(chunks), split_at=cuts, chunk_delay_s=chunk_delay_s)


def text_in_pieces(pieces: list[str], chunk_delay_s: float) -> ScriptedResponse:
    """``text_reply(*pieces)`` with each piece's delta sent on its own (the first with the message's start)."""
    deltas = [sse(text_delta(piece)) for piece in pieces]
    deltas[0] = sse(MESSAGE_START, text_start()) + deltas[0]
    return in_chunks([*deltas, sse(block_stop(), *message_end())], chunk_delay_s)


def fixture_response(name: str, **header_overrides: str) -> ScriptedResponse:
    """A fixture's response (``anthropic/<name>``) with some headers replaced (or removed when "")."""
    meta, body = load_fixture("anthropic", name)
    headers = dict(meta["response"]["headers"])
    for key, value in header_overrides.items():
        key = key.replace("_", "-")
        if value:
            headers[key] = value
        else:
            headers.pop(key, None)
    cuts = list(meta.get("replay", {}).get("utf8_split_offsets", []))
    return ScriptedResponse(status=int(meta["response"]["status"]), headers=headers, body=body, split_at=cuts)


async def start_session(client: RpcClient, cwd: str, model_id: str = MODEL, **params: Any) -> str:
    started = await client.request(
        "session/start",
        {"model_id": model_id, "thinking_level": "medium", "cwd": cwd, "approval_policy": "auto", **params},
    )
    return started["session"]["session_id"]


async def prompt(client: RpcClient, session_id: str, text: str) -> list[dict[str, Any]]:
    """Prompt and collect the turn's events, turn_start to turn_end."""
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    return await client.collect_turn(turn["turn_id"])


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "text_delta")
