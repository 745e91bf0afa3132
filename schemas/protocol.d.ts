// ponder wire protocol: TypeScript declarations. Version 1.
// Generated from schemas/protocol.json by scripts/gen_typescript.py; do not edit by hand.

/** What admission did with a prompt: `started`, `queued` or `steer_pending`. */
export type Admission = "queued" | "started" | "steer_pending";

/** Params of `agent/event`: one event of a session, discriminated by `type`. */
export type AgentEvent = TurnStart | MessageStart | ThinkingStart | ThinkingDelta | ThinkingEnd | TextStart | TextDelta | TextEnd | ToolCallStart | ToolCallDelta | ToolCallEnd | MessageEnd | ToolExecutionStart | ToolExecutionOutput | ToolExecutionEnd | Retry | ThinkingUpdate | UsageEvent | CompactionStart | CompactionEnd | QueueUpdate | PlanUpdate | HookStart | HookEnd | PermissionResolved | TurnEnd;

/** `agent/event`: its params. */
export interface AgentEventNotification {
  method: "agent/event";
  params: AgentEvent;
}

/** Which tools run without asking: see PROTOCOL.md, Approval policies. */
export type ApprovalPolicy = "ask" | "auto" | "read_only";

/** The first line: which protocol the lines that follow speak, and the session they belong to. */
export interface AskHeader {
  type: "header";
  protocol_version: number;
  ponder_version: string;
  session_id: string;
}

/** One line of `ponder ask --json`: the `header` first, then `agent/event` params, the `result` last (also when the run fails or is interrupted). */
export type AskJsonLine = AskHeader | AgentEvent | AskResult;

/** The first (`header`) or last (`result`) line of `ponder ask --json`. */
export type AskLine = AskHeader | AskResult;

/** The last line: how the run ended. ``result`` is the text of the prompt turn's last assistant
    message (with ``--output-schema``, the JSON text of ``structured_output``); ``usage`` the run's
    total; ``cost`` null when no price is known; ``stop_reason`` null when no turn ended. */
export interface AskResult {
  type: "result";
  status: AskStatus;
  stop_reason: StopReason | null;
  result: string | null;
  structured_output: unknown;
  usage: Usage;
  cost: Cost | null;
  session_id: string;
  exit_code: number;
}

/** How a `ponder ask` run ended; its exit status: success 0, error 1, limit 3, denied 4, schema_failed 5, cancelled 130. */
export type AskStatus = "cancelled" | "denied" | "error" | "limit" | "schema_failed" | "success";

/** `attachment/get`: its params and result. */
export interface AttachmentGetMethod {
  method: "attachment/get";
  params: AttachmentGetParams;
  result: AttachmentGetResult;
}

export interface AttachmentGetParams {
  session_id: string;
  attachment_id: string;
}

export interface AttachmentGetResult {
  attachment_id: string;
  mime_type: string;
  data: string;
}

export interface AuthCompleted {
  provider: string;
  ok: boolean;
  error: string | null;
}

/** `auth/completed`: its params. */
export interface AuthCompletedNotification {
  method: "auth/completed";
  params: AuthCompleted;
}

/** `auth/login`: its params and result. */
export interface AuthLoginMethod {
  method: "auth/login";
  params: AuthLoginParams;
  result: AuthLoginResult;
}

export interface AuthLoginParams {
  provider: string;
}

export interface AuthLoginResult {
  user_code: string;
  verification_uri: string;
  expires_in: number;
}

export interface AuthProvider {
  provider: string;
  configured: boolean;
  source: CredentialSource | null;
}

/** `auth/status`: its params and result. */
export interface AuthStatusMethod {
  method: "auth/status";
  params: Empty;
  result: AuthStatusResult;
}

export interface AuthStatusResult {
  providers: AuthProvider[];
}

/** One content block of a Message, discriminated by `type`. */
export type Block = TextBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock | ImageBlock | ResourceBlock | ResourceLinkBlock;

/** A session's limits: ``max_cost`` in USD against ``totals_cost``, ``max_tokens`` against
    ``totals.input_tokens + totals.output_tokens``; null means no limit of that kind.

    ``cost_enforced`` is false when ``max_cost`` is set but the session's model has no known
    price: the budget is kept, and the session's turns end ``budget`` with a sentence saying how
    to set a price, since the cost could never be counted against it. */
export interface Budget {
  max_cost: number | null;
  max_tokens: number | null;
  cost_enforced: boolean;
}

/** A budget as a client sends it (``session/start``, ``session/budget``); an omitted limit is no limit.
    The daemon answers with ``Budget`` (``Session.budget``). */
export interface BudgetParams {
  max_cost?: number | null;
  max_tokens?: number | null;
}

/** `$/cancelRequest`: its params. */
export interface CancelRequestNotification {
  method: "$/cancelRequest";
  params: CancelRequestParams;
}

export interface CancelRequestParams {
  id: number | string;
}

export interface ClientCapabilities {
  permission_requests?: boolean;
  role?: ClientRole | null;
}

export interface ClientInfo {
  name: string;
  version?: string | null;
}

