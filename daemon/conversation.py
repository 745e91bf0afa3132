"""The stored shape of a conversation: messages made of ordered parts, with round-trip data.

A ``Part`` is a wire content block plus what providers need to continue a conversation
(signatures, redacted payloads, encrypted reasoning, item ids, thought signatures). That
data is opaque to everything but the adapter that produced it: it carries the provider and
model it belongs to and is replayed only to the same ones. The wire never sees it.

Prompt content (PROTOCOL.md "Prompt content") is parts too: an ``image`` names its stored
attachment (``attachment_id``; the bytes live once in the store, by content hash), a
``resource`` carries a file's text as admitted, a ``resource_link`` only its URI. ``data``
holds an image's bytes only in transit (admission to the store, the store to a request):
it is never kept in a session's history nor shown on the wire.
"""

from typing import Any, Literal

import msgspec

from protocol.objects import (
    Block,
    ImageBlock,
    Message,
    MessageOrigin,
    MessageStopReason,
    ResourceBlock,
    ResourceLinkBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
)

PartType = Literal["text", "thinking", "tool_call", "tool_result", "image", "resource", "resource_link"]
Role = Literal["user", "assistant", "tool"]
MessageStatus = Literal["complete", "interrupted", "error"]


class Part(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    type: PartType
    text: str = ""  # text, thinking text, or a tool result's text
    redacted: bool = False
    call_id: str | None = None
    name: str | None = None
    arguments: dict[str, Any] | None = None
    is_error: bool = False
    # Round-trip data. NULL (None) when absent or incomplete, never "".
    provider: str | None = None
    model: str | None = None
    signature: str | None = None
    provider_data: dict[str, Any] | None = None
    # Prompt content: an image's stored attachment and what it is, a resource's URI.
    attachment_id: str | None = None
    mime_type: str | None = None
    uri: str | None = None
    size: int | None = None  # an image's stored bytes
    width: int | None = None
    height: int | None = None
    truncated: bool = False  # a resource's text was cut
    omitted: str | None = None  # why an image is sent only as a note from now on (a provider refused it)
    data: bytes | None = None  # in transit only: never stored in the part, never on the wire

    def to_block(self) -> Block:
        # The common kinds first: a resume turns every part of a history into a block.
        if self.type == "text":
            return TextBlock(text=self.text)
        if self.type == "thinking":
            return ThinkingBlock(text=self.text, redacted=self.redacted)
        if self.type == "image":
            return ImageBlock(
                attachment_id=self.attachment_id or "",
                mime_type=self.mime_type or "",
                bytes=self.size or 0,
                width=self.width or 0,
                height=self.height or 0,
                name=self.name,
                call_id=self.call_id,
                omitted_reason=self.omitted,
            )
        if self.type == "resource":
            return ResourceBlock(uri=self.uri or "", mime_type=self.mime_type, text=self.text, truncated=self.truncated)
        if self.type == "resource_link":
            return ResourceLinkBlock(uri=self.uri or "", name=self.name or "", mime_type=self.mime_type)
        if self.type == "tool_call":
            return ToolCallBlock(call_id=self.call_id or "", name=self.name or "", arguments=self.arguments or {})
        return ToolResultBlock(call_id=self.call_id or "", is_error=self.is_error, text=self.text)

    def belongs_to(self, provider: str, model: str) -> bool:
        """True when this part's round-trip data was produced by ``provider``/``model``."""
        return self.provider == provider and self.model == model


class ChatMessage(msgspec.Struct, kw_only=True, gc=False):
    message_id: str
    session_id: str
    seq: int
    role: Role
    parts: list[Part]
    model_id: str | None = None
    thinking_requested: str | None = None
    thinking_effective: str | None = None
    stop_reason: MessageStopReason | None = None
    usage: Usage | None = None
    status: MessageStatus = "complete"
    created_at: str = ""
    origin: MessageOrigin | None = None  # user messages: prompt, steer or continue
    turn_id: str | None = None  # the turn that wrote it (a prompt: the turn it was admitted to)
    # A prompt's idempotency key and the answer it first got (``session/prompt``'s result).
    client_message_id: str | None = None
    admission: dict[str, Any] | None = None
    # A prompt's output_schema, output_retries and max_turns (``{schema, retries, max_turns}``), kept
    # so that session/continue goes on under them; stored beside ``admission``.
    output: dict[str, Any] | None = None

    @property
    def thinking_text(self) -> str | None:
        texts = [p.text for p in self.parts if p.type == "thinking" and p.text]
        return "".join(texts) if texts else None

    def to_wire(self) -> Message:
        # One pass over the parts for the blocks and the thinking (``thinking_text``'s join): a
        # resume makes ~10,000 of these, and a second comprehension each cost ~15% of it.
        content = []
        thinking: str | None = None
        for part in self.parts:
            content.append(part.to_block())
            if part.type == "thinking" and part.text:
                thinking = part.text if thinking is None else thinking + part.text
        return Message(
            message_id=self.message_id,
            session_id=self.session_id,
            seq=self.seq,
            role=self.role,
            content=content,
            thinking=thinking,
            model_id=self.model_id,
            thinking_level=self.thinking_effective,  # type: ignore[arg-type]
            stop_reason=self.stop_reason,
            usage=self.usage,
            status=self.status,
            created_at=self.created_at,
            origin=self.origin,
        )


class ToolSpec(msgspec.Struct, kw_only=True):
    """A tool as a provider is told about it: name, description and JSON Schema of its input."""

    name: str
    description: str
    input_schema: dict[str, Any]
