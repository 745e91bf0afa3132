"""Shared wire objects: Model, Thinking, Session, Message and its content blocks, Usage."""

from typing import Any, Literal

import msgspec

ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "max"]
ApprovalPolicy = Literal["ask", "auto", "read_only"]
StopReason = Literal["end_turn", "max_tokens", "tool_limit", "refusal", "cancelled", "error"]


class Model(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    provider: str
    model: str
    name: str
    api: str
    supports_thinking: bool
    thinking_levels: list[ThinkingLevel]
    default_thinking_level: ThinkingLevel
    context_window: int | None
    max_output_tokens: int | None
    supports_tools: bool
    available: bool


class Thinking(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    requested: ThinkingLevel
    effective: ThinkingLevel
    supported: list[ThinkingLevel]
    reason: str | None
    budget_tokens: int | None
    request_params: dict[str, Any]


class Session(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: str
    title: str | None
    cwd: str
    model_id: str
    thinking_level: ThinkingLevel
    approval_policy: ApprovalPolicy
    created_at: str
    updated_at: str
    message_count: int
    parent_id: str | None
    status: Literal["idle", "running"]


class Usage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


class TextBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="text"):
    text: str


class ThinkingBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="thinking"):
    text: str
    redacted: bool = False


class ToolCallBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="tool_call"):
    call_id: str
    name: str
    arguments: dict[str, Any]


class ToolResultBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="tool_result"):
    call_id: str
    is_error: bool
    text: str


Block = TextBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock


class Message(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    message_id: str
    session_id: str
    seq: int
    role: Literal["user", "assistant", "tool"]
    content: list[Block]
    thinking: str | None
    model_id: str | None
    thinking_level: ThinkingLevel | None
    stop_reason: str | None
    usage: Usage | None
    status: Literal["complete", "interrupted", "error"]
    created_at: str


class ErrorInfo(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A failure reported inside an event (``turn_end.error``, ``retry.error``)."""

    code: int
    message: str
    provider_status: int | None = None
