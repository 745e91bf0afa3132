"""The Chat Completions adapter (``POST {base_url}/chat/completions``) and its dialects.

Owns everything between a ``ProviderRequest`` and the normalized events for OpenAI's Chat
Completions API and the servers that speak it with extra fields: DeepSeek, GitHub
Copilot's proxy, OpenRouter, DashScope (Qwen) and any other compatible server (Ollama
``/v1``, vLLM, ...):

* the request body, with the resolved thinking fragment deep-merged in as given;
* turning stored history into ``messages``, including each dialect's reasoning round
  trip (DeepSeek ``reasoning_content`` on tool-call turns, Copilot ``reasoning_text`` +
  ``reasoning_opaque``, OpenRouter ``reasoning_details``), only ever to the provider and
  model that produced it;
* parsing the chunk stream, whatever field a server streams its thinking in.

The dialect (``chat_dialect``; its strategy is a ``ChatDialect`` of
``daemon.providers.openai_dialects``) only changes what we *send*. Parsing is the same for
all: every dialect field is understood wherever it shows up, so a misnamed provider still
streams correctly.

Wire reference: ``tests/fixtures/providers/WIRE-FORMATS.md`` §2 and §6.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import msgspec

from daemon.config.settings import ProviderConfig
from daemon.conversation import ChatMessage, Part
from daemon.providers.assembler import BlockAssembler
from daemon.providers.base import (
    BlockKind,
    ProviderEvent,
    ProviderRequest,
    Stop,
    StopKind,
    UsageUpdate,
    image_base64,
    replayable,
    sendable_image,
)
from daemon.providers.http import deep_merge
from daemon.providers.openai_common import (
    ExtraHeaders,
    OpenAIStyleProvider,
    decode_event,
    ended_early,
    replay_arguments,
    stream_error,
    tool_call_part,
)
from daemon.providers.openai_dialects import DIALECTS
from daemon.providers.usage import count, normalized_usage, reasoning_outside_output
from daemon.util.clock import new_id
from daemon.vendors.structured_output import OUTPUT_NAME, openai_strict
from daemon.vendors.table import chat_dialect_for
from protocol.objects import Usage

Dialect = str  # a name in openai_dialects.DIALECTS

_FINISH_REASONS: dict[str, StopKind] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Thinking text arrives in one of these, by server: DeepSeek/DashScope/old vLLM
# ``reasoning_content``, Ollama /v1, OpenRouter and new vLLM ``reasoning``, Copilot
# ``reasoning_text``. vLLM briefly sent the first two with the same text: take one.
_THINKING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")


def chat_dialect(config: ProviderConfig) -> Dialect:
    """The dialect of a provider: its own for a built-in one, else by host (``daemon.vendors.table``)."""
    return chat_dialect_for(config.name, config.base_url)


class OpenAIChatProvider(OpenAIStyleProvider):
    """Chat Completions for one configured provider; see the module docstring."""

    endpoint = "/chat/completions"

    def __init__(self, config: ProviderConfig, *, extra_headers: ExtraHeaders | None = None) -> None:
        super().__init__(config, extra_headers=extra_headers)
        self.dialect: Dialect = chat_dialect(config)

    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        dialect = DIALECTS[self.dialect]
        body: dict[str, Any] = {"model": request.model, "messages": build_messages(request, self.dialect)}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
            if dialect.parallel_tool_calls:
                body["parallel_tool_calls"] = True
        if request.max_output_tokens:
            body[dialect.max_tokens_field] = request.max_output_tokens
        if request.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": OUTPUT_NAME, "schema": request.output_schema, "strict": True},
            }
        body["stream"] = True
        body.update(copy.deepcopy(dialect.usage_request))  # the body is the request's own to change
        return deep_merge(body, request.thinking.request_params)

    def new_parser(self, request: ProviderRequest) -> ChatStreamParser:
        return ChatStreamParser(provider=self.name, request=request)

    def structured_output(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        # Only OpenAI's own Chat API is known to take strict json_schema; the compatible servers
        # (DeepSeek: json_object only) get the final_output tool.
        return openai_strict(schema) if DIALECTS[self.dialect].json_schema else None


# -- history ------------------------------------------------------------------------------


def build_messages(request: ProviderRequest, dialect: Dialect) -> list[dict[str, Any]]:
    """Chat ``messages`` for the stored history of ``request``.

    Tool results become one ``role: tool`` message each, in the order stored; user text
    parts are joined into one string (the one content form every compatible server takes).
    A message with images takes the array form instead (``text`` and ``image_url`` parts, in
    order, images as data URLs); the ``tool`` role is text-only, so images a tool returned
    follow its results in a user message that says where they came from.
    """
    out: list[dict[str, Any]] = []
    if request.system_prompt:
        out.append({"role": "system", "content": request.system_prompt})
    for message in request.messages:
        if message.role == "assistant":
            assistant = _assistant_message(message, request, dialect)
            if assistant is not None:
                out.append(assistant)
            continue
        for part in message.parts:
            if part.type == "tool_result":
                out.append({"role": "tool", "tool_call_id": part.call_id or "", "content": part.text})
        if message.role == "tool":
            images = [_image_url(p) for p in message.parts if sendable_image(p)]
            if images:
                out.append({"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_INTRO}, *images]})
            texts = [p.text for p in message.parts if p.type == "text" and p.text]
        elif any(sendable_image(p) for p in message.parts):
            content = [
                _image_url(p) if sendable_image(p) else {"type": "text", "text": p.text}
                for p in message.parts
                if sendable_image(p) or (p.type == "text" and p.text)
            ]
            out.append({"role": "user", "content": content})
            continue
        else:
            texts = [p.text for p in message.parts if p.type == "text" and p.text]
        if texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


# What precedes the images a tool returned (the ``tool`` role carries text only).
TOOL_IMAGES_INTRO = "Attached image(s) from tool result:"


def _image_url(part: Part) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{part.mime_type};base64,{image_base64(part)}"}}


def _assistant_message(message: ChatMessage, request: ProviderRequest, dialect: Dialect) -> dict[str, Any] | None:
    text = "".join(p.text for p in message.parts if p.type == "text")
    calls = [p for p in message.parts if p.type == "tool_call"]
    if not text and not calls:
        return None  # a reply cut off while thinking: nothing the API would accept
    # A turn of tool calls only has no content: null, as every dialect's own traffic sends
    # it (DeepSeek's too; it streams such turns with content null).
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = [
            {
                "id": p.call_id or "",
                "type": "function",
                "function": {
                    "name": p.name or "",
                    "arguments": replay_arguments(p.arguments, p.provider_data, replayable(p, request)),
                },
            }
            for p in calls
        ]
    # Thinking is replayed only to the model that produced it: another model cannot use
    # the opaque state, and pasting the text would put words in its mouth.
    thinking = [p for p in message.parts if p.type == "thinking" and replayable(p, request)]
    out.update(DIALECTS[dialect].replay_reasoning(thinking, calls))
    return out


# -- stream parsing -----------------------------------------------------------------------


@dataclass
class _ToolCall:
    call_id: str | None = None
    name: str | None = None
    block: int | None = None  # our block index, once started
    arguments: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # fragments seen before the name
    ended: bool = False


@dataclass
class ChatStreamParser:
    """Chat Completions chunks in, normalized events out. Pure: no I/O, raises ProviderError.

    One response is one assistant message however many chunks repeat ``role``. Thinking
    and text are one open block at a time (a switch closes the other); an empty string
    never opens a block. Tool calls are keyed by ``index`` (never by id: DashScope sends
    ``id: ""`` on continuations) and all close at ``finish_reason``. Opaque reasoning state
    (Copilot ``reasoning_opaque``, OpenRouter ``reasoning_details``) joins the open thinking
    block; arriving with no thinking block open, it gets an empty one of its own. Numbering
    and the block events are the shared ``BlockAssembler``'s.
    """

    provider: str
    request: ProviderRequest
    status: int = 200
    finished: bool = False
    _blocks: BlockAssembler = field(init=False)
    _opaque: str | None = None
    _details: list[dict[str, Any]] = field(default_factory=list)
    _tools: dict[Any, _ToolCall] = field(default_factory=dict)
    _finish_raw: str | None = None
    _refused: bool = False
    _usage: Usage | None = None

    def __post_init__(self) -> None:
        # Text is replayed as plain text, so its parts do not record who wrote them.
        self._blocks = BlockAssembler(self.request.provider, self.request.model, tag_text=False)

    def feed(self, name: str, data: str) -> list[ProviderEvent]:
        if data.strip() == "[DONE]":
            return self._done()
        payload = decode_event(self.provider, data)
        if payload is None:
            return []
        if payload.get("error"):
            error = payload["error"]
            raise stream_error(
                self.provider, error if isinstance(error, dict) else {"message": str(error)}, status=self.status
            )
        usage = _usage(payload.get("usage"))
        if usage is not None:  # the last non-zero one wins (Copilot sends zeros on every chunk)
            self._usage = usage
        events: list[ProviderEvent] = []
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta, dict):
                # Reasoning first: Copilot sends its opaque state in the same chunk as the
                # first text or a whole tool call, and it belongs to the thinking before them.
                events += self._reasoning(delta)
                events += self._content(delta)
                events += self._tool_calls(delta.get("tool_calls"))
            if choice.get("finish_reason"):
                self._finish_raw = str(choice["finish_reason"])
                events += self._close_all()
        return events

    def at_eof(self) -> list[ProviderEvent]:
        if self._finish_raw is not None:  # servers that skip [DONE] after finishing
            return self._done()
        raise ended_early(self.provider, "finish_reason or [DONE]")

    # -- deltas -------------------------------------------------------------------------

    def _reasoning(self, delta: dict[str, Any]) -> list[ProviderEvent]:
        text = next((v for k in _THINKING_FIELDS if isinstance(v := delta.get(k), str) and v), "")
        details = [d for d in delta.get("reasoning_details") or [] if isinstance(d, dict)]
        if not text and details:  # structured only: show its readable parts
            text = "".join(
                str(d.get("text") or d.get("summary") or "") for d in details if d.get("type") != "reasoning.encrypted"
            )
        opaque = delta.get("reasoning_opaque")
        opaque = opaque if isinstance(opaque, str) and opaque else None
        if not (text or details or opaque):
            return []
        events = self._open("thinking")
        if opaque is not None:
            self._opaque = opaque  # arrives once; should it repeat, the last is the whole
        _merge_details(self._details, details)
        return events + self._blocks.append("thinking", text)

    def _content(self, delta: dict[str, Any]) -> list[ProviderEvent]:
        text = delta.get("content")
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refused = True
            text = (text if isinstance(text, str) else "") + refusal
        if not isinstance(text, str) or not text:
            return []  # Copilot sends content "" on every chunk: that starts nothing
        return self._open("text") + self._blocks.append("text", text)

    def _tool_calls(self, raw: Any) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        for fragment in raw if isinstance(raw, list) else []:
            if not isinstance(fragment, dict):
                continue
            call = self._tools.setdefault(self._tool_key(fragment), _ToolCall())
            if call.ended:
                continue
            function = fragment.get("function") or {}
            if isinstance(fragment.get("id"), str) and fragment["id"] and call.call_id is None:
                call.call_id = fragment["id"]  # the first non-empty id; later ones may be ""
            if isinstance(function.get("name"), str) and function["name"] and call.name is None:
                call.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # a few servers send an object, not a string
                arguments = msgspec.json.encode(arguments).decode()
            if isinstance(arguments, str) and arguments:
                (call.arguments if call.block is not None else call.pending).append(arguments)
                if call.block is not None:
                    events += self._blocks.delta(call.block, arguments)
            # Start once named and identified; a server that never sends an id gets one
            # made up when the calls close.
            if call.block is None and call.name is not None and call.call_id is not None:
                events += self._start_tool(call)
        return events

    def _tool_key(self, fragment: dict[str, Any]) -> Any:
        if isinstance(fragment.get("index"), int):
            return fragment["index"]
        # No index (rare servers): a new id is a new call, anything else continues the last.
        call_id = fragment.get("id")
        if call_id and not any(c.call_id == call_id for c in self._tools.values()):
            return f"id:{call_id}"
        return next(reversed(self._tools), 0) if self._tools else 0

    def _start_tool(self, call: _ToolCall) -> list[ProviderEvent]:
        events = self._close_open()
        call.call_id = call.call_id or new_id("call")  # servers that omit ids
        call.block, started = self._blocks.start(call.call_id, call.name)
        events += started
        if call.pending:
            call.arguments, call.pending = call.pending, []
            events += self._blocks.delta(call.block, "".join(call.arguments))
        return events

    # -- blocks -------------------------------------------------------------------------

    def _open(self, kind: BlockKind) -> list[ProviderEvent]:
        if self._blocks.open_kind == kind:
            return []
        return self._close_open() + self._blocks.ensure_open(kind)

    def _close_open(self) -> list[ProviderEvent]:
        """Close the open thinking or text block; thinking takes the opaque state with it."""
        if self._blocks.open_kind != "thinking":
            return self._blocks.close()
        data: dict[str, Any] = {}
        if self._opaque is not None:
            data["reasoning_opaque"] = self._opaque
        if self._details:
            data["reasoning_details"] = self._details
        self._opaque, self._details = None, []
        return self._blocks.close(data)

    def _close_all(self) -> list[ProviderEvent]:
        events = self._close_open()
        for call in self._tools.values():
            if call.ended:
                continue
            if call.block is None:  # never got a name: still a call the model made
                events += self._start_tool(call)
            assert call.block is not None
            part = tool_call_part(self.request, call.call_id, call.name, "".join(call.arguments))
            events += self._blocks.end(call.block, part)
            call.ended = True  # a repeated finish_reason must not end it twice
        return events

    def _done(self) -> list[ProviderEvent]:
        events = self._close_all()
        if self._usage is not None:
            events.append(UsageUpdate(usage=self._usage))
        raw = self._finish_raw
        reason: StopKind = _FINISH_REASONS.get(raw or "", "end_turn")
        if self._refused and reason == "end_turn":
            reason = "refusal"
        elif self._tools and reason == "end_turn":
            reason = "tool_use"  # the response asked for tools, whatever else it says
        events.append(Stop(reason=reason, raw=raw))
        self.finished = True
        return events


def _usage(raw: Any) -> Usage | None:
    """Normalized usage, or None when absent or all zero (Copilot's placeholder chunks)."""
    if not isinstance(raw, dict):
        return None
    if not any(isinstance(raw.get(k), int) and raw[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")):
        return None
    prompt_details = found if isinstance(found := raw.get("prompt_tokens_details"), dict) else {}
    output_details = raw.get("completion_tokens_details")
    output_details = output_details if isinstance(output_details, dict) else {}
    reasoning = output_details.get("reasoning_tokens")
    if count(reasoning) is None:
        reasoning = raw.get("reasoning_tokens")  # Copilot puts it at the top level
    cached = prompt_details.get("cached_tokens")
    if count(cached) is None:
        cached = raw.get("prompt_cache_hit_tokens")  # DeepSeek's own field
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    # prompt_tokens includes cached tokens everywhere; completion_tokens includes reasoning
    # except where the server's own total says otherwise (Copilot's Gemini models).
    return normalized_usage(
        input_tokens=prompt,
        output_tokens=completion,
        reasoning_tokens=reasoning,
        cache_read_tokens=cached,
        cache_write_tokens=prompt_details.get("cache_write_tokens"),  # OpenRouter
        output_excludes_reasoning=reasoning_outside_output(raw.get("total_tokens"), prompt, completion, reasoning),
    )


def _merge_details(merged: list[dict[str, Any]], fragments: list[dict[str, Any]]) -> None:
    """Fold streamed OpenRouter ``reasoning_details`` into complete entries, by ``index``."""
    for fragment in fragments:
        index = fragment.get("index")
        target = next((d for d in merged if index is not None and d.get("index") == index), None)
        if target is None:
            merged.append(dict(fragment))
            continue
        for key, value in fragment.items():
            if key in ("text", "summary", "data", "signature") and isinstance(value, str):
                target[key] = (target.get(key) or "") + value
            elif value is not None and target.get(key) is None:
                target[key] = value


__all__ = ["ChatStreamParser", "Dialect", "OpenAIChatProvider", "build_messages", "chat_dialect"]
