"""The OpenAI Responses API adapter (``POST {base_url}/responses``), stateless.

Owns everything between a ``ProviderRequest`` and the normalized events for the
Responses API:

* the request body: ``store: false`` (nothing kept server-side; the store is ours), the
  system prompt as ``instructions``, function tools, ``max_output_tokens``, the resolved
  thinking fragment (``reasoning: {effort, summary}``) deep-merged in as given, and then
  ``include: ["reasoning.encrypted_content"]`` so reasoning can be carried across turns;
* turning stored history into ``input`` items. A reasoning item (id, summary and
  ``encrypted_content``) is replayed to the model that produced it, right in front of the
  item it led to (a message or a function_call), as the API requires; a reasoning item
  that led to nothing (a reply cut off while reasoning) is dropped, since the API rejects
  one without its following item. An assistant message goes back with the ``phase`` it
  came with (``commentary`` for a preamble, ``final_answer``; gpt-5.3-codex and later),
  to the same model only: without it a preamble reads as a final answer. Function calls
  go back without their ``fc_`` item id and pair with ``function_call_output`` items by
  ``call_id``;
* parsing the event stream into normalized events.

Thinking blocks: **one block per reasoning item**; its summary parts are joined with a
blank line (``\\n\\n``), streamed as they come (the separator is sent as a delta when the
second part starts), so the block text equals what the deltas spelled. A block opens at
its first visible text, or at ``output_item.done`` when the summary is empty, never at
``output_item.added``: until something is shown the agent may still retry a failed
response. The item stored is the one from ``response.output_item.done``: the ``.added``
copy's ``encrypted_content`` may be incomplete.

Wire reference: ``tests/fixtures/providers/WIRE-FORMATS.md`` §3.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from daemon.conversation import ChatMessage, Part
from daemon.errors import ProviderError
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
    OpenAIStyleProvider,
    decode_event,
    ended_early,
    replay_arguments,
    stream_error,
    tool_call_part,
)
from daemon.providers.usage import normalized_usage
from daemon.vendors.structured_output import OUTPUT_NAME, openai_strict
from protocol.objects import Usage

log = logging.getLogger("ponder.providers.openai_responses")

SUMMARY_SEPARATOR = "\n\n"
_INCOMPLETE_REASONS: dict[str, StopKind] = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}
# JSON Schema keywords outside OpenAI's strict-mode subset.
_NOT_STRICT = frozenset(
    {"allOf", "oneOf", "not", "if", "then", "else", "patternProperties", "dependentRequired", "dependentSchemas"}
)


class OpenAIResponsesProvider(OpenAIStyleProvider):
    """The Responses API for one configured provider; see the module docstring."""

    endpoint = "/responses"

    def build_body(self, request: ProviderRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "input": build_input(request)}
        if request.system_prompt:
            body["instructions"] = request.system_prompt
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    # The Responses API treats an omitted ``strict`` as true and then
                    # rejects schemas outside its subset: say which one each tool is.
                    "strict": strict_compatible(t.input_schema),
                }
                for t in request.tools
            ]
        if request.max_output_tokens:
            body["max_output_tokens"] = request.max_output_tokens
        if request.output_schema is not None:
            body["text"] = {
                "format": {"type": "json_schema", "name": OUTPUT_NAME, "schema": request.output_schema, "strict": True}
            }
        body = deep_merge(body, request.thinking.request_params)
        if "reasoning" in body:
            # Only reasoning models have encrypted reasoning; others reject the include.
            body["include"] = ["reasoning.encrypted_content"]
        body["store"] = False
        body["stream"] = True
        return body

    def new_parser(self, request: ProviderRequest) -> ResponsesStreamParser:
        return ResponsesStreamParser(provider=self.name, request=request)

    def structured_output(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        return openai_strict(schema)


def strict_compatible(schema: Any) -> bool:
    """Whether a tool's JSON Schema meets OpenAI strict mode: every object closed
    (``additionalProperties: false``) with every property required, no unsupported keywords."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return False
    return _strict_node(schema)


def _strict_node(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict_node(n) for n in node)
    if not isinstance(node, dict):
        return True
    if _NOT_STRICT & node.keys():
        return False
    if node.get("type") == "object" or "properties" in node:
        properties = node.get("properties") or {}
        if node.get("additionalProperties") is not False or set(node.get("required") or []) != set(properties):
            return False
    children: list[Any] = list((node.get("properties") or {}).values())
    children += [node[k] for k in ("items", "anyOf") if k in node]
    for defs in ("$defs", "definitions"):
        children += list((node.get(defs) or {}).values())
    return all(_strict_node(c) for c in children)


