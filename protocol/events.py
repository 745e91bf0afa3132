"""Daemon → client notifications: the ``agent/event`` union (tagged on ``type``) and the others.

Every event carries ``session_id``, ``turn_id`` and ``seq`` (contiguous per session).
Deltas carry only new text; whole objects appear only in ``*_end`` events.
"""

from typing import Any, Literal

import msgspec

from protocol.objects import (
    CompactionTrigger,
    ContextFill,
    Cost,
    ErrorInfo,
    Message,
    PlanEntry,
    QueuedTurn,
    Rule,
    SandboxMechanism,
    Session,
    StopReason,
    Thinking,
    Usage,
    WaitingSteer,
)

ReplyRole = Literal["user", "assistant", "tool"]  # "user": a steer joining the running turn
TurnKind = Literal["prompt", "compaction"]
CompactionStatus = Literal["completed", "skipped", "failed", "cancelled"]


class BaseEvent(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """What every ``agent/event`` carries; each type below adds its own fields."""

    session_id: str
    turn_id: str
    seq: int


class TurnStart(BaseEvent, tag="turn_start"):
    model_id: str
    thinking: Thinking
    user_message_id: str | None  # null for a compaction turn
    kind: TurnKind = "prompt"  # "compaction": a turn that only compacts (manual, or before a prompt)
    continued_from: str | None = None  # the turn session/continue goes on with
    # What was left out of the request and why, one sentence each (PROTOCOL.md "Prompt content").
    notes: list[str] = msgspec.field(default_factory=list)


class MessageStart(BaseEvent, tag="message_start"):
    message_id: str
    role: ReplyRole


class ThinkingStart(BaseEvent, tag="thinking_start"):
    message_id: str
    index: int


class ThinkingDelta(BaseEvent, tag="thinking_delta"):
    message_id: str
    index: int
    delta: str


class ThinkingEnd(BaseEvent, tag="thinking_end"):
    message_id: str
    index: int
    text: str
    redacted: bool


class TextStart(BaseEvent, tag="text_start"):
    message_id: str
    index: int


class TextDelta(BaseEvent, tag="text_delta"):
    message_id: str
    index: int
    delta: str


class TextEnd(BaseEvent, tag="text_end"):
    message_id: str
    index: int
    text: str


class ToolCallStart(BaseEvent, tag="tool_call_start"):
    message_id: str
    index: int
    call_id: str
    name: str


class ToolCallDelta(BaseEvent, tag="tool_call_delta"):
    message_id: str
    index: int
    call_id: str
    delta: str


class ToolCallEnd(BaseEvent, tag="tool_call_end"):
    message_id: str
    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]


class MessageEnd(BaseEvent, tag="message_end"):
    message: Message


PermissionSource = Literal["rule", "policy", "user", "hook", "sandbox"]
HookEventName = Literal["pre_tool_use", "post_tool_use", "user_prompt_submit", "stop", "pre_compact"]
HookStatus = Literal["completed", "blocked", "failed", "timed_out"]


