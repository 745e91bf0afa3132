"""A model that reads many big files in one agentic turn, on a local OpenAI-compatible chat server.

``FileReaderChat`` answers ``POST /v1/chat/completions`` (a ``ReplayServer`` route) the way a real
server with a ``window``-token context does:

- it counts a request's prompt tokens from its size at ``chars_per_token`` characters a token
  (3 by default: a real tokenizer counts source code denser than ponder's estimate does) and
  reports them as ``usage.prompt_tokens``; a request over the window gets OpenAI's real
  context-overflow 400 ("This model's maximum context length is N tokens...");
- a summarization request (the summarizer's system prompt) gets a short structured summary,
  unless ``summary_text`` says otherwise;
- a prompt asks for ``read_file`` of ``files[0]`` (or of every file at once when ``parallel``);
  each answered tool result asks for the next file, and once every file was read it answers
  with text. Which file comes next is the server's own count of the calls it made, so a
  compaction inside the turn does not confuse it.

Every request is recorded (``answers``) with its prompt tokens and kind.
"""

import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from daemon.context.summary import SYSTEM_PROMPT as SUMMARIZER_SYSTEM_PROMPT
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse
from tests.support.small_window import chat_chunk, sse_body


@dataclass
class Answered:
    body: dict[str, Any]
    prompt_tokens: int
    kind: str  # "summary" | "tool_call" | "text" | "overflow"


@dataclass
class FileReaderChat:
    files: list[str]
    window: int = 200_000
    parallel: bool = False
    chars_per_token: float = 3.0
    summary_text: str = (
        "## Goal\nRead the files the user named and report on them.\n\n## Progress\n### Done\n"
        "- [x] Read the files so far.\n\n## Next steps\n1. Read the remaining files.\n"
    )
    reply_delay_s: float = 0.0  # hold each answer after the first this long before its headers
    answers: list[Answered] = field(default_factory=list)
    reads_issued: int = 0  # read_file calls asked for so far (the model's own plan)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, server: ReplayServer) -> None:
        server.route("POST", "/v1/chat/completions", self.answer)

    def of_kind(self, kind: str) -> list[Answered]:
        return [a for a in self.answers if a.kind == kind]

    def tokens(self, body: dict[str, Any]) -> int:
        size = len(json.dumps(body.get("messages", []), ensure_ascii=False)) + len(json.dumps(body.get("tools", [])))
        return math.ceil(size / self.chars_per_token)

    def answer(self, request: RecordedRequest) -> ScriptedResponse:
        body = request.json()
        tokens = self.tokens(body)
        with self._lock:
            if tokens > self.window:
                self.answers.append(Answered(body, tokens, "overflow"))
                return self._overflow(tokens)
            messages = body["messages"]
            if (
                messages
                and messages[0].get("role") == "system"
                and messages[0].get("content") == SUMMARIZER_SYSTEM_PROMPT
            ):
                return self._reply(body, tokens, "summary", [{"role": "assistant", "content": self.summary_text}],
                                   "stop", 200)  # fmt: skip
            if self.reads_issued < len(self.files):
                batch = self.files[self.reads_issued :] if self.parallel else [self.files[self.reads_issued]]
                calls = [
                    {"index": i, "id": f"call_{self.reads_issued + i}", "type": "function",
                     "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}
                    for i, path in enumerate(batch)
                ]  # fmt: skip
                self.reads_issued += len(batch)
                return self._reply(body, tokens, "tool_call", [{"role": "assistant", "tool_calls": calls}],
                                   "tool_calls", 30 * len(batch))  # fmt: skip
            text = f"I read {self.reads_issued} files; each defines its own accumulator."
            return self._reply(body, tokens, "text", [{"role": "assistant", "content": text}], "stop", 20)

    def _overflow(self, tokens: int) -> ScriptedResponse:
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

    def _reply(
        self, body: dict[str, Any], tokens: int, kind: str, deltas: list[dict[str, Any]], finish: str, out: int
    ) -> ScriptedResponse:
        self.answers.append(Answered(body, tokens, kind))
        usage = {"prompt_tokens": tokens, "completion_tokens": out, "total_tokens": tokens + out}
        chunks = [chat_chunk(delta, model="m") for delta in deltas]
        chunks += [chat_chunk(finish=finish, model="m"), chat_chunk(usage=usage, model="m")]
        delay = self.reply_delay_s if len(self.answers) > 1 else 0.0
        return ScriptedResponse(
            headers={"content-type": "text/event-stream"}, body=sse_body(chunks), headers_delay_s=delay
        )


def big_files(root: Any, count: int = 15, size: int = 40_000) -> list[str]:
    """``count`` source files of about ``size`` bytes each under ``root/src``; their relative paths."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(count):
        lines, written = [f"def module_{n}(items):\n", "    total = 0\n"], 0
        i = 0
        while written < size - 40:
            line = f"    total += items[{i}] * {n}  # step {i} of module {n}\n"
            lines.append(line)
            written += len(line)
            i += 1
        lines.append("    return total\n")
        (root / "src" / f"m{n:02d}.py").write_text("".join(lines))
        paths.append(f"src/m{n:02d}.py")
    return paths


def reader_config(base_url: str, *, windows: dict[str, int | None], extra: str = "") -> str:
    """config.toml declaring ``local/<name>`` models of the given windows (None: not declared) on the local server."""
    models = "".join(
        f'\n[[providers.local.models]]\nmodel = "{name}"\nmax_output_tokens = 2048\n'
        + (f"context_window = {window}\n" if window is not None else "")
        for name, window in windows.items()
    )
    return f'[providers.local]\napi = "openai-chat"\nbase_url = "{base_url}/v1"\n{models}\n{extra}\n'