/** What a connection may do: `controller` (everything) or `observer` (read and follow). */
export type ClientRole = "controller" | "observer";

export interface CompactionEnd {
  type: "compaction_end";
  compaction_id: string;
  status: "cancelled" | "completed" | "failed" | "skipped";
  summary: string | null;
  tokens_after: number | null;
  usage: Usage | null;
  error: ErrorInfo | null;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** A Compaction in a history's ``items``, with ``kind: "compaction"``. */
export interface CompactionItem {
  kind: "compaction";
  compaction_id: string;
  seq: number;
  trigger: "manual" | "overflow" | "threshold";
  summary: string;
  first_kept_seq: number;
  tokens_before: number;
  tokens_after: number;
  model_id: string | null;
  created_at: string;
}

export interface CompactionStart {
  type: "compaction_start";
  compaction_id: string;
  trigger: "manual" | "overflow" | "threshold";
  tokens_before: number;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** How full the model's context window is: the tokens of the last request plus its reply, and the window. */
export interface ContextFill {
  used: number;
  size: number | null;
}

/** What `session/continue` did: `resumed` a turn, or `nothing_to_continue`. */
export type ContinueAction = "nothing_to_continue" | "resumed";

/** An amount of money: what a model call, or a session so far, cost. */
export interface Cost {
  amount: number;
  currency: string;
}

/** Where a provider's credentials come from (never the secret itself). */
export type CredentialSource = "config" | "env" | "login";

/** Every daemon → client request: method name → its params and the result the client answers with. */
export interface DaemonRequests {
  "permission/request": PermissionRequestMethod;
}

/** How a prompt is delivered: `queue` (a turn of its own) or `steer` (joins the running turn). */
export type Delivery = "queue" | "steer";

/** A steer that ``session/cancel`` did not deliver: stored nowhere, given back to the client.
    ``content`` (null when it was text alone) holds its blocks as ``session/prompt`` takes them
    (``InputBlock`` objects: an image with its base64 ``data``), so it can be sent again. */
export interface DroppedSteer {
  message_id: string;
  text: string;
  content: { [key: string]: unknown }[] | null;
}

/** No params / an empty result: ``{}``. */
export interface Empty {
}

/** A failure reported inside an event (``turn_end.error``, ``retry.error``). */
export interface ErrorInfo {
  code: number;
  message: string;
  provider_status: number | null;
  errors?: FieldError[];
}

/** One thing wrong with a value: where (a JSON path from ``$``) and what. */
export interface FieldError {
  path: string;
  message: string;
}

export interface HookEnd {
  type: "hook_end";
  hook_id: string;
  event: HookEventName;
  status: HookStatus;
  duration_ms: number;
  output: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** When a hook runs. */
export type HookEventName = "post_tool_use" | "pre_compact" | "pre_tool_use" | "stop" | "user_prompt_submit";

export interface HookStart {
  type: "hook_start";
  hook_id: string;
  event: HookEventName;
  command: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** How a hook ended: `blocked` when it denied, `failed`/`timed_out` when it broke. */
export type HookStatus = "blocked" | "completed" | "failed" | "timed_out";

/** An image in a user message (or returned by a tool: ``call_id`` names the call); the bytes
    are fetched with ``attachment/get``, never carried here. ``mime_type``, ``bytes``, ``width``
    and ``height`` describe what was stored (after scaling down). ``omitted_reason`` is set when
    a provider refused it: it is then sent to models as a one-line note only. */
export interface ImageBlock {
  type: "image";
  attachment_id: string;
  mime_type: string;
  bytes: number;
  width: number;
  height: number;
  name: string | null;
  call_id: string | null;
  omitted_reason: string | null;
}

/** Base64 ``data`` (with ``mime_type``, which admission checks against the bytes) or a ``path``
    (absolute, or relative to the session's cwd): exactly one of them. */
export interface ImageInput {
  type: "image";
  data?: string | null;
  path?: string | null;
  mime_type?: string | null;
  name?: string | null;
}

/** `initialize`: its params and result. */
export interface InitializeMethod {
  method: "initialize";
  params: InitializeParams;
  result: InitializeResult;
}

export interface InitializeParams {
  protocol_version: number;
  client_info?: ClientInfo | null;
  capabilities?: ClientCapabilities | null;
}

export interface InitializeResult {
  protocol_version: number;
  server_info: ServerInfo;
  capabilities: ServerCapabilities;
  home: string;
  problems: string[];
}

/** `code` says what went wrong (PROTOCOL.md, Errors, also says what `data` holds); `message` is one sentence a person can act on. */
export interface JsonRpcError {
  /** -32700 parse_error, -32600 invalid_request, -32601 method_not_found, -32602 invalid_params, -32603 internal_error, -32001 session_not_found, -32002 model_not_found, -32003 provider_not_configured, -32004 session_busy, -32005 shutting_down, -32006 content_not_supported, -32007 turn_not_active, -32008 forbidden, -32009 sandbox_unavailable, -32011 budget_exceeded, -32800 request_cancelled */
  code: number;
  message: string;
  data: { [key: string]: unknown };
}

/** A request that failed (or a message that could not be read: then `id` is null). */
export interface JsonRpcErrorResponse {
  jsonrpc: "2.0";
  id: string | number | null;
  error: JsonRpcError;
}

/** A notification: `method` names an entry of `Notifications`; it has no `id`. */
export interface JsonRpcNotification {
  jsonrpc: "2.0";
  method: string;
  params: unknown;
}

/** A request: `method` names an entry of `Methods` (client → daemon) or `DaemonRequests`. */
export interface JsonRpcRequest {
  jsonrpc: "2.0";
  id: string | number | null;
  method: string;
  params: unknown;
}

/** The answer to a request: `result` is the `result` of its method's table entry. */
export interface JsonRpcResponse {
  jsonrpc: "2.0";
  id: string | number | null;
  result: unknown;
}

/** `mcp/list`: its params and result. */
export interface McpListMethod {
  method: "mcp/list";
  params: McpListParams;
  result: McpListResult;
}

export interface McpListParams {
  session_id?: string | null;
}

export interface McpListResult {
  servers: McpServer[];
}

export interface McpServer {
  name: string;
  status: McpServerStatus;
  error: string | null;
  tools: McpTool[];
}

/** Where an MCP server is in its life: `error` says why it `failed`. */
export type McpServerStatus = "failed" | "ready" | "starting" | "stopped";

export interface McpTool {
  name: string;
  description: string | null;
}

export interface Message {
  message_id: string;
  session_id: string;
  seq: number;
  role: ReplyRole;
  content: Block[];
  thinking: string | null;
  model_id: string | null;
  thinking_level: ThinkingLevel | null;
  /** Set on assistant messages; null on user and tool messages, and on an assistant message that a daemon saved mid-stream and never finished (it stopped): that one has `status: interrupted`. */
  stop_reason: MessageStopReason | null;
  usage: Usage | null;
  status: MessageStatus;
  created_at: string;
  /** Set on user messages: `prompt`, `steer` or `continue`; null on the others. */
  origin: MessageOrigin | null;
}

export interface MessageEnd {
  type: "message_end";
  message: Message;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** A Message in a history's ``items``, with ``kind: "message"``. */
export interface MessageItem {
  kind: "message";
  message_id: string;
  session_id: string;
  seq: number;
  role: ReplyRole;
  content: Block[];
  thinking: string | null;
  model_id: string | null;
  thinking_level: ThinkingLevel | null;
  /** Set on assistant messages; null on user and tool messages, and on an assistant message that a daemon saved mid-stream and never finished (it stopped): that one has `status: interrupted`. */
  stop_reason: MessageStopReason | null;
  usage: Usage | null;
  status: MessageStatus;
  created_at: string;
  /** Set on user messages: `prompt`, `steer` or `continue`; null on the others. */
  origin: MessageOrigin | null;
}

/** Where a user message came from: a `prompt`, a `steer` or `session/continue`. */
export type MessageOrigin = "continue" | "prompt" | "schema_retry" | "steer";

export interface MessageStart {
  type: "message_start";
  message_id: string;
  role: ReplyRole;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** `complete`, or cut short: `interrupted` (cancelled) or `error` (it failed). */
export type MessageStatus = "complete" | "error" | "interrupted" | "streaming";

/** Why an assistant message ended (`Message.stop_reason`). `end_turn`: the reply is complete and asks for no tools. `max_tokens`: the reply was cut at the model's output-token limit (or its context window). `tool_use`: the reply asks for tool calls; a `tool` message with their results follows. `refusal`: the provider refused or filtered the reply. `interrupted`: the stream was cancelled mid-way; the partial reply is kept (`status: interrupted`). `error`: the stream failed mid-way; the partial reply is kept (`status: error`). */
export type MessageStopReason = "end_turn" | "error" | "interrupted" | "max_tokens" | "refusal" | "tool_use";

/** Every client → daemon request: method name → its params and result. */
export interface Methods {
  initialize: InitializeMethod;
  shutdown: ShutdownMethod;
  ping: PingMethod;
  "models/list": ModelsListMethod;
  "model/set": ModelSetMethod;
  "thinking/set": ThinkingSetMethod;
  "session/start": SessionStartMethod;
  "session/resume": SessionResumeMethod;
  "session/subscribe": SessionSubscribeMethod;
  "session/unsubscribe": SessionUnsubscribeMethod;
  "session/list": SessionListMethod;
  "session/get": SessionGetMethod;
  "session/messages": SessionMessagesMethod;
  "session/prompt": SessionPromptMethod;
  "session/continue": SessionContinueMethod;
  "session/queue/remove": SessionQueueRemoveMethod;
  "session/compact": SessionCompactMethod;
  "attachment/get": AttachmentGetMethod;
  "session/cancel": SessionCancelMethod;
  "session/fork": SessionForkMethod;
  "session/rename": SessionRenameMethod;
  "session/delete": SessionDeleteMethod;
  "session/budget": SessionBudgetMethod;
  "permissions/list": PermissionsListMethod;
  "mcp/list": McpListMethod;
  "auth/status": AuthStatusMethod;
  "auth/login": AuthLoginMethod;
}

export interface Model {
  id: string;
  provider: string;
  model: string;
  name: string;
  api: string;
  supports_thinking: boolean;
  thinking_levels: ThinkingLevel[];
  default_thinking_level: ThinkingLevel;
  context_window: number | null;
  max_output_tokens: number | null;
  supports_tools: boolean;
  available: boolean;
  context_window_source: "catalog" | "config" | "default" | "learned";
  input_modalities: string[];
}

/** `model/set`: its params and result. */
export interface ModelSetMethod {
  method: "model/set";
  params: ModelSetParams;
  result: ModelSetResult;
}

export interface ModelSetParams {
  session_id: string;
  model_id: string;
  thinking_level?: string | null;
}

export interface ModelSetResult {
  session_id: string;
  model: Model;
  thinking: Thinking;
}

/** `models/list`: its params and result. */
export interface ModelsListMethod {
  method: "models/list";
  params: ModelsListParams;
  result: ModelsListResult;
}

export interface ModelsListParams {
  provider?: string | null;
}

export interface ModelsListResult {
  models: Model[];
}

/** Every notification: method name → its params. All go daemon → client except `$/cancelRequest`, which both sides send. */
export interface Notifications {
  "agent/event": AgentEventNotification;
  "auth/completed": AuthCompletedNotification;
  "session/updated": SessionUpdatedNotification;
  "$/cancelRequest": CancelRequestNotification;
}

/** ``session/prompt {output_schema, output_retries, max_turns}`` (PROTOCOL.md "Structured output"). */
export interface OutputSchemaCapability {
  max_schema_bytes: number;
  default_retries: number;
}

/** A word of a run_command pattern: a word, or a list of alternative words. */
export type PatternWord = string | string[];

/** Why a tool call ran or not: which decision, from which step, by which rule. */
export interface Permission {
  decision: "allow" | "deny";
  source: PermissionSource;
  rule: Rule | null;
  note: string | null;
}

/** The person's answer to a `permission/request`. */
export type PermissionDecision = "allow_always" | "allow_once" | "allow_session" | "deny" | "deny_always";

/** `permission/request`: its params and result. */
export interface PermissionRequestMethod {
  method: "permission/request";
  params: PermissionRequestParams;
  result: PermissionRequestResult;
}

export interface PermissionRequestParams {
  session_id: string;
  turn_id: string;
  call_id: string;
  tool: string;
  arguments: { [key: string]: unknown };
  title: string;
  options: PermissionDecision[];
  suggested_rule: ProposedRule | null;
  reason: string | null;
}

export interface PermissionRequestResult {
  decision: PermissionDecision;
  rule?: { [key: string]: unknown } | null;
}

/** A ``permission/request`` was decided: by a client's answer, or by the daemon (``resolved_by``
    null: a timeout, a cancelled turn, nobody to ask). Every subscriber gets it. */
export interface PermissionResolved {
  type: "permission_resolved";
  call_id: string;
  decision: string;
  resolved_by: ResolvedBy | null;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** Which step decided a tool call: see PROTOCOL.md, Permissions. */
export type PermissionSource = "hook" | "policy" | "rule" | "sandbox" | "user";

/** `permissions/list`: its params and result. */
export interface PermissionsListMethod {
  method: "permissions/list";
  params: PermissionsListParams;
  result: PermissionsListResult;
}

export interface PermissionsListParams {
  session_id?: string | null;
}

export interface PermissionsListResult {
  rules: Rule[];
  problems: string[];
}

/** `ping`: its params and result. */
export interface PingMethod {
  method: "ping";
  params: Empty;
  result: Empty;
}

/** One step of a plan (PROTOCOL.md "Plans"). */
export interface PlanEntry {
  step: string;
  status: PlanStatus;
}

/** A plan step's status (at most one `in_progress`): see PROTOCOL.md, Plans. */
export type PlanStatus = "completed" | "in_progress" | "pending";

/** The model's plan as ``update_plan`` left it (the whole list each time; ``entries`` empty: cleared). */
export interface PlanUpdate {
  type: "plan";
  explanation: string | null;
  entries: PlanEntry[];
  session_id: string;
  turn_id: string;
  seq: number;
}

/** What ``session/prompt {content}`` takes (PROTOCOL.md "Prompt content"). */
export interface PromptContentCapability {
  image: boolean;
  resource: boolean;
  resource_link: boolean;
  max_images_per_prompt: number;
  max_image_bytes: number;
}

/** A rule as a client sends it back with a ``permission/request`` answer (an edited ``suggested_rule``). */
export interface ProposedRule {
  tool: string;
  decision: RuleDecision;
  pattern: PatternWord[] | null;
  path: string | null;
  justification: string | null;
}

/** A session's waiting input, in the order it will be taken (``Session.queue``, ``queue_update``). */
export interface Queue {
  steers: WaitingSteer[];
  queued: QueuedTurn[];
}

/** The session's waiting input after every change; not part of any turn (``turn_id`` null). */
export interface QueueUpdate {
  type: "queue_update";
  turn_id: string | null;
  steers: WaitingSteer[];
  queued: QueuedTurn[];
  session_id: string;
  seq: number;
}

/** A turn waiting for the running one to end: a prompt, or a compaction (``message_id`` and ``text`` null). */
export interface QueuedTurn {
  turn_id: string;
  message_id: string | null;
  text: string | null;
  kind: "compaction" | "prompt";
}

/** What follows a `session/subscribe` answer: the missed `events`, none, or `snapshot_required`. */
export type Replay = "events" | "none" | "snapshot_required";

/** Who a message streamed during a turn is from: the model, the tools (their results), or the user (a steer). */
export type ReplyRole = "assistant" | "tool" | "user";

/** A level as asked for: one of ThinkingLevel, or `default` (follows the configured defaults). */
export type RequestedThinkingLevel = "default" | "high" | "low" | "max" | "medium" | "minimal" | "off" | "xhigh";

/** The connection whose answer decided a permission request (PROTOCOL.md "Transports"). */
export interface ResolvedBy {
  connection_id: string;
  client_name: string | null;
}

/** A file's text as it was when the prompt was admitted (embedded, or read from a link);
    ``truncated`` when it was cut at 256 KiB. */
export interface ResourceBlock {
  type: "resource";
  uri: string;
  mime_type: string | null;
  text: string;
  truncated: boolean;
}

/** An embedded file, as editors send an @-mention: exactly one of ``text`` and ``blob`` (base64). */
export interface ResourceInput {
  type: "resource";
  uri: string;
  text?: string | null;
  blob?: string | null;
  mime_type?: string | null;
}

/** A link kept as a link (another scheme, a directory): the model is told its URI. */
export interface ResourceLinkBlock {
  type: "resource_link";
  uri: string;
  name: string;
  mime_type: string | null;
}

/** A link: a ``file://`` one inside the session's cwd is read at admission. */
export interface ResourceLinkInput {
  type: "resource_link";
  uri: string;
  name: string;
  mime_type?: string | null;
}

export interface Retry {
  type: "retry";
  attempt: number;
  max_attempts: number;
  delay_ms: number;
  error: ErrorInfo;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** Who wrote a Message: the user, the model (`assistant`) or the tools (`tool`: their results). */
export type Role = "assistant" | "tool" | "user";

/** A permission rule (PROTOCOL.md "Permissions"): ``pattern`` for ``run_command`` (a
    command prefix, word by word), ``path`` for file tools (a glob relative to the cwd). */
export interface Rule {
  tool: string;
  decision: RuleDecision;
  source: RuleSource;
  pattern: PatternWord[] | null;
  path: string | null;
  justification: string | null;
  project: string | null;
  file: string | null;
  line: number | null;
}

/** What a permission rule does with the calls it matches. */
export type RuleDecision = "allow" | "ask" | "deny";

/** Where a permission rule comes from: see PROTOCOL.md, Permissions. */
export type RuleSource = "always" | "config" | "policy" | "session";

/** The OS sandbox this daemon found at start (PROTOCOL.md "Sandbox"); ``reason`` says why
    none works, or what the one found cannot do. */
export interface SandboxCapability {
  available: boolean;
  mechanism: "bubblewrap" | "landlock" | "sandbox-exec" | null;
  network_isolation: boolean;
  reason: string | null;
}

/** ``session/start {sandbox}``: what differs from config.toml's ``[sandbox]``. */
export interface SandboxParams {
  mode?: "off" | "read_only" | "workspace_write" | null;
  network?: boolean | null;
}

export interface ServerCapabilities {
  thinking_levels: string[];
  approval_policies: string[];
  batches: boolean;
  cancel_request: boolean;
  sandbox: SandboxCapability | null;
  steering: SteeringCapability;
  continue: boolean;
  prompt_content: PromptContentCapability | null;
  permission_rules: boolean;
  hooks: boolean;
  output_schema: OutputSchemaCapability;
  transport: TransportCapability | null;
  plans: boolean;
}

export interface ServerInfo {
  name: string;
  version: string;
}

export interface Session {
  session_id: string;
  title: string | null;
  cwd: string;
  model_id: string;
  thinking_level: RequestedThinkingLevel;
  approval_policy: ApprovalPolicy;
  created_at: string;
  updated_at: string;
  message_count: number;
  parent_id: string | null;
  status: SessionStatus;
  totals: Usage;
  cost: Cost | null;
  context: ContextFill | null;
  budget: Budget | null;
  sandbox: SessionSandbox | null;
  queue: Queue;
  plan: SessionPlan | null;
}

/** `session/budget`: its params and result. */
export interface SessionBudgetMethod {
  method: "session/budget";
  params: SessionBudgetParams;
  result: SessionOnlyResult;
}

export interface SessionBudgetParams {
  session_id: string;
  budget: BudgetParams | null;
}

/** `session/cancel`: its params and result. */
export interface SessionCancelMethod {
  method: "session/cancel";
  params: SessionIdParams;
  result: SessionCancelResult;
}

export interface SessionCancelResult {
  cancelled: boolean;
  dropped_queued: number;
  dropped_steers: DroppedSteer[];
}

/** `session/compact`: its params and result. */
export interface SessionCompactMethod {
  method: "session/compact";
  params: SessionCompactParams;
  result: SessionCompactResult;
}

export interface SessionCompactParams {
  session_id: string;
  instructions?: string | null;
}

export interface SessionCompactResult {
  compaction_id: string;
  queued: boolean;
}

/** `session/continue`: its params and result. */
export interface SessionContinueMethod {
  method: "session/continue";
  params: SessionIdParams;
  result: SessionContinueResult;
}

export interface SessionContinueResult {
  turn_id: string | null;
  action: ContinueAction;
}

/** `session/delete`: its params and result. */
export interface SessionDeleteMethod {
  method: "session/delete";
  params: SessionIdParams;
  result: SessionDeleteResult;
}

export interface SessionDeleteResult {
  deleted: boolean;
}

/** `session/fork`: its params and result. */
export interface SessionForkMethod {
  method: "session/fork";
  params: SessionForkParams;
  result: SessionOnlyResult;
}

export interface SessionForkParams {
  session_id: string;
  message_id?: string | null;
}

/** `session/get`: its params and result. */
export interface SessionGetMethod {
  method: "session/get";
  params: SessionIdParams;
  result: SessionResult;
}

/** Params of the methods that take only ``session_id``. */
export interface SessionIdParams {
  session_id: string;
}

/** `session/list`: its params and result. */
export interface SessionListMethod {
  method: "session/list";
  params: SessionListParams;
  result: SessionListResult;
}

export interface SessionListParams {
  cwd?: string | null;
  limit?: number;
  cursor?: string | null;
}

export interface SessionListResult {
  sessions: SessionListRow[];
  next_cursor: string | null;
}

/** A ``session/list`` row: the session, and how this daemon holds it. */
export interface SessionListRow {
  session_id: string;
  title: string | null;
  cwd: string;
  model_id: string;
  thinking_level: RequestedThinkingLevel;
  approval_policy: ApprovalPolicy;
  created_at: string;
  updated_at: string;
  message_count: number;
  parent_id: string | null;
  status: SessionStatus;
  totals: Usage;
  cost: Cost | null;
  context: ContextFill | null;
  budget: Budget | null;
  sandbox: SessionSandbox | null;
  queue: Queue;
  plan: SessionPlan | null;
  loaded: boolean;
  subscribers: number;
}

/** `session/messages`: its params and result. */
export interface SessionMessagesMethod {
  method: "session/messages";
  params: SessionMessagesParams;
  result: SessionMessagesResult;
}

export interface SessionMessagesParams {
  session_id: string;
  after_seq?: number | null;
  limit?: number | null;
}

export interface SessionMessagesResult {
  messages: Message[];
  next_seq: number | null;
  items: (MessageItem | CompactionItem)[];
}

/** Result of ``session/fork`` and ``session/rename``. */
export interface SessionOnlyResult {
  session: Session;
}

/** The latest plan the model kept with ``update_plan`` (``Session.plan``). */
export interface SessionPlan {
  explanation: string | null;
  entries: PlanEntry[];
  updated_at: string;
}

/** `session/prompt`: its params and result. */
export interface SessionPromptMethod {
  method: "session/prompt";
  params: SessionPromptParams;
  result: SessionPromptResult;
}

export interface SessionPromptParams {
  session_id: string;
  text?: string | null;
  content?: (TextInput | ImageInput | ResourceInput | ResourceLinkInput)[] | null;
  thinking_level?: string | null;
  delivery?: "queue" | "steer";
  expected_turn_id?: string | null;
  client_message_id?: string | null;
  output_schema?: { [key: string]: unknown } | null;
  output_retries?: number;
  max_turns?: number | null;
}

export interface SessionPromptResult {
  turn_id: string;
  message_id: string;
  queued: boolean;
  delivery: Admission;
}

/** `session/queue/remove`: its params and result. */
export interface SessionQueueRemoveMethod {
  method: "session/queue/remove";
  params: SessionQueueRemoveParams;
  result: SessionQueueRemoveResult;
}

export interface SessionQueueRemoveParams {
  session_id: string;
  message_id: string;
}

export interface SessionQueueRemoveResult {
  removed: boolean;
}

/** `session/rename`: its params and result. */
export interface SessionRenameMethod {
  method: "session/rename";
  params: SessionRenameParams;
  result: SessionOnlyResult;
}

export interface SessionRenameParams {
  session_id: string;
  title: string;
}

/** Result of ``session/start`` and ``session/get``. */
export interface SessionResult {
  session: Session;
  thinking: Thinking;
}

/** `session/resume`: its params and result. */
export interface SessionResumeMethod {
  method: "session/resume";
  params: SessionIdParams;
  result: SessionResumeResult;
}

export interface SessionResumeResult {
  session: Session;
  thinking: Thinking;
  messages: Message[];
  items: (MessageItem | CompactionItem)[];
  last_seq: number;
  epoch: string;
}

/** What confines the session's ``run_command`` (PROTOCOL.md "Sandbox").

    ``enforced`` is false when commands run unconfined (mode ``off``, or no sandbox works
    here); ``degraded`` names what the mechanism cannot enforce (``git``, ``home``,
    ``network``); ``auto_approve`` whether an enforced sandbox may stand in for ``ask``. */
export interface SessionSandbox {
  mode: "off" | "read_only" | "workspace_write";
  network: boolean;
  writable_roots: string[];
  mechanism: "bubblewrap" | "landlock" | "sandbox-exec" | null;
  enforced: boolean;
  degraded: string[];
  auto_approve: boolean;
}

/** `session/start`: its params and result. */
export interface SessionStartMethod {
  method: "session/start";
  params: SessionStartParams;
  result: SessionResult;
}

export interface SessionStartParams {
  model_id?: string | null;
  thinking_level?: string | null;
  display?: string | null;
  fallback?: string | null;
  cwd?: string | null;
  title?: string | null;
  system_prompt?: string | null;
  approval_policy?: ApprovalPolicy | null;
  budget?: BudgetParams | null;
  sandbox?: SandboxParams | null;
}

/** `running` while a turn runs in the session, else `idle`. */
export type SessionStatus = "idle" | "running";

/** `session/subscribe`: its params and result. */
export interface SessionSubscribeMethod {
  method: "session/subscribe";
  params: SessionSubscribeParams;
  result: SessionSubscribeResult;
}

export interface SessionSubscribeParams {
  session_id: string;
  after_seq?: number | null;
  epoch?: string | null;
}

/** The caller is subscribed; with ``replay: events`` the missed events follow this answer, in
    order, then live ones (PROTOCOL.md "Transports and several clients"). */
export interface SessionSubscribeResult {
  session: Session;
  thinking: Thinking;
  last_seq: number;
  epoch: string;
  replay: Replay;
  pending_requests: PermissionRequestParams[];
}

/** `session/unsubscribe`: its params and result. */
export interface SessionUnsubscribeMethod {
  method: "session/unsubscribe";
  params: SessionIdParams;
  result: SessionUnsubscribeResult;
}

export interface SessionUnsubscribeResult {
  subscribed: boolean;
}

export interface SessionUpdated {
  session: Session;
}

/** `session/updated`: its params. */
export interface SessionUpdatedNotification {
  method: "session/updated";
  params: SessionUpdated;
}

/** `shutdown`: its params and result. */
export interface ShutdownMethod {
  method: "shutdown";
  params: Empty;
  result: Empty;
}

/** ``capabilities.steering``: ``session/prompt``'s ``delivery`` values, ``session/queue/remove``,
    ``queue_update`` events, and ``client_message_id`` (PROTOCOL.md "Steering, the queue and continuing"). */
export interface SteeringCapability {
  deliveries: string[];
  queue_remove: boolean;
  queue_update: boolean;
  client_message_id: boolean;
}

/** Why a turn ended (`turn_end.stop_reason`). `end_turn`: the model finished its reply and asked for no more tools. `max_tokens`: the model's last reply was cut at its output-token limit (or its context window). `tool_limit`: the model was still asking for tools after the turn's maximum number of model calls. `refusal`: the provider refused or filtered the reply. `cancelled`: the turn was cancelled (`session/cancel`, `session/delete`, shutdown); `error` is null. `error`: the turn failed; `error` says why. `budget`: the session's budget was reached before the next model call; `error.message` names the budget and the amount spent (`session/budget` raises or clears it). `schema_failed`: the answer did not match the prompt's `output_schema` after `output_retries` retries; `error.errors` lists what did not match. */
export type StopReason = "budget" | "cancelled" | "end_turn" | "error" | "max_tokens" | "refusal" | "schema_failed" | "tool_limit";

export interface TextBlock {
  type: "text";
  text: string;
}

export interface TextDelta {
  type: "text_delta";
  message_id: string;
  index: number;
  delta: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface TextEnd {
  type: "text_end";
  message_id: string;
  index: number;
  text: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface TextInput {
  type: "text";
  text: string;
}

export interface TextStart {
  type: "text_start";
  message_id: string;
  index: number;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface Thinking {
  requested: RequestedThinkingLevel;
  effective: ThinkingLevel;
  supported: ThinkingLevel[];
  reason: string | null;
  budget_tokens: number | null;
  request_params: { [key: string]: unknown };
  display: "omitted" | "summarized";
  source: "config_default" | "model_default" | "prompt" | "provider_default" | "session";
  fallback: "default" | "error" | "nearest" | "off";
}

export interface ThinkingBlock {
  type: "thinking";
  text: string;
  redacted: boolean;
}

export interface ThinkingDelta {
  type: "thinking_delta";
  message_id: string;
  index: number;
  delta: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ThinkingEnd {
  type: "thinking_end";
  message_id: string;
  index: number;
  text: string;
  redacted: boolean;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** How hard a model thinks, in order from `off` to `max`. */
export type ThinkingLevel = "high" | "low" | "max" | "medium" | "minimal" | "off" | "xhigh";

/** `thinking/set`: its params and result. */
export interface ThinkingSetMethod {
  method: "thinking/set";
  params: ThinkingSetParams;
  result: ThinkingSetResult;
}

/** At least one field besides ``session_id``; ``budget_tokens: null`` clears a custom budget
    (omitted leaves it as it is). */
export interface ThinkingSetParams {
  session_id: string;
  level?: string | null;
  display?: string | null;
  budget_tokens?: number | null;
  fallback?: string | null;
}

export interface ThinkingSetResult {
  session_id: string;
  thinking: Thinking;
}

export interface ThinkingStart {
  type: "thinking_start";
  message_id: string;
  index: number;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** Before a model call whose thinking differs from what the turn last reported (``turn_start``
    or an earlier ``thinking_update``): what this call sends, with ``reason`` saying why. */
export interface ThinkingUpdate {
  type: "thinking_update";
  thinking: Thinking;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolCallBlock {
  type: "tool_call";
  call_id: string;
  name: string;
  arguments: { [key: string]: unknown };
}

export interface ToolCallDelta {
  type: "tool_call_delta";
  message_id: string;
  index: number;
  call_id: string;
  delta: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolCallEnd {
  type: "tool_call_end";
  message_id: string;
  index: number;
  call_id: string;
  name: string;
  arguments: { [key: string]: unknown };
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolCallStart {
  type: "tool_call_start";
  message_id: string;
  index: number;
  call_id: string;
  name: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolExecutionEnd {
  type: "tool_execution_end";
  call_id: string;
  name: string;
  is_error: boolean;
  result: string;
  message_id: string;
  sandbox?: ToolSandbox;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolExecutionOutput {
  type: "tool_execution_output";
  call_id: string;
  chunk: string;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolExecutionStart {
  type: "tool_execution_start";
  call_id: string;
  name: string;
  arguments: { [key: string]: unknown };
  permission: Permission | null;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface ToolResultBlock {
  type: "tool_result";
  call_id: string;
  is_error: boolean;
  text: string;
}

/** How one ``run_command`` ran: confined or not, and whether the sandbox seems to have
    stopped it (a best guess from its exit status and output; PROTOCOL.md "Sandbox"). */
export interface ToolSandbox {
  enforced: boolean;
  mechanism: "bubblewrap" | "landlock" | "sandbox-exec" | null;
  denied: boolean;
}

/** ``capabilities.transport``: how this connection reached the daemon, and what several
    clients share (PROTOCOL.md "Transports and several clients"). */
export interface TransportCapability {
  kind: TransportKind;
  connection_id: string;
  subscribe: boolean;
  ring_events: number;
  epoch: string;
  roles: string[];
}

/** How a connection reached the daemon. */
export type TransportKind = "stdio" | "unix" | "websocket";

export interface TurnEnd {
  type: "turn_end";
  stop_reason: StopReason;
  usage: Usage | null;
  error: ErrorInfo | null;
  structured_output: unknown;
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface TurnStart {
  type: "turn_start";
  model_id: string;
  thinking: Thinking;
  user_message_id: string | null;
  kind: "compaction" | "prompt";
  continued_from: string | null;
  notes: string[];
  session_id: string;
  turn_id: string;
  seq: number;
}

export interface Usage {
  input_tokens: number | null;
  output_tokens: number | null;
  reasoning_tokens: number | null;
  cache_read_tokens: number | null;
  cache_write_tokens: number | null;
}

/** After every model call, summaries included: the context fill, the call's usage, the
    session's running totals, and their cost (null where no price is known). */
export interface UsageEvent {
  type: "usage";
  context: ContextFill;
  usage: Usage;
  totals: Usage;
  cost: Cost | null;
  totals_cost: Cost | null;
  estimated: boolean;
  session_id: string;
  turn_id: string;
  seq: number;
}

/** A steer waiting to join the running turn; ``text`` is its text blocks joined by newlines. */
export interface WaitingSteer {
  message_id: string;
  text: string;
}

// --- helpers over the tables ---------------------------------------------------------------

/** A client → daemon method name. */
export type MethodName = keyof Methods;
/** The params a client sends with method `M`. */
export type ParamsOf<M extends MethodName> = Methods[M]["params"];
/** The result the daemon answers method `M` with. */
export type ResultOf<M extends MethodName> = Methods[M]["result"];

/** The request a client sends for method `M`. */
export interface RequestMessage<M extends MethodName = MethodName> {
  jsonrpc: "2.0";
  id: string | number;
  method: M;
  params: ParamsOf<M>;
}

/** Any notification, discriminated by `method`: `switch (message.method)` narrows `params`. */
export type NotificationMessage = {
  [M in keyof Notifications]: { jsonrpc: "2.0"; method: M; params: Notifications[M]["params"] };
}[keyof Notifications];

/** Any daemon → client request, discriminated by `method`; answer it with `DaemonRequests[M]["result"]`. */
export type DaemonRequestMessage = {
  [M in keyof DaemonRequests]: { jsonrpc: "2.0"; id: string; method: M; params: DaemonRequests[M]["params"] };
}[keyof DaemonRequests];
