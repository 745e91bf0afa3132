"""Reasoning eats the output budget: a reply that reaches the output limit while the model still
thinks ends the turn ``max_tokens`` with a reason that says so and what to do, on every adapter,
never as an empty success.

Each provider's own length stop (Anthropic ``max_tokens``, Chat Completions ``finish_reason:
length``, Responses ``incomplete`` / ``max_output_tokens``, Gemini ``MAX_TOKENS``, Ollama
``done_reason: length``) comes from a real HTTP server on 127.0.0.1, through the daemon.
"""

import json
from typing import Any

import pytest

from daemon.providers.ollama import clear_discovery_cache
from tests.support.faults import MESSAGE_START, sse
from tests.support.harness import in_memory_daemon
from tests.support.replay import ReplayServer, ScriptedResponse

pytestmark = pytest.mark.anyio

SSE = {"content-type": "text/event-stream; charset=utf-8"}
THOUGHT = "Let me weigh every option with great care"


def _data(*chunks: dict[str, Any] | str) -> bytes:
    return "".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks).encode()


def anthropic_cut(server: ReplayServer, answer: str) -> None:
    blocks: list[dict[str, Any] | str] = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": THOUGHT}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
    ]
    if answer:
        blocks += [
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": answer}},
            {"type": "content_block_stop", "index": 1},
        ]
    stop = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 16000}}
    server.enqueue(ScriptedResponse(headers=SSE, body=sse(MESSAGE_START, *blocks, stop, {"type": "message_stop"})))


def chat_cut(server: ReplayServer, answer: str) -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks: list[dict[str, Any] | str] = [chunk({"role": "assistant", "reasoning_content": THOUGHT})]
    if answer:
        chunks.append(chunk({"content": answer}))
    chunks += [chunk({}, "length"), "[DONE]"]
    server.enqueue(ScriptedResponse(headers=SSE, body=_data(*chunks)))


def responses_cut(server: ReplayServer, answer: str) -> None:
    assert not answer
    server.enqueue_fixture("openai-responses", "incomplete-max-output-tokens")


def gemini_cut(server: ReplayServer, answer: str) -> None:
    parts: list[dict[str, Any]] = [{"text": THOUGHT, "thought": True}]
    if answer:
        parts.append({"text": answer})
    body = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "MAX_TOKENS", "index": 0}],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 1, "thoughtsTokenCount": 8000},
    }
    server.enqueue(ScriptedResponse(headers=SSE, body=_data(body)))


def ollama_cut(server: ReplayServer, answer: str) -> None:
    tags = {"models": [{"name": "gpt-oss:20b", "model": "gpt-oss:20b"}]}
    show = {"capabilities": ["completion", "tools", "thinking"], "details": {"family": "gptoss"}}
    for payload in (tags, show):
        server.enqueue(
            ScriptedResponse(headers={"content-type": "application/json"}, body=json.dumps(payload).encode())
        )
    lines = [
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": "", "thinking": THOUGHT}, "done": False}
    ]
    if answer:
        lines.append({"model": "gpt-oss:20b", "message": {"role": "assistant", "content": answer}, "done": False})
    lines.append(
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "length"}
    )
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    server.enqueue(ScriptedResponse(headers={"content-type": "application/x-ndjson"}, body=body))


CASES = {
    "anthropic": (
        "anthropic/claude-sonnet-4-5",
        {"ANTHROPIC_API_KEY": "sk-ant-fake"},
        "ANTHROPIC_BASE_URL",
        anthropic_cut,
    ),
    "openai-chat": ("deepseek/deepseek-v4-pro", {"DEEPSEEK_API_KEY": "sk-fake"}, "DEEPSEEK_BASE_URL", chat_cut),
    "openai-responses": ("openai/gpt-5.1", {"OPENAI_API_KEY": "sk-fake"}, "OPENAI_BASE_URL", responses_cut),
    "gemini": ("gemini/gemini-3.1-pro-preview", {"GEMINI_API_KEY": "AIza-fake"}, "GEMINI_BASE_URL", gemini_cut),
    "ollama": ("ollama/gpt-oss:20b", {}, "OLLAMA_HOST", ollama_cut),
}


async def _turn(case: str, answer: str, home: Any, tmp_path: Any, server: ReplayServer) -> list[dict[str, Any]]:
    model_id, env, url_var, enqueue = CASES[case]
    clear_discovery_cache()
    enqueue(server, answer)
    try:
        async with in_memory_daemon(home, env={**env, url_var: server.url}) as (client, _):
            started = await client.request(
                "session/start", {"model_id": model_id, "thinking_level": "high", "cwd": str(tmp_path)}
            )
            turn = await client.request(
                "session/prompt", {"session_id": started["session"]["session_id"], "text": "hi"}
            )
            return await client.collect_turn(turn["turn_id"])
    finally:
        clear_discovery_cache()


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_reply_cut_while_thinking_ends_max_tokens_with_a_reason(case, home, tmp_path, replay_server):
    events = await _turn(case, "", home, tmp_path, replay_server)
    end = events[-1]
    assert end["type"] == "turn_end" and end["stop_reason"] == "max_tokens", end
    message = end["error"]["message"]
    assert "output limit was reached while the model was thinking" in message, message
    assert "before any answer" in message and "lower the thinking level with thinking/set" in message, message
    saved = next(e for e in events if e["type"] == "message_end")["message"]
    assert saved["stop_reason"] == "max_tokens"
    assert not [b for b in saved["content"] if b["type"] == "text" and b["text"]]  # indeed no answer
    assert any(e["type"] == "thinking_delta" for e in events)


@pytest.mark.parametrize("case", ["anthropic", "gemini", "openai-chat", "ollama"])
async def test_a_reply_cut_mid_answer_says_it_was_cut_off(case, home, tmp_path, replay_server):
    events = await _turn(case, "The answer starts", home, tmp_path, replay_server)
    end = events[-1]
    assert end["stop_reason"] == "max_tokens", end
    message = end["error"]["message"]
    assert message.startswith("The reply was cut off at the output limit; ask the model to continue"), message
