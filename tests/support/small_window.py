"""A small-window model on a local OpenAI-compatible chat server, for the long-session tests.

``SmallWindowChat`` answers ``POST /v1/chat/completions`` (a ``ReplayServer`` route) the way a
real server with an ``window``-token context does:

- it counts the request's prompt tokens from its size (the JSON of messages and tools, 4
  characters a token; a real tokenizer is within a small factor) and reports them as
  ``usage.prompt_tokens``;
- a request over the window gets OpenAI's real context-overflow 400
  (``context_length_exceeded``, "This model's maximum context length is ...");
- a summarization request (the summarizer's system prompt) gets a structured summary that
  lists every module the conversation (and the previous summary) mentions;
- otherwise it asks for ``read_file`` of the module the last user message names, and once the
  result is in, answers with text.

Every request is recorded (``requests``) with its prompt tokens, so a test can assert on bodies.
"""

import json
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from daemon.context.summary import SYSTEM_PROMPT as SUMMARIZER_SYSTEM_PROMPT
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse

MODULE = re.compile(r"module (\d+)")


def prompt_tokens(body: dict[str, Any]) -> int:
    return math.ceil(len(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))) / 4)


def sse_body(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


def chat_chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: Any = None, model: str = "small"
) -> dict[str, Any]:
    """One Chat Completions stream chunk: a delta, a finish reason, or the usage."""
    choices = [] if delta is None and finish is None else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return {"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": choices, "usage": usage}


@dataclass
class Answered:
    body: dict[str, Any]
    prompt_tokens: int
    kind: str  # "summary" | "tool_call" | "text" | "overflow"
    completion_tokens: int = 0


@dataclass
class SmallWindowChat:
    window: int = 8_000
    answers: list[Answered] = field(default_factory=list)
    overflow_next: int = 0  # answer this many more requests with the overflow 400 whatever their size
    summary_delay_s: float = 0.0  # hold each summary this long before its headers (a slow summarizer)
    summary_rate_limited: int = 0  # answer this many more summary requests with a 429 (retry-after: 0)
    summary_requested: threading.Event = field(default_factory=threading.Event)  # set at each summary request
    reply_delay_s: float = 0.0  # hold each answer that is not a summary this long before its headers
    reply_requested: threading.Event = field(default_factory=threading.Event)  # set at each other request
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, server: ReplayServer) -> None:
        server.route("POST", "/v1/chat/completions", self.answer)

    def of_kind(self, kind: str) -> list[Answered]:
        return [a for a in self.answers if a.kind == kind]

    def answer(self, request: RecordedRequest) -> ScriptedResponse:
        body = request.json()
        tokens = prompt_tokens(body)
        with self._lock:
            forced = self.overflow_next > 0
            self.overflow_next -= forced
        if tokens > self.window or forced:
            self.answers.append(Answered(body, tokens, "overflow"))
            error = {
                "error": {
                    "message": f"This model's maximum context length is {self.window} tokens. However, your messages "
                    f"resulted in {tokens} tokens. Please reduce the length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
            return ScriptedResponse(
                status=400, headers={"content-type": "application/json"}, body=json.dumps(error).encode()
            )
        messages = body["messages"]
        if messages and messages[0].get("role") == "system" and messages[0].get("content") == SUMMARIZER_SYSTEM_PROMPT:
            self.summary_requested.set()
            with self._lock:
                limited = self.summary_rate_limited > 0
                self.summary_rate_limited -= limited
            if limited:
                self.answers.append(Answered(body, tokens, "rate_limited"))
                error = {
                    "error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit"}
                }
                return ScriptedResponse(status=429, headers={"content-type": "application/json", "retry-after": "0"},
                                        body=json.dumps(error).encode())  # fmt: skip
            answer = self._text(body, tokens, "summary", self._summary(json.dumps(messages)))
            answer.headers_delay_s = self.summary_delay_s
            return answer
        last = messages[-1]
        if last["role"] == "user":
            modules = MODULE.findall(str(last.get("content")))
            module = modules[-1] if modules else "0"
            arguments = json.dumps({"path": f"src/m{module}.py"})
            call = {"index": 0, "id": f"call_{len(self.answers)}", "type": "function",
                    "function": {"name": "read_file", "arguments": arguments}}  # fmt: skip
            return self._reply(
                body, tokens, "tool_call", [{"role": "assistant", "tool_calls": [call]}], "tool_calls", 30
            )
        return self._text(body, tokens, "text", "The module is fixed: the loop now stops at the last item.")

    def _summary(self, text: str) -> str:
        modules = sorted({int(n) for n in MODULE.findall(text)})
        done = "".join(f"- [x] Fixed module {n} (src/m{n}.py).\n" for n in modules)
        return (
            "## Goal\nFix every module the user names.\n\n## Constraints and preferences\n- Keep the fixes small.\n\n"
            f"## Progress\n### Done\n{done}### In progress\n- [ ] The next module.\n\n"
            "## Next steps\n1. Read the next module and fix it.\n"
        )

    def _text(self, body: dict[str, Any], tokens: int, kind: str, text: str) -> ScriptedResponse:
        return self._reply(
            body, tokens, kind, [{"role": "assistant", "content": text}], "stop", math.ceil(len(text) / 4)
        )

    def _reply(
        self, body: dict[str, Any], tokens: int, kind: str, deltas: list[dict[str, Any]], finish: str, out: int
    ) -> ScriptedResponse:
        self.answers.append(Answered(body, tokens, kind, out))
        usage = {"prompt_tokens": tokens, "completion_tokens": out, "total_tokens": tokens + out}
        chunks = [chat_chunk(delta) for delta in deltas] + [chat_chunk(finish=finish), chat_chunk(usage=usage)]
        delay = self.reply_delay_s if kind != "summary" else 0.0
        if kind != "summary":
            self.reply_requested.set()
        return ScriptedResponse(
            headers={"content-type": "text/event-stream"}, body=sse_body(chunks), headers_delay_s=delay
        )


def small_window_config(base_url: str, *, window: int = 8_000, auto: bool = True, extra: str = "") -> str:
    """config.toml declaring ``local/small`` (an ``window``-token model) on the local server."""
    return f"""
[providers.local]
api = "openai-chat"
base_url = "{base_url}/v1"

[[providers.local.models]]
model = "small"
context_window = {window}
max_output_tokens = 2048

[compaction]
auto = {"true" if auto else "false"}
{extra}
"""
