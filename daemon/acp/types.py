"""msgspec Structs for the ACP (Agent Client Protocol, schema 1.21.0) messages ponder uses.

Field names are snake_case here and camelCase on the wire (``rename="camel"``); ``_meta``
is spelled out. Incoming params ignore unknown fields, so newer clients keep working;
outgoing objects omit fields left at their default (``None``, ``UNSET``, empty lists)
rather than sending ``null`` where the schema does not allow it. Only the parts of ACP
that ponder speaks are modelled; the vendored schema is the reference.
"""

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

PROTOCOL_VERSION = 1


class _In(msgspec.Struct, rename="camel", kw_only=True):
    """Incoming params: unknown fields are ignored."""

    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class _Out(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """Outgoing objects: fields at their default are left out."""

    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


# --- content blocks ------------------------------------------------------------------


class TextContent(_Out, tag_field="type", tag="text"):
    text: str


class ImageContent(_In, tag_field="type", tag="image"):
    data: str = ""  # base64
    mime_type: str | None = None
    uri: str | None = None


class AudioContent(_In, tag_field="type", tag="audio"):
    mime_type: str | None = None


class ResourceLink(_In, tag_field="type", tag="resource_link"):
    uri: str
    name: str
    title: str | None = None
    mime_type: str | None = None


class ResourceContents(_In):
    """``TextResourceContents`` or ``BlobResourceContents`` (told apart by text/blob)."""

    uri: str
    text: str | None = None
    blob: str | None = None
    mime_type: str | None = None


class EmbeddedResource(_In, tag_field="type", tag="resource"):
    resource: ResourceContents


# What a prompt may contain (audio is decoded only to be refused clearly).
PromptBlock = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource


class ImageOut(_Out, tag_field="type", tag="image"):
    """An image shown back (``session/load``): its stored bytes."""

    data: str
    mime_type: str


class TextResourceOut(_Out):
    uri: str
    text: str
    mime_type: str | None = None


class EmbeddedResourceOut(_Out, tag_field="type", tag="resource"):
    resource: TextResourceOut


class ResourceLinkOut(_Out, tag_field="type", tag="resource_link"):
    uri: str
    name: str
    mime_type: str | None = None


# What a user message is shown back as, block by block.
UserBlock = TextContent | ImageOut | EmbeddedResourceOut | ResourceLinkOut


# --- initialize and authenticate ---------------------------------------------------------


class Implementation(_Out):
    name: str
    version: str
    title: str | None = None


class ClientImplementation(_In):
    name: str = ""
    version: str = ""
    title: str | None = None


class InitializeRequest(_In):
    protocol_version: int | str  # ACP says an integer; older clients sent strings
    client_capabilities: dict[str, Any] | None = None
    client_info: ClientImplementation | None = None


class PromptCapabilities(_Out):
    image: bool
    audio: bool
    embedded_context: bool


class McpCapabilities(_Out):
    http: bool
    sse: bool


class SessionCapabilities(_Out):
    list: dict[str, Any]
    resume: dict[str, Any]
    close: dict[str, Any]
    delete: dict[str, Any]


class AgentCapabilities(_Out):
    load_session: bool
    prompt_capabilities: PromptCapabilities
    mcp_capabilities: McpCapabilities
    session_capabilities: SessionCapabilities


class AuthMethod(_Out):
    """An auth method: ``agent`` (no ``type``; the client calls ``authenticate`` with its id)
    or ``terminal`` (the client runs the agent's command with ``args`` appended in a terminal)."""

    id: str
    name: str
    description: str | None = None
    type: Literal["terminal"] | None = None
    args: list[str] | None = None


class InitializeResponse(_Out):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    auth_methods: list[AuthMethod]
    agent_info: Implementation


class AuthenticateRequest(_In):
    method_id: str


class Empty(_Out):
    """``{}``: the result of authenticate, session/close and session/delete."""


# --- sessions --------------------------------------------------------------------------


class EnvVariable(_In):
    name: str
    value: str


class HttpHeader(_In):
    name: str
    value: str


class McpServer(_In):
    """One ``mcpServers`` entry: stdio (no ``type``), or ``http``/``sse`` with a url."""

    name: str
    type: str | None = None
    command: str | None = None
    args: list[str] = []
    env: list[EnvVariable] = []
    url: str | None = None
    headers: list[HttpHeader] = []

    @property
    def is_stdio(self) -> bool:
        return self.type in (None, "stdio") and self.command is not None


class NewSessionRequest(_In):
    cwd: str
    mcp_servers: list[McpServer] = []
    additional_directories: list[str] = []


class LoadSessionRequest(_In):
    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = []
    additional_directories: list[str] = []


ResumeSessionRequest = LoadSessionRequest


class SessionIdRequest(_In):
    """``session/close`` and ``session/delete`` params, and the ``session/cancel`` notification."""

    session_id: str


class ListSessionsRequest(_In):
    cwd: str | None = None
    cursor: str | None = None


class SelectOption(_Out):
    value: str
    name: str
    description: str | None = None


class SelectGroup(_Out):
    group: str
    name: str
    options: list[SelectOption]


class ConfigOption(_Out, tag_field="type", tag="select"):
    id: str
    name: str
    category: str
    current_value: str
    options: list[Any]  # list[SelectGroup] (model) or list[SelectOption] (thought level)
    description: str | None = None


class SessionMode(_Out):
    id: str
    name: str
    description: str | None = None


class SessionModeState(_Out):
    current_mode_id: str
    available_modes: list[SessionMode]


class SetSessionModeRequest(_In):
    session_id: str
    mode_id: str


class NewSessionResponse(_Out):
    session_id: str
    config_options: list[ConfigOption]
    modes: SessionModeState | None = None


class LoadSessionResponse(_Out):
    config_options: list[ConfigOption]
    modes: SessionModeState | None = None


ResumeSessionResponse = LoadSessionResponse


class SessionInfo(_Out):
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None


class ListSessionsResponse(_Out):
    sessions: list[SessionInfo]
    next_cursor: str | None = None


class SetConfigOptionRequest(_In):
    session_id: str
    config_id: str
    value: str | bool
    type: str | None = None


class SetConfigOptionResponse(_Out):
    config_options: list[ConfigOption]


# --- prompt turns ----------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


class PromptRequest(_In):
    session_id: str
    prompt: list[PromptBlock]


class PromptResponse(_Out):
    stop_reason: StopReason


class ToolCallLocation(_Out):
    path: str
    line: int | None = None


class ContentToolContent(_Out, tag_field="type", tag="content"):
    content: TextContent


class DiffToolContent(_Out, tag_field="type", tag="diff"):
    path: str
    old_text: str | None  # None: the file is new
    new_text: str


ToolContent = ContentToolContent | DiffToolContent


class ToolCallFields(_Out):
    """``ToolCallUpdate``: only the fields that changed (also a permission request's call)."""

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[ToolContent] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Any = UNSET
    raw_output: Any = UNSET


# --- session/update ---------------------------------------------------------------------


class UserMessageChunk(_Out, tag_field="sessionUpdate", tag="user_message_chunk"):
    content: UserBlock
    message_id: str | None = None


class AgentMessageChunk(_Out, tag_field="sessionUpdate", tag="agent_message_chunk"):
    content: TextContent
    message_id: str | None = None


class AgentThoughtChunk(_Out, tag_field="sessionUpdate", tag="agent_thought_chunk"):
    content: TextContent
    message_id: str | None = None


class ToolCallStart(_Out, tag_field="sessionUpdate", tag="tool_call"):
    tool_call_id: str
    title: str
    kind: str
    status: str
    raw_input: Any = UNSET
    content: list[ToolContent] = []
    locations: list[ToolCallLocation] = []


class ToolCallProgress(ToolCallFields, tag_field="sessionUpdate", tag="tool_call_update"):
    pass


class PlanEntry(_Out):
    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


class PlanUpdate(_Out, tag_field="sessionUpdate", tag="plan"):
    """The whole plan each time: the client replaces what it showed."""

    entries: list[PlanEntry]


class CurrentModeUpdate(_Out, tag_field="sessionUpdate", tag="current_mode_update"):
    current_mode_id: str


class ConfigOptionUpdate(_Out, tag_field="sessionUpdate", tag="config_option_update"):
    config_options: list[ConfigOption]


class SessionInfoUpdate(_Out, tag_field="sessionUpdate", tag="session_info_update"):
    title: str | UnsetType | None = UNSET
    updated_at: str | UnsetType | None = UNSET


class Cost(_Out):
    amount: float
    currency: str


class UsageUpdate(_Out, tag_field="sessionUpdate", tag="usage_update"):
    """Tokens in the context window, the window, and the session's cumulative cost (null: no known price)."""

    used: int
    size: int
    cost: Cost | None = None


class UnstructuredCommandInput(_Out):
    hint: str


class AvailableCommand(_Out):
    name: str
    description: str
    input: UnstructuredCommandInput | None = None


class AvailableCommandsUpdate(_Out, tag_field="sessionUpdate", tag="available_commands_update"):
    available_commands: list[AvailableCommand]


class CompactionUpdate(_Out, tag_field="sessionUpdate", tag="compaction_update"):
    """UNSTABLE (ACP RFD session-compaction, ``schema.unstable.json``): sent only to a client that
    advertises ``clientCapabilities.session.compaction``."""

    compaction_id: str
    status: str  # in_progress | completed | failed | cancelled | _skipped (an extension status)
    summary: list[TextContent] | UnsetType = UNSET
    error: str | UnsetType = UNSET


SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | ConfigOptionUpdate
    | CurrentModeUpdate
    | PlanUpdate
    | SessionInfoUpdate
    | UsageUpdate
    | AvailableCommandsUpdate
    | CompactionUpdate
)


