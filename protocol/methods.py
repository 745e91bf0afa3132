"""Params and results of every client → daemon method, and the method table.

Incoming params are validated by decoding into these types; unknown fields are
ignored so that newer clients keep working against this daemon.
"""

from typing import Annotated, Any, Literal

import msgspec

from protocol.objects import (
    ApprovalPolicy,
    HistoryItem,
    Message,
    Model,
    ProposedRule,
    Rule,
    SandboxMechanism,
    SandboxMode,
    Session,
    SessionListRow,
    Thinking,
)

# An integer the store can hold: SQLite integers are 64-bit signed, so a larger one is the
# client's mistake (-32602 from validation), not an overflow deep in the store.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Empty(msgspec.Struct):
    """No params / an empty result: ``{}``."""


# --- initialize ------------------------------------------------------------------


class ClientInfo(msgspec.Struct, kw_only=True):
    name: str
    version: str | None = None


ClientRole = Literal["controller", "observer"]
TransportKind = Literal["stdio", "unix", "websocket"]


class ClientCapabilities(msgspec.Struct, kw_only=True):
    permission_requests: bool = False
    # An observer may only read (PROTOCOL.md "Transports and several clients"); others get -32008.
    role: ClientRole | None = None  # None: controller


class InitializeParams(msgspec.Struct, kw_only=True):
    protocol_version: int
    client_info: ClientInfo | None = None
    capabilities: ClientCapabilities | None = None


