"""Requests sent the way an impatient client sends them: all written at once, in a known
order, before any answer is read; and a local Ollama that is slow to list its models.

``burst`` works for both dialects over ``daemon.jsonrpc.client.RpcClient``; the answers are
collected from ``on_message`` (which sees every message before it is dispatched).
"""

import itertools
import json
from typing import Any

import anyio
import msgspec

from daemon.jsonrpc.client import RpcClient
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse

OLLAMA_MODEL = "gpt-oss:20b"
_ids = itertools.count(1)


async def burst(client: RpcClient, requests: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Write every request, in order, before reading any answer; return the answers (in request order)."""
    ids = [f"burst-{next(_ids)}" for _ in requests]
    answers: dict[str, dict[str, Any]] = {}
    for request_id, (method, _params) in zip(ids, requests, strict=True):
        client.sent_methods[request_id] = method  # lets the wire validator interpret the answers
    previous = client.on_message

    def on_message(message: Any, method_of_id: dict[Any, str]) -> None:
        if previous is not None:
            previous(message, method_of_id)
        if isinstance(message, dict) and message.get("id") in ids:
            answers[message["id"]] = message

    client.on_message = on_message
    try:
        for request_id, (method, params) in zip(ids, requests, strict=True):
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            await client.send_raw(msgspec.json.encode(message))
        with anyio.fail_after(10):
            while len(answers) < len(ids):
                await anyio.sleep(0.005)
    finally:
        client.on_message = previous
    return [answers[request_id] for request_id in ids]


def slow_ollama(server: ReplayServer, delay_s: float = 0.05) -> None:
    """Serve discovery for one model (thinking levels low/medium/high), answering its model
    list only after ``delay_s``, as an Ollama busy loading a model does."""
    tags = {"models": [{"name": OLLAMA_MODEL, "model": OLLAMA_MODEL}]}
    show = {"capabilities": ["completion", "tools", "thinking"], "details": {"family": "gptoss"}}

    def answer(payload: dict[str, Any], delay: float):
        def respond(_request: RecordedRequest) -> ScriptedResponse:
            body = json.dumps(payload).encode()
            return ScriptedResponse(body=body, headers={"content-type": "application/json"}, headers_delay_s=delay)

        return respond

    server.routes[("GET", "/api/tags")] = answer(tags, delay_s)
    server.routes[("POST", "/api/show")] = answer(show, 0.0)