# -- history ------------------------------------------------------------------------------


def build_input(request: ProviderRequest) -> list[dict[str, Any]]:
    """Responses ``input`` items for the stored history of ``request``."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "assistant":
            items += _assistant_items(message, request)
            continue
        images = [p for p in message.parts if sendable_image(p) and p.call_id]
        for part in message.parts:
            if part.type == "tool_result":
                output: str | list[dict[str, Any]] = part.text
                mine = [_input_image(p) for p in images if p.call_id == part.call_id]
                if mine:  # an image a tool returned: the output takes the content-list form
                    output = [*([{"type": "input_text", "text": part.text}] if part.text else []), *mine]
                items.append({"type": "function_call_output", "call_id": part.call_id or "", "output": output})
        content = [
            _input_image(p) if p.type == "image" else {"type": "input_text", "text": p.text}
            for p in message.parts
            if (p.type == "text" and p.text) or (sendable_image(p) and not p.call_id)
        ]
        if content:
            items.append({"role": "user", "content": content})
    return items


def _input_image(part: Part) -> dict[str, Any]:
    return {"type": "input_image", "image_url": f"data:{part.mime_type};base64,{image_base64(part)}", "detail": "auto"}


def _assistant_items(message: ChatMessage, request: ProviderRequest) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    reasoning: list[dict[str, Any]] = []  # waiting for the item they led to
    for part in message.parts:
        if part.type == "thinking":
            item = _reasoning_item(part, request)
            if item is not None:
                reasoning.append(item)
            continue
        if part.type == "text" and part.text:
            item = {"role": "assistant", "content": [{"type": "output_text", "text": part.text}]}
            phase = (part.provider_data or {}).get("phase") if replayable(part, request) else None
            if isinstance(phase, str) and phase:
                item["phase"] = phase  # commentary vs final_answer: the model reads its own preambles by it
        elif part.type == "tool_call":
            item = {
                "type": "function_call",
                "call_id": part.call_id or "",
                "name": part.name or "",
                "arguments": replay_arguments(part.arguments, part.provider_data, replayable(part, request)),
            }
        else:
            continue
        items += reasoning
        reasoning = []
        items.append(item)
    return items


def _reasoning_item(part: Part, request: ProviderRequest) -> dict[str, Any] | None:
    # Another model cannot decrypt it; without encrypted_content a store=false request
    # cannot resolve the id; either way the item would only make the request fail.
    if not replayable(part, request):
        return None
    data = part.provider_data or {}
    if not data.get("id") or not data.get("encrypted_content"):
        return None
    return {
        "type": "reasoning",
        "id": data["id"],
        "encrypted_content": data["encrypted_content"],
        "summary": data.get("summary") or [],
    }


# -- stream parsing -----------------------------------------------------------------------


@dataclass
class _Item:
    kind: BlockKind  # reasoning items are "thinking", messages "text", function calls "tool_call"
    item_id: str | None = None
    block: int | None = None
    text: list[str] = field(default_factory=list)  # streamed thinking/text, or argument fragments
    summary_index: int | None = None
    call_id: str | None = None
    name: str | None = None
    phase: str | None = None  # a message's "commentary" | "final_answer"
    ended: bool = False


# The output items that become blocks, by their type; others are not modelled.
_ITEM_KINDS: dict[str, BlockKind] = {"reasoning": "thinking", "message": "text", "function_call": "tool_call"}


@dataclass
class ResponsesStreamParser:
    """Responses API events in, normalized events out. Pure: no I/O, raises ProviderError."""

    provider: str
    request: ProviderRequest
    status: int = 200
    finished: bool = False
    _items: dict[int, _Item] = field(default_factory=dict)  # by output_index
    _blocks: BlockAssembler = field(init=False)
    _refused: bool = False

    def __post_init__(self) -> None:
        self._blocks = BlockAssembler(self.request.provider, self.request.model)

    def feed(self, name: str, data: str) -> list[ProviderEvent]:
        payload = decode_event(self.provider, data)
        if payload is None:
            return []
        kind = str(payload.get("type") or name)
        handler = _HANDLERS.get(kind)
        if handler is None:  # other families are not ours, and new types appear
            log.debug("ignoring a %s stream event of type %r", self.provider, kind)
            return []
        try:
            return handler(self, payload)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # A field missing or of the wrong type (``"item": "x"``, ``"output_index": null``).
            raise ProviderError(
                f"{self.provider} sent a malformed {kind} event.", provider=self.provider, kind="invalid_event"
            ) from exc

    def at_eof(self) -> list[ProviderEvent]:
        raise ended_early(self.provider, "response.completed")

    # -- items --------------------------------------------------------------------------

    def _on_item_added(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        raw = payload.get("item") or {}
        item = self._item_for(payload, raw.get("type"))
        if item is None:
            return []
        item.item_id = raw.get("id") or item.item_id
        if item.kind == "text" and isinstance(raw.get("phase"), str):
            item.phase = raw["phase"]
        if item.kind == "tool_call":
            item.call_id, item.name = raw.get("call_id") or item.call_id, raw.get("name") or item.name
            return self._start(item)  # a function call is output the moment it exists
        return []

    def _on_summary_delta(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        item = self._item_for(payload, "reasoning")
        delta = payload.get("delta")
        if item is None or item.kind != "thinking" or not isinstance(delta, str) or not delta:
            return []
        index = payload.get("summary_index", 0)
        if item.summary_index is not None and index != item.summary_index and item.text:
            delta = SUMMARY_SEPARATOR + delta
        item.summary_index = index
        return self._append(item, delta)

    def _on_reasoning_text_delta(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        # Raw reasoning text: only models (and compatible servers) that expose it send it.
        item = self._item_for(payload, "reasoning")
        delta = payload.get("delta")
        if item is None or item.kind != "thinking" or not isinstance(delta, str) or not delta:
            return []
        return self._append(item, delta)

    def _on_text_delta(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        if payload.get("type") == "response.refusal.delta":
            self._refused = True
        item = self._item_for(payload, "message")
        delta = payload.get("delta")
        if item is None or item.kind != "text" or not isinstance(delta, str) or not delta:
            return []
        return self._append(item, delta)

    def _on_arguments_delta(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        item = self._item_for(payload, "function_call")
        delta = payload.get("delta")
        if item is None or item.kind != "tool_call" or not isinstance(delta, str) or not delta:
            return []
        return self._append(item, delta)

    def _on_item_done(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        raw = payload.get("item") or {}
        item = self._item_for(payload, raw.get("type"))
        if item is None or item.ended:
            return []
        return self._end(item, raw)

    # -- terminal events ------------------------------------------------------------------

    def _on_completed(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        response = payload.get("response") or {}
        stop: StopKind = "end_turn"
        if self._refused:
            stop = "refusal"
        elif any(i.kind == "tool_call" for i in self._items.values()):
            stop = "tool_use"  # status is "completed" either way
        return self._finish(response, stop, str(response.get("status") or "completed"))

    def _on_incomplete(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        response = payload.get("response") or {}
        reason = str((response.get("incomplete_details") or {}).get("reason") or "")
        return self._finish(response, _INCOMPLETE_REASONS.get(reason, "end_turn"), f"incomplete:{reason}")

    def _on_failed(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        error = (payload.get("response") or {}).get("error") or {}
        raise stream_error(
            self.provider, error if isinstance(error, dict) else {"message": str(error)}, status=self.status
        )

    def _on_error(self, payload: dict[str, Any]) -> list[ProviderEvent]:
        # Recorded streams nest the fields under "error"; the SDK type has them top-level,
        # where "type" is the event's own ("error") and says nothing about the failure.
        nested = payload.get("error")
        error = nested if isinstance(nested, dict) else {k: payload.get(k) for k in ("code", "message")}
        raise stream_error(self.provider, {k: error.get(k) for k in ("type", "code", "message")}, status=self.status)

    def _finish(self, response: dict[str, Any], stop: StopKind, raw: str) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        for item in self._items.values():  # items the server never marked done
            if not item.ended:
                events += self._end(item, {})
        usage = _usage(response.get("usage"))
        if usage is not None:
            events.append(UsageUpdate(usage=usage))
        events.append(Stop(reason=stop, raw=raw))
        self.finished = True
        return events

    # -- blocks ---------------------------------------------------------------------------

    def _item_for(self, payload: dict[str, Any], item_type: Any) -> _Item | None:
        index = payload.get("output_index")
        if not isinstance(index, int):
            item_id = payload.get("item_id")
            return next((i for i in self._items.values() if item_id and i.item_id == item_id), None)
        item = self._items.get(index)
        if item is None:
            kind = _ITEM_KINDS.get(str(item_type))
            if kind is None:
                return None
            item = self._items[index] = _Item(kind=kind, item_id=payload.get("item_id"))
        return item

    def _start(self, item: _Item) -> list[ProviderEvent]:
        if item.block is not None:
            return []
        item.block, events = self._blocks.start(item.call_id, item.name, item.kind)
        return events

    def _append(self, item: _Item, delta: str) -> list[ProviderEvent]:
        if item.ended:
            return []
        events = self._start(item)
        item.text.append(delta)
        assert item.block is not None
        return events + self._blocks.delta(item.block, delta)

    def _end(self, item: _Item, raw: dict[str, Any]) -> list[ProviderEvent]:
        """Close ``item`` with its final copy ``raw`` (``{}`` when the server sent none)."""
        item.ended = True
        streamed = "".join(item.text)
        if item.kind == "thinking":
            summary = [s for s in raw.get("summary") or [] if isinstance(s, dict)]
            final = SUMMARY_SEPARATOR.join(str(s.get("text") or "") for s in summary) if summary else streamed
            data = {k: raw[k] for k in ("id", "encrypted_content") if raw.get(k)}
            if data:
                data["summary"] = summary
            events = self._catch_up(item, streamed, final, show=bool(final or data))
            part = Part(
                type="thinking",
                text=final,
                provider=self.request.provider,
                model=self.request.model,
                provider_data=data or None,
            )
        elif item.kind == "text":
            pieces = [c.get("text") or c.get("refusal") or "" for c in raw.get("content") or [] if isinstance(c, dict)]
            final = "".join(str(p) for p in pieces) if pieces else streamed
            events = self._catch_up(item, streamed, final, show=bool(final))
            phase = raw.get("phase") if isinstance(raw.get("phase"), str) else item.phase
            part = Part(
                type="text",
                text=final,
                provider=self.request.provider,
                model=self.request.model,
                provider_data={"phase": phase} if phase else None,
            )
        else:
            item.call_id = raw.get("call_id") or item.call_id
            item.name = raw.get("name") or item.name
            final = raw["arguments"] if isinstance(raw.get("arguments"), str) else streamed
            events = self._catch_up(item, streamed, final, show=True)
            # the item id, for store=true item references
            extra = {"item_id": item.item_id} if item.item_id else {}
            part = tool_call_part(self.request, item.call_id, item.name, final, **extra)
        if item.block is None:
            return events  # nothing to show and nothing to keep
        return [*events, *self._blocks.end(item.block, part)]

    def _catch_up(self, item: _Item, streamed: str, final: str, *, show: bool) -> list[ProviderEvent]:
        """Start the block if it should exist, and send what the deltas did not spell yet,
        so that a client adding up deltas ends with the final text."""
        events = self._start(item) if show else []
        if item.block is not None:
            events += self._blocks.catch_up(item.block, streamed, final)
        return events


_HANDLERS = {
    "response.output_item.added": ResponsesStreamParser._on_item_added,
    "response.output_item.done": ResponsesStreamParser._on_item_done,
    "response.reasoning_summary_text.delta": ResponsesStreamParser._on_summary_delta,
    "response.reasoning_text.delta": ResponsesStreamParser._on_reasoning_text_delta,
    "response.output_text.delta": ResponsesStreamParser._on_text_delta,
    "response.refusal.delta": ResponsesStreamParser._on_text_delta,
    "response.function_call_arguments.delta": ResponsesStreamParser._on_arguments_delta,
    "response.completed": ResponsesStreamParser._on_completed,
    "response.incomplete": ResponsesStreamParser._on_incomplete,
    "response.failed": ResponsesStreamParser._on_failed,
    "error": ResponsesStreamParser._on_error,
}


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    input_details = found if isinstance(found := raw.get("input_tokens_details"), dict) else {}
    output_details = found if isinstance(found := raw.get("output_tokens_details"), dict) else {}
    # input_tokens includes cached and cache-written tokens, output_tokens includes reasoning.
    return normalized_usage(
        input_tokens=raw.get("input_tokens"),
        output_tokens=raw.get("output_tokens"),
        reasoning_tokens=output_details.get("reasoning_tokens"),
        cache_read_tokens=input_details.get("cached_tokens"),
        cache_write_tokens=input_details.get("cache_write_tokens"),
    )


__all__ = ["OpenAIResponsesProvider", "ResponsesStreamParser", "build_input", "strict_compatible"]