class SessionNotification(_Out):
    session_id: str
    update: SessionUpdate


# --- permission requests (agent -> client) ----------------------------------------------

PermissionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class PermissionOption(_Out):
    option_id: str
    name: str
    kind: PermissionKind


class RequestPermissionRequest(_Out):
    session_id: str
    tool_call: ToolCallFields
    options: list[PermissionOption]


class PermissionOutcome(_In):
    outcome: str  # "selected" | "cancelled"
    option_id: str | None = None


class RequestPermissionResponse(_In):
    outcome: PermissionOutcome


# --- the client's file system (agent -> client) -------------------------------------------


class ReadTextFileRequest(_Out):
    session_id: str
    path: str  # absolute


class ReadTextFileResponse(_In):
    content: str


class WriteTextFileRequest(_Out):
    session_id: str
    path: str  # absolute
    content: str


class WriteTextFileResponse(_In):
    pass


# --- ponder's extension methods (``_ponder/...``) ----------------------------------------


class RenameRequest(_In):
    session_id: str
    title: str


class ForkRequest(_In):
    session_id: str
    message_id: str | None = None


class ForkResponse(_Out):
    session_id: str


class BudgetLimits(_In):
    """``_ponder/session/budget``'s budget (ponder's ``BudgetParams`` in camelCase); an omitted limit is none."""

    max_cost: Annotated[float, msgspec.Meta(ge=0)] | None = None  # USD
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None


class BudgetRequest(_In):
    """``_ponder/session/budget``: ``budget`` replaces the session's (null: none); left out, it is only read."""

    session_id: str
    budget: BudgetLimits | UnsetType | None = UNSET


class BudgetShown(_Out):
    max_cost: float | None = None
    max_tokens: int | None = None


class BudgetResponse(_Out):
    """The budget in force (null: none), whether it is the session's own (else config.toml's
    ``[budget]``), and what the session has spent: tokens, and USD where its model has a price."""

    budget: BudgetShown | None
    own: bool
    tokens_used: int
    cost_used: float | None


class ModelsListRequest(_In):
    provider: str | None = None