class Permission(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Why a tool call ran or not: which decision, from which step, by which rule."""

    decision: Literal["allow", "deny"]
    source: PermissionSource
    rule: Rule | None = None
    note: str | None = None  # what was not kept or saved, or why no rule could allow the call


class ToolExecutionStart(BaseEvent, tag="tool_execution_start"):
    call_id: str
    name: str
    arguments: dict[str, Any]
    # null for a call that never reached the permission check and never runs (arguments that are
    # not JSON or do not fit the tool, an unknown tool: the tool error says which)
    permission: Permission | None = None


class ToolExecutionOutput(BaseEvent, tag="tool_execution_output"):
    call_id: str
    chunk: str


class ToolSandbox(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How one ``run_command`` ran: confined or not, and whether the sandbox seems to have
    stopped it (a best guess from its exit status and output; PROTOCOL.md "Sandbox")."""

    enforced: bool
    mechanism: SandboxMechanism | None
    denied: bool


class ToolExecutionEnd(BaseEvent, tag="tool_execution_end"):
    call_id: str
    name: str
    is_error: bool
    result: str
    message_id: str
    sandbox: ToolSandbox | msgspec.UnsetType = msgspec.UNSET  # run_command only


class Retry(BaseEvent, tag="retry"):
    attempt: int
    max_attempts: int
    delay_ms: int
    error: ErrorInfo


class UsageEvent(BaseEvent, tag="usage"):
    """After every model call, summaries included: the context fill, the call's usage, the
    session's running totals, and their cost (null where no price is known)."""

    context: ContextFill
    usage: Usage
    totals: Usage
    cost: Cost | None = None
    totals_cost: Cost | None = None
    # True when the provider reported no usage (or none that reads as token counts) and ponder's
    # estimate of the request and reply was counted instead.
    estimated: bool = False


class CompactionStart(BaseEvent, tag="compaction_start"):
    compaction_id: str
    trigger: CompactionTrigger
    tokens_before: int


class CompactionEnd(BaseEvent, tag="compaction_end"):
    compaction_id: str
    status: CompactionStatus
    summary: str | None = None
    tokens_after: int | None = None
    usage: Usage | None = None
    error: ErrorInfo | None = None


class ThinkingUpdate(BaseEvent, tag="thinking_update"):
    """Before a model call whose thinking differs from what the turn last reported (``turn_start``
    or an earlier ``thinking_update``): what this call sends, with ``reason`` saying why."""

    thinking: Thinking


class QueueUpdate(BaseEvent, tag="queue_update"):
    """The session's waiting input after every change; not part of any turn (``turn_id`` null)."""

    turn_id: str | None  # type: ignore[assignment]  # always null: the queue belongs to no turn
    steers: list[WaitingSteer]
    queued: list[QueuedTurn]


class HookStart(BaseEvent, tag="hook_start"):
    hook_id: str
    event: HookEventName
    command: str


class HookEnd(BaseEvent, tag="hook_end"):
    hook_id: str
    event: HookEventName
    status: HookStatus
    duration_ms: int
    output: str  # what the hook printed (its reason), cut short and with credentials masked


class ResolvedBy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The connection whose answer decided a permission request (PROTOCOL.md "Transports")."""

    connection_id: str
    client_name: str | None


class PermissionResolved(BaseEvent, tag="permission_resolved"):
    """A ``permission/request`` was decided: by a client's answer, or by the daemon (``resolved_by``
    null: a timeout, a cancelled turn, nobody to ask). Every subscriber gets it."""

    call_id: str
    decision: str
    resolved_by: ResolvedBy | None


class TurnEnd(BaseEvent, tag="turn_end"):
    stop_reason: StopReason
    usage: Usage | None
    error: ErrorInfo | None = None
    # The answer, valid against the prompt's ``output_schema``; null on every other turn.
    structured_output: Any = None


class PlanUpdate(BaseEvent, tag="plan"):
    """The model's plan as ``update_plan`` left it (the whole list each time; ``entries`` empty: cleared)."""

    explanation: str | None
    entries: list[PlanEntry]


AgentEvent = (
    TurnStart
    | MessageStart
    | ThinkingStart
    | ThinkingDelta
    | ThinkingEnd
    | TextStart
    | TextDelta
    | TextEnd
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionOutput
    | ToolExecutionEnd
    | Retry
    | ThinkingUpdate
    | UsageEvent
    | CompactionStart
    | CompactionEnd
    | QueueUpdate
    | PlanUpdate
    | HookStart
    | HookEnd
    | PermissionResolved
    | TurnEnd
)


class AuthCompleted(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    provider: str
    ok: bool
    error: str | None = None


class SessionUpdated(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session: Session


# notification method -> params type
NOTIFICATIONS: dict[str, Any] = {
    "agent/event": AgentEvent,
    "auth/completed": AuthCompleted,
    "session/updated": SessionUpdated,
}