class ServerInfo(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    version: str


class SandboxCapability(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The OS sandbox this daemon found at start (PROTOCOL.md "Sandbox"); ``reason`` says why
    none works, or what the one found cannot do."""

    available: bool
    mechanism: SandboxMechanism | None
    network_isolation: bool
    reason: str | None


class SteeringCapability(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``capabilities.steering``: ``session/prompt``'s ``delivery`` values, ``session/queue/remove``,
    ``queue_update`` events, and ``client_message_id`` (PROTOCOL.md "Steering, the queue and continuing")."""

    deliveries: list[str] = msgspec.field(default_factory=lambda: ["queue", "steer"])
    queue_remove: bool = True
    queue_update: bool = True
    client_message_id: bool = True


class PromptContentCapability(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What ``session/prompt {content}`` takes (PROTOCOL.md "Prompt content")."""

    image: bool = True
    resource: bool = True
    resource_link: bool = True
    max_images_per_prompt: int
    max_image_bytes: int


MAX_OUTPUT_SCHEMA_BYTES = 1024 * 1024
DEFAULT_OUTPUT_RETRIES = 2


class OutputSchemaCapability(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``session/prompt {output_schema, output_retries, max_turns}`` (PROTOCOL.md "Structured output")."""

    max_schema_bytes: int = MAX_OUTPUT_SCHEMA_BYTES  # a larger schema (as JSON) is -32602
    default_retries: int = DEFAULT_OUTPUT_RETRIES


class TransportCapability(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``capabilities.transport``: how this connection reached the daemon, and what several
    clients share (PROTOCOL.md "Transports and several clients")."""

    kind: TransportKind
    connection_id: str
    subscribe: bool = True  # session/subscribe, session/unsubscribe, the event ring
    ring_events: int  # how many recent events per session a subscribe can replay
    # This daemon run's event numbering: seqs restart when a daemon starts, so a seq means
    # something only with the epoch it came from (session/subscribe ``epoch``).
    epoch: str
    roles: list[str] = msgspec.field(default_factory=lambda: ["controller", "observer"])


class ServerCapabilities(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    thinking_levels: list[str]
    approval_policies: list[str]
    batches: bool = True
    cancel_request: bool = True
    sandbox: SandboxCapability | None = None
    steering: SteeringCapability = msgspec.field(default_factory=SteeringCapability)
    # ``session/continue``: the last interrupted turn goes on without a new prompt.
    # (``continue`` is a Python keyword: the wire name is set with ``name``.)
    continue_: bool = msgspec.field(default=True, name="continue")
    prompt_content: PromptContentCapability | None = None
    permission_rules: bool = True  # [[permissions.rules]], permissions.toml, permissions/list
    hooks: bool = True  # [[hooks.EVENT]]: pre_tool_use, post_tool_use, user_prompt_submit, stop, pre_compact
    output_schema: OutputSchemaCapability = msgspec.field(default_factory=OutputSchemaCapability)
    transport: TransportCapability | None = None
    plans: bool = True  # the update_plan tool, plan events, Session.plan (PROTOCOL.md "Plans")


class InitializeResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    protocol_version: int
    server_info: ServerInfo
    capabilities: ServerCapabilities
    home: str
    # What is wrong with the config or the store, one sentence each; session methods fail
    # with the store's sentence when it could not be opened.
    problems: list[str]


# --- models and thinking -----------------------------------------------------------


class ModelsListParams(msgspec.Struct, kw_only=True):
    provider: str | None = None


class ModelsListResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    models: list[Model]


# The longest model id taken: longer ones are refused as the params are read, before any lookup
# (matching a megabyte against the catalogue's names would hold up every other request).
MODEL_ID_MAX_CHARS = 512
ModelId = Annotated[str, msgspec.Meta(max_length=MODEL_ID_MAX_CHARS)]


class ModelSetParams(msgspec.Struct, kw_only=True):
    session_id: str
    model_id: ModelId  # may end in "/LEVEL" (PROTOCOL.md "Thinking controls")
    thinking_level: str | None = None


class ModelSetResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: str
    model: Model
    thinking: Thinking


class ThinkingSetParams(msgspec.Struct, kw_only=True):
    """At least one field besides ``session_id``; ``budget_tokens: null`` clears a custom budget
    (omitted leaves it as it is)."""

    session_id: str
    level: str | None = None
    display: str | None = None
    budget_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | msgspec.UnsetType | None = msgspec.UNSET
    fallback: str | None = None


class ThinkingSetResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: str
    thinking: Thinking


# --- sessions ------------------------------------------------------------------------


class BudgetParams(msgspec.Struct, kw_only=True):
    """A budget as a client sends it (``session/start``, ``session/budget``); an omitted limit is no limit.
    The daemon answers with ``Budget`` (``Session.budget``)."""

    max_cost: Annotated[float, msgspec.Meta(ge=0)] | None = None  # USD
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None


class SandboxParams(msgspec.Struct, kw_only=True):
    """``session/start {sandbox}``: what differs from config.toml's ``[sandbox]``."""

    mode: SandboxMode | None = None
    network: bool | None = None


class SessionStartParams(msgspec.Struct, kw_only=True):
    model_id: ModelId | None = None  # may end in "/LEVEL"
    thinking_level: str | None = None
    display: str | None = None  # else config.toml [defaults] thinking_display
    fallback: str | None = None  # else config.toml [defaults] thinking_fallback
    cwd: str | None = None
    title: str | None = None
    system_prompt: str | None = None
    approval_policy: ApprovalPolicy | None = None
    budget: BudgetParams | None = None  # else config.toml [budget]
    sandbox: SandboxParams | None = None  # else config.toml [sandbox]


class SessionResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Result of ``session/start`` and ``session/get``."""

    session: Session
    thinking: Thinking


class SessionIdParams(msgspec.Struct, kw_only=True):
    """Params of the methods that take only ``session_id``."""

    session_id: str


class SessionResumeResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session: Session
    thinking: Thinking
    messages: list[Message]  # the last one may be an assistant message still being written (``streaming``)
    items: list[HistoryItem]  # messages and compaction records in seq order
    last_seq: int = 0  # the session's latest event seq: subscribe with it as ``after_seq`` to go on live
    epoch: str  # the daemon run ``last_seq`` counts in: subscribe with it as ``epoch``


class SessionSubscribeParams(msgspec.Struct, kw_only=True):
    session_id: str
    after_seq: Int64 | None = None
    # The epoch ``after_seq`` was counted in (from session/subscribe, session/resume or initialize);
    # another daemon run's is answered ``snapshot_required``.
    epoch: str | None = None


Replay = Literal["events", "snapshot_required", "none"]


class SessionSubscribeResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The caller is subscribed; with ``replay: events`` the missed events follow this answer, in
    order, then live ones (PROTOCOL.md "Transports and several clients")."""

    session: Session
    thinking: Thinking
    last_seq: int
    epoch: str  # this daemon run's event numbering (``last_seq`` and the events' seqs count in it)
    replay: Replay
    pending_requests: list["PermissionRequestParams"]


class SessionUnsubscribeResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    subscribed: bool


class SessionCompactParams(msgspec.Struct, kw_only=True):
    session_id: str
    instructions: str | None = None  # what the summary should focus on


class SessionCompactResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    compaction_id: str
    queued: bool


class SessionBudgetParams(msgspec.Struct, kw_only=True):
    session_id: str
    budget: BudgetParams | None  # null clears the session's budget


class SessionListParams(msgspec.Struct, kw_only=True):
    cwd: str | None = None
    limit: int = msgspec.field(default=50)
    cursor: str | None = None


class SessionListResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    sessions: list[SessionListRow]
    next_cursor: str | None


class SessionMessagesParams(msgspec.Struct, kw_only=True):
    session_id: str
    after_seq: Int64 | None = None
    limit: Int64 | None = None


class SessionMessagesResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    messages: list[Message]
    next_seq: int | None
    items: list[HistoryItem]  # messages and compaction records in seq order


Delivery = Literal["queue", "steer"]
# What admission did with a prompt: it starts a turn now, waits behind others, or waits to
# join the running turn before its next model call.
Admission = Literal["started", "queued", "steer_pending"]
# A client's idempotency key for a prompt: unique in the session across clients (a UUID).
ClientMessageId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class TextInput(msgspec.Struct, kw_only=True, tag_field="type", tag="text"):
    text: str


class ImageInput(msgspec.Struct, kw_only=True, tag_field="type", tag="image"):
    """Base64 ``data`` (with ``mime_type``, which admission checks against the bytes) or a ``path``
    (absolute, or relative to the session's cwd): exactly one of them."""

    data: str | None = None
    path: str | None = None
    mime_type: str | None = None
    name: str | None = None


class ResourceInput(msgspec.Struct, kw_only=True, tag_field="type", tag="resource"):
    """An embedded file, as editors send an @-mention: exactly one of ``text`` and ``blob`` (base64)."""

    uri: str
    text: str | None = None
    blob: str | None = None
    mime_type: str | None = None


class ResourceLinkInput(msgspec.Struct, kw_only=True, tag_field="type", tag="resource_link"):
    """A link: a ``file://`` one inside the session's cwd is read at admission."""

    uri: str
    name: str
    mime_type: str | None = None


InputBlock = TextInput | ImageInput | ResourceInput | ResourceLinkInput


class SessionPromptParams(msgspec.Struct, kw_only=True):
    session_id: str
    text: str | None = None  # shorthand for content: [{type: text, text}]; exactly one of the two
    content: list[InputBlock] | None = None
    thinking_level: str | None = None  # this turn only
    # "queue" (default): a follow-up turn of its own; "steer": joins the running turn.
    delivery: Delivery = "queue"
    expected_turn_id: str | None = None  # only with delivery "steer": the turn it must join
    client_message_id: ClientMessageId | None = None  # a prompt sent twice is admitted once
    # PROTOCOL.md "Structured output and headless runs": the turn's answer must be JSON valid
    # against this schema; an invalid answer goes back to the model up to output_retries times.
    output_schema: dict[str, Any] | None = None
    output_retries: Annotated[int, msgspec.Meta(ge=0, le=100)] = DEFAULT_OUTPUT_RETRIES
    # At most this many model calls in the turn (`ponder ask --max-turns`); past it, `tool_limit`.
    max_turns: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None


class SessionPromptResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    turn_id: str
    message_id: str
    queued: bool  # true exactly when delivery is "queued"
    delivery: Admission


class DroppedSteer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A steer that ``session/cancel`` did not deliver: stored nowhere, given back to the client.
    ``content`` (null when it was text alone) holds its blocks as ``session/prompt`` takes them
    (``InputBlock`` objects: an image with its base64 ``data``), so it can be sent again."""

    message_id: str
    text: str
    content: list[dict[str, Any]] | None = None


class AttachmentGetParams(msgspec.Struct, kw_only=True):
    session_id: str
    attachment_id: str


class AttachmentGetResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    attachment_id: str
    mime_type: str
    data: str  # base64


class SessionCancelResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    cancelled: bool
    dropped_queued: int
    dropped_steers: list[DroppedSteer] = msgspec.field(default_factory=list)


ContinueAction = Literal["resumed", "nothing_to_continue"]


class SessionContinueResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    turn_id: str | None  # null with nothing_to_continue
    action: ContinueAction


class SessionQueueRemoveParams(msgspec.Struct, kw_only=True):
    session_id: str
    message_id: str


class SessionQueueRemoveResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    removed: bool


class SessionForkParams(msgspec.Struct, kw_only=True):
    session_id: str
    message_id: str | None = None


class SessionOnlyResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Result of ``session/fork`` and ``session/rename``."""

    session: Session


class SessionRenameParams(msgspec.Struct, kw_only=True):
    session_id: str
    title: str


class SessionDeleteResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    deleted: bool


# --- mcp and auth --------------------------------------------------------------------


class McpListParams(msgspec.Struct, kw_only=True):
    session_id: str | None = None


McpServerStatus = Literal["starting", "ready", "failed", "stopped"]
CredentialSource = Literal["env", "config", "login"]


class McpTool(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    description: str | None


class McpServer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    status: McpServerStatus
    error: str | None
    tools: list[McpTool]


class McpListResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    servers: list[McpServer]


class AuthProvider(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    provider: str
    configured: bool
    source: CredentialSource | None


class AuthStatusResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    providers: list[AuthProvider]


class AuthLoginParams(msgspec.Struct, kw_only=True):
    provider: str


class AuthLoginResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    user_code: str
    verification_uri: str
    expires_in: int


# --- $/cancelRequest -------------------------------------------------------------------


class CancelRequestParams(msgspec.Struct, kw_only=True):
    id: int | str


# --- daemon → client requests --------------------------------------------------------

PermissionDecision = Literal["allow_once", "allow_session", "allow_always", "deny", "deny_always"]


class PermissionRequestParams(msgspec.Struct, kw_only=True):
    session_id: str
    turn_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    title: str
    options: list[PermissionDecision]
    # What allow_session/allow_always/deny_always keep unless the answer edits it: for
    # run_command the first command's words, for a file tool its path, else the tool.
    suggested_rule: ProposedRule | None = None
    reason: str | None = None  # why this call is asked about (an ask rule, a hook), when not the policy


class PermissionRequestResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    decision: PermissionDecision
    # An edited suggested_rule (a ProposedRule). Checked by the daemon: one that does not match the
    # call, carries another decision or names no tool makes the answer allow_once or deny, keeping no rule.
    rule: dict[str, Any] | None = None


# --- permissions -----------------------------------------------------------------------


class PermissionsListParams(msgspec.Struct, kw_only=True):
    session_id: str | None = None


class PermissionsListResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    rules: list[Rule]
    problems: list[str]


# --- the method table ------------------------------------------------------------------

# method name -> (params type, result type). Notifications have result None.
METHODS: dict[str, tuple[type, type | None]] = {
    "initialize": (InitializeParams, InitializeResult),
    "shutdown": (Empty, Empty),
    "ping": (Empty, Empty),
    "models/list": (ModelsListParams, ModelsListResult),
    "model/set": (ModelSetParams, ModelSetResult),
    "thinking/set": (ThinkingSetParams, ThinkingSetResult),
    "session/start": (SessionStartParams, SessionResult),
    "session/resume": (SessionIdParams, SessionResumeResult),
    "session/subscribe": (SessionSubscribeParams, SessionSubscribeResult),
    "session/unsubscribe": (SessionIdParams, SessionUnsubscribeResult),
    "session/list": (SessionListParams, SessionListResult),
    "session/get": (SessionIdParams, SessionResult),
    "session/messages": (SessionMessagesParams, SessionMessagesResult),
    "session/prompt": (SessionPromptParams, SessionPromptResult),
    "session/continue": (SessionIdParams, SessionContinueResult),
    "session/queue/remove": (SessionQueueRemoveParams, SessionQueueRemoveResult),
    "session/compact": (SessionCompactParams, SessionCompactResult),
    "attachment/get": (AttachmentGetParams, AttachmentGetResult),
    "session/cancel": (SessionIdParams, SessionCancelResult),
    "session/fork": (SessionForkParams, SessionOnlyResult),
    "session/rename": (SessionRenameParams, SessionOnlyResult),
    "session/delete": (SessionIdParams, SessionDeleteResult),
    "session/budget": (SessionBudgetParams, SessionOnlyResult),
    "permissions/list": (PermissionsListParams, PermissionsListResult),
    "mcp/list": (McpListParams, McpListResult),
    "auth/status": (Empty, AuthStatusResult),
    "auth/login": (AuthLoginParams, AuthLoginResult),
    "$/cancelRequest": (CancelRequestParams, None),
}

# daemon → client requests: method -> (params type, result type)
CLIENT_REQUESTS: dict[str, tuple[type, type]] = {
    "permission/request": (PermissionRequestParams, PermissionRequestResult),
}
