"""Provider replies written for the steering tests, in each wire API's streaming shape: a reply
that calls tools, and a reply of text. Served by ``tests.support.replay.ReplayServer`` on
127.0.0.1, so a real daemon talks to them as it talks to the vendor.

Each family also names the model, the credentials and the base-URL variable a daemon needs to
reach the replay server, and reads back from a recorded request body what the steering
contract is about: where the user's text sits relative to the tool results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.support.replay import ReplayServer, ScriptedResponse

Call = tuple[str, str, dict[str, Any]]  # (call_id, tool name, arguments)


def _sse(events: list[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    out = []
    for name, data in events:
        body = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {body}\n\n")
    return "".join(out).encode()


def anthropic_tools(calls: list[Call]) -> bytes:
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_t",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 20, "output_tokens": 1},
                },
            },
        )
    ]
    for i, (call_id, name, args) in enumerate(calls):
        start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse(events)


def anthropic_text(text: str, *, stop: str = "end_turn", pieces: int = 1) -> bytes:
    """A text reply; ``pieces`` deltas (a slow stream then shows text as it goes)."""
    size = max(1, -(-len(text) // pieces))
    deltas = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 30, "output_tokens": 1},
        },
    }
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    events: list[tuple[str | None, dict[str, Any] | str]] = [("message_start", start), ("content_block_start", block)]
    for delta in deltas:
        payload = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}}
        events.append(("content_block_delta", payload))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


def chat_tools(calls: list[Call]) -> bytes:
    tool_calls = [
        {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (call_id, name, args) in enumerate(calls)
    ]
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4.1"}
    return _sse(
        [
            (None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": tool_calls}}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            (None, {**chunk, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9}}),
            (None, "[DONE]"),
        ]
    )


def chat_text(text: str) -> bytes:
    chunk = {"id": "c2", "object": "chat.completion.chunk", "model": "gpt-4.1"}
    return _sse(
        [
            (None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            (None, {**chunk, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 5}}),
            (None, "[DONE]"),
        ]
    )


def responses_tools(calls: list[Call]) -> bytes:
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        ("response.created", {"type": "response.created", "response": {"id": "resp_t", "status": "in_progress"}})
    ]
    for i, (call_id, name, args) in enumerate(calls):
        item = {"id": f"fc_{i}", "type": "function_call", "call_id": call_id, "name": name, "arguments": ""}
        events.append(
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": i, "item": item})
        )
        events.append(
            (
                "response.function_call_arguments.delta",
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": i,
                    "item_id": f"fc_{i}",
                    "delta": json.dumps(args),
                },
            )
        )
        done = {**item, "arguments": json.dumps(args), "status": "completed"}
        events.append(
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": i, "item": done})
        )
    usage = {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29}
    events.append(
        (
            "response.completed",
            {"type": "response.completed", "response": {"id": "resp_t", "status": "completed", "usage": usage}},
        )
    )
    return _sse(events)


def responses_text(text: str) -> bytes:
    item = {"id": "msg_0", "type": "message", "role": "assistant", "content": []}
    usage = {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}
    done = {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
    return _sse(
        [
            ("response.created", {"type": "response.created", "response": {"id": "resp_x", "status": "in_progress"}}),
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "output_index": 0,
                    "item_id": "msg_0",
                    "content_index": 0,
                    "delta": text,
                },
            ),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": done}),
            (
                "response.completed",
                {"type": "response.completed", "response": {"id": "resp_x", "status": "completed", "usage": usage}},
            ),
        ]
    )


def gemini_tools(calls: list[Call]) -> bytes:
    parts = [{"functionCall": {"id": call_id, "name": name, "args": args}} for call_id, name, args in calls]
    usage = {"promptTokenCount": 20, "candidatesTokenCount": 9, "totalTokenCount": 29}
    return _sse(
        [
            (
                None,
                {
                    "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage,
                },
            )
        ]
    )


def gemini_text(text: str) -> bytes:
    usage = {"promptTokenCount": 30, "candidatesTokenCount": 5, "totalTokenCount": 35}
    return _sse(
        [
            (
                None,
                {
                    "candidates": [
                        {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
                    ],
                    "usageMetadata": usage,
                },
            )
        ]
    )


@dataclass(frozen=True)
class Family:
    """One wire API as the steering tests drive it."""

    name: str
    model_id: str
    env: dict[str, str]
    url_var: str
    tools: Any  # (calls) -> body
    text: Any  # (text) -> body

    def daemon_env(self, server: ReplayServer) -> dict[str, str]:
        return {**self.env, self.url_var: server.url}

    def enqueue_tools(self, server: ReplayServer, calls: list[Call]) -> None:
        server.enqueue(ScriptedResponse(body=self.tools(calls), headers={"content-type": "text/event-stream"}))

    def enqueue_text(self, server: ReplayServer, text: str) -> None:
        server.enqueue(ScriptedResponse(body=self.text(text), headers={"content-type": "text/event-stream"}))


FAMILIES = {
    "anthropic": Family(
        "anthropic", "anthropic/claude-sonnet-4-5", {"ANTHROPIC_API_KEY": "sk-ant-fake"}, "ANTHROPIC_BASE_URL",
        anthropic_tools, anthropic_text,
    ),
    "openai-chat": Family(
        "openai-chat", "openai/gpt-4.1", {"OPENAI_API_KEY": "sk-fake"}, "OPENAI_BASE_URL",
        chat_tools, chat_text,
    ),
    "openai-responses": Family(
        "openai-responses", "openai/gpt-5.1", {"OPENAI_API_KEY": "sk-fake"}, "OPENAI_BASE_URL",
        responses_tools, responses_text,
    ),
    "gemini": Family(
        "gemini", "gemini/gemini-2.5-flash", {"GEMINI_API_KEY": "AIza-fake"}, "GEMINI_BASE_URL",
        gemini_tools, gemini_text,
    ),
}  # fmt: skip


def user_turn_after_results(family: str, body: dict[str, Any]) -> list[Any]:
    """What follows the last model turn of a request body, in the provider's own terms: the tool
    results and user text in the order the provider reads them (each ``("result", call_id)`` or
    ``("text", text)``), and whether they sit in one user message (``"|"`` separates messages)."""
    out: list[Any] = []
    if family == "anthropic":
        messages = body["messages"]
        last_assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        for message in messages[last_assistant + 1 :]:
            if out:
                out.append("|")
            content = message["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for block in blocks:
                out.append(
                    ("result", block["tool_use_id"]) if block["type"] == "tool_result" else ("text", block["text"])
                )
    elif family == "openai-chat":
        messages = body["messages"]
        last_assistant = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        for message in messages[last_assistant + 1 :]:
            if out:
                out.append("|")
            if message["role"] == "tool":
                out.append(("result", message["tool_call_id"]))
            else:
                out.append(("text", message["content"]))
    elif family == "openai-responses":
        items = body["input"]
        last_call = max(i for i, item in enumerate(items) if item.get("type") == "function_call")
        for item in items[last_call + 1 :]:
            if out:
                out.append("|")
            if item.get("type") == "function_call_output":
                out.append(("result", item["call_id"]))
            else:
                assert item["role"] == "user", item
                out.append(("text", "\n".join(c["text"] for c in item["content"])))
    elif family == "gemini":
        contents = body["contents"]
        last_model = max(i for i, c in enumerate(contents) if c["role"] == "model")
        for content in contents[last_model + 1 :]:
            if out:
                out.append("|")
            for part in content["parts"]:
                if "functionResponse" in part:
                    out.append(("result", part["functionResponse"].get("id") or part["functionResponse"]["name"]))
                else:
                    out.append(("text", part["text"]))
    return out
