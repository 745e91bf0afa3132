"""``ponder acp``: the daemon core served in the Agent Client Protocol (v1) dialect.

The same daemon parts as ``ponder serve`` (``daemon.server.core``: catalogue, providers,
store, ``SessionManager``, MCP) run behind ACP's methods, built the same way by
``open_daemon``; only the edges differ: ``AcpBridge`` turns events into ``session/update``,
``session/prompt`` stays open until its turn ended and answers with the stop reason, and
errors use ACP's codes where ACP has one (``-32000`` auth required for a provider without
credentials, ``-32002`` resource not found for an unknown session).

ponder's own extras are ``_ponder/...`` methods, advertised in
``agentCapabilities._meta.ponder.methods``; any other ``_`` method is ``-32601``.

Steering (until ACP's steering RFD is stable): ``agentCapabilities._meta.ponder.steering`` says
that a ``session/prompt`` with ``_meta: {"ponder": {"delivery": "steer", "expected_turn_id"?}}``
joins the running turn before its next model call and is answered when that turn ends; a plain
prompt while a turn runs keeps ACP's queue semantics (it waits for its own turn). ``/continue``
goes on with a turn that was cut off.

Budgets (``daemon.acp.budget``): ``_ponder/session/budget`` and the ``/budget`` command see and change
a session's budget; a turn a spent budget stopped answers ``max_turn_requests`` (PROTOCOL.md "ACP
mode") with the sentence that says which budget and how to raise it, as a message and in ``_meta``.
"""

import logging
import re
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from msgspec import UnsetType, to_builtins

from daemon import __version__
from daemon.acp import types as t
from daemon.acp.auth import CREDENTIALS_METHOD, auth_methods, reload_credentials
from daemon.acp.bridge import AcpBridge, PromptWaiter, usage_update_of
from daemon.acp.budget import BudgetCommand, budget_command, budget_sentence, merged
from daemon.acp.compaction import stored_compaction
from daemon.acp.config_options import config_options, set_config_option
from daemon.acp.content import prompt_content, title_for
from daemon.acp.modes import MODE_IDS, mode_state
from daemon.acp.plans import plan_update
from daemon.acp.replay import replay_updates
from daemon.config.settings import Config
from daemon.context.budget import tokens_spent
from daemon.conversation import ChatMessage
from daemon.errors import InvalidParams, PonderError, ProviderNotConfigured
from daemon.jsonrpc.connection import AnswerThen, Connection, IncomingLines, as_wire_error
from daemon.jsonrpc.framing import Outgoing
from daemon.server.core import Daemon, open_daemon
from daemon.server.lifecycle import serve_connection
from daemon.sessions.accounts import budget_from
from daemon.store import SessionRow
from protocol import methods as m
from protocol.errors import ErrorCode
from protocol.methods import BudgetParams, InputBlock, TextInput
from protocol.objects import Compaction, ErrorInfo

log = logging.getLogger("ponder.acp")

AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002
# ponder error code -> ACP error code, where ACP defines one for the same situation.
ACP_CODES = {
    int(ErrorCode.SESSION_NOT_FOUND): RESOURCE_NOT_FOUND,
    int(ErrorCode.PROVIDER_NOT_CONFIGURED): AUTH_REQUIRED,
}
STOP_REASONS = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "tool_limit": "max_turn_requests",
    "refusal": "refusal",
    "cancelled": "cancelled",
}
EXTENSION_METHODS = [
    "_ponder/models/list",
    "_ponder/auth/status",
    "_ponder/session/rename",
    "_ponder/session/fork",
    "_ponder/session/budget",
]
LIST_PAGE = 50
# ACP slash commands (sent as prompt text, e.g. "/compact keep the test names").
COMMANDS = [
    t.AvailableCommand(
        name="compact",
        description="Fold the older conversation into a summary to free context (nothing is deleted).",
        input=t.UnstructuredCommandInput(hint="optional: what the summary should keep"),
    ),
    t.AvailableCommand(
        name="continue",
        description="Go on with the last turn where it was cut off (a cancel, an error, the output limit, a crash).",
    ),
    t.AvailableCommand(
        name="budget",
        description="See or change the session's budget (raise a spent one to go on): $5, 200k tokens, or off.",
        input=t.UnstructuredCommandInput(hint="optional: $5, 200k tokens, both, or off"),
    ),
]
_COMPACT = re.compile(r"^\s*/compact(?:\s+(.*))?\s*$", re.DOTALL)
_CONTINUE = re.compile(r"^\s*/continue\s*$")
# ``agentCapabilities._meta.ponder.steering``: how an ACP client steers a running turn.
STEERING_META = {
    "prompt_meta": {"ponder": {"delivery": "steer", "expected_turn_id": "optional"}},
    "continue": "/continue",
}


def _steer_meta(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``_meta.ponder`` of a prompt that asks to steer the running turn; None for a plain prompt."""
    ponder = (meta or {}).get("ponder")
    if isinstance(ponder, dict) and ponder.get("delivery") == "steer":
        return ponder
    return None


def compact_command(text: str) -> str | None:
    """The instructions of a ``/compact [instructions]`` prompt ("" without any); None for any other prompt."""
    match = _COMPACT.match(text)
    if match is None:
        return None
    return (match.group(1) or "").strip()


class AcpError(PonderError):
    """An error already in ACP's terms (code and camelCase ``data``)."""

    def __init__(self, code: int, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.data = data  # may have a "message" key, which cannot go through **data
        self.code = code  # type: ignore[assignment]


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda match: match.group(1).upper(), name)


def acp_error(exc: PonderError) -> AcpError:
    if isinstance(exc, AcpError):
        return exc
    if isinstance(exc, InvalidParams):
        # An argument of a call below, placed as the ponder protocol places it (``content[2]`` of
        # a prompt stays ``content``, as it always was here, not ACP's ``prompt``).
        exc.place("$.params")
    exc = as_wire_error(exc)  # the one mapping (a store's own error becomes InvalidParams)
    code = int(exc.code)
    return AcpError(ACP_CODES.get(code, code), exc.message, {_camel(key): value for key, value in exc.data.items()})


def _acp_errors(handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    async def call(params: Any) -> Any:
        try:
            return await handler(params)
        except PonderError as exc:
            raise acp_error(exc) from None

    return call


def _wants_terminal_auth(capabilities: dict[str, Any] | None) -> bool:
    auth = (capabilities or {}).get("auth")
    return isinstance(auth, dict) and auth.get("terminal") is True


def turn_failure(outcome_error: ErrorInfo | None, model_id: str) -> AcpError:
    """A failed turn as the prompt's JSON-RPC error, the provider's message in ``data``."""
    info = outcome_error or ErrorInfo(code=int(ErrorCode.INTERNAL_ERROR), message="The turn failed.")
    data = {
        "message": info.message,
        "provider": model_id.split("/", 1)[0],
        "modelId": model_id,
        "providerStatus": info.provider_status,
        "ponderCode": info.code,
    }
    return AcpError(ACP_CODES.get(info.code, info.code), info.message, data)


def prompt_answer(waiter: PromptWaiter) -> t.PromptResponse:
    """The answer to a prompt whose turn ended: its stop reason, or the turn's failure.

    A prompt the client cancelled is ``cancelled`` whatever the turn's end looked like
    (a provider error racing the cancel included), as ACP requires.
    """
    outcome = waiter.outcome
    assert outcome is not None
    if waiter.cancel_requested or outcome.stop_reason == "cancelled":
        return t.PromptResponse(stop_reason="cancelled")
    if outcome.stop_reason == "error":
        raise turn_failure(outcome.error, outcome.model_id)
    if outcome.stop_reason == "budget":
        # PROTOCOL "ACP mode": max_turn_requests; which budget and how much was spent go in _meta (and
        # as a message, sent by the prompt's handler), with the code a budget stop has on ponder's wire.
        info = outcome.error
        spent = {"stopReason": "budget", "message": acp_wording(info.message) if info else None}
        meta = {"ponder": {**spent, "code": info.code if info else int(ErrorCode.BUDGET_EXCEEDED)}}
        return t.PromptResponse(stop_reason="max_turn_requests", meta=meta)
    return t.PromptResponse(stop_reason=STOP_REASONS.get(outcome.stop_reason, "end_turn"))  # type: ignore[arg-type]


def acp_wording(sentence: str) -> str:
    """A daemon sentence as an editor's user acts on it: the ``/budget`` command, not ponder's method."""
    return sentence.replace("with session/budget", "with /budget")


class AcpServer:
    """ACP's methods over the daemon's parts."""

    def __init__(self, daemon: Daemon, bridge: AcpBridge) -> None:
        self.daemon = daemon
        self.config = daemon.config
        self.sessions = daemon.sessions
        self.bridge = bridge

    def register(self) -> None:
        methods: dict[str, tuple[type, Callable[[Any], Awaitable[Any]]]] = {
            "initialize": (t.InitializeRequest, self.initialize),
            "authenticate": (t.AuthenticateRequest, self.authenticate),
            "session/new": (t.NewSessionRequest, self.session_new),
            "session/load": (t.LoadSessionRequest, self.session_load),
            "session/resume": (t.ResumeSessionRequest, self.session_resume),
            "session/list": (t.ListSessionsRequest, self.session_list),
            "session/close": (t.SessionIdRequest, self.session_close),
            "session/delete": (t.SessionIdRequest, self.session_delete),
            "session/set_config_option": (t.SetConfigOptionRequest, self.session_set_config_option),
            "session/set_mode": (t.SetSessionModeRequest, self.session_set_mode),
            "session/prompt": (t.PromptRequest, self.session_prompt),
            "session/cancel": (t.SessionIdRequest, self.session_cancel),
            "_ponder/models/list": (t.ModelsListRequest, self.models_list),
            "_ponder/auth/status": (m.Empty, self.auth_status),
            "_ponder/session/rename": (t.RenameRequest, self.session_rename),
            "_ponder/session/fork": (t.ForkRequest, self.session_fork),
            "_ponder/session/budget": (t.BudgetRequest, self.session_budget),
        }
        for method, (params_type, handler) in methods.items():
            self.bridge.connection.register(method, params_type, _acp_errors(handler))

    # --- initialize and authenticate ----------------------------------------------------

    async def initialize(self, params: t.InitializeRequest) -> t.InitializeResponse:
        client = params.client_info
        log.info(
            "ACP client %s %s (protocol %r)",
            client.name if client else "?",
            client.version if client else "",
            params.protocol_version,
        )
        self.bridge.client_name = client.name if client else None
        fs = (params.client_capabilities or {}).get("fs")
        self.bridge.fs_reads = isinstance(fs, dict) and fs.get("readTextFile") is True
        self.bridge.fs_writes = isinstance(fs, dict) and fs.get("writeTextFile") is True
        session_capabilities = (params.client_capabilities or {}).get("session")
        self.bridge.compaction_updates = (
            isinstance(session_capabilities, dict) and session_capabilities.get("compaction") is not None
        )
        problems = await self.daemon.problems_now()  # waits for the sandbox probe
        # Version negotiation: ponder speaks ACP 1 only; a client asking for anything else
        # hears 1 and decides whether it can go on.
        return t.InitializeResponse(
            protocol_version=t.PROTOCOL_VERSION,
            agent_capabilities=t.AgentCapabilities(
                load_session=True,
                prompt_capabilities=t.PromptCapabilities(image=True, audio=False, embedded_context=True),
                mcp_capabilities=t.McpCapabilities(http=False, sse=False),
                session_capabilities=t.SessionCapabilities(list={}, resume={}, close={}, delete={}),
                meta={
                    "ponder": {
                        "version": __version__,
                        "home": str(self.config.home),
                        "methods": EXTENSION_METHODS,
                        "steering": STEERING_META,
                        "problems": problems,  # e.g. a store that could not be opened, no sandbox
                        "sandbox": to_builtins(self.daemon.sandbox.capability()),
                    }
                },
            ),
            auth_methods=auth_methods(self.config, terminal=_wants_terminal_auth(params.client_capabilities)),
            agent_info=t.Implementation(name="ponder", title="ponder", version=__version__),
        )

    async def authenticate(self, params: t.AuthenticateRequest) -> t.Empty:
        if params.method_id != CREDENTIALS_METHOD:
            raise InvalidParams(
                f"Auth method {params.method_id!r} cannot be used with authenticate.",
                path="$.params.methodId",
                allowed=[CREDENTIALS_METHOD],
            )
        await self.reload_credentials()
        return t.Empty()

    async def reload_credentials(self) -> bool:
        """Pick up keys added to config.toml and a device sign-in done since start-up."""
        loaded = await anyio.to_thread.run_sync(reload_credentials, self.config)
        if loaded:
            await self.bridge.refresh_options()  # their models are now selectable
        return bool(loaded)

    # --- sessions -----------------------------------------------------------------------

    def _open(self, row: SessionRow) -> list[t.ConfigOption]:
        options = config_options(self.sessions, row)
        self.bridge.open_session(row, options)
        return options

    async def _open_fresh(self, row: SessionRow) -> list[t.ConfigOption]:
        """The options as a session opens: first ask the discovering providers for their models, as models/list does."""
        await self.daemon.discover_models()
        return self._open(row)

    async def _attach_mcp(self, row: SessionRow, servers: list[t.McpServer]) -> None:
        """Hand the client's stdio MCP servers for the session to the MCP manager (which
        replaces the session's previous set); http/sse are not offered."""
        if servers:
            log.info("session %s: MCP servers from the client: %s", row.id, ", ".join(s.name for s in servers))
        skipped = [s.name for s in servers if not s.is_stdio]
        if skipped:
            log.warning("session %s: ignoring non-stdio MCP servers %s (not advertised)", row.id, ", ".join(skipped))
        if self.daemon.mcp is not None:
            stdio = [
                {
                    "name": s.name,
                    "command": s.command,
                    "args": s.args,
                    "env": [{"name": e.name, "value": e.value} for e in s.env],
                }
                for s in servers
                if s.is_stdio
            ]
            await self.daemon.mcp.add_session_servers(row.id, stdio, cwd=row.cwd)

    async def _detach_mcp(self, session_id: str) -> None:
        if self.daemon.mcp is not None:
            await self.daemon.mcp.remove_session_servers(session_id)

    def _note_cwd(self, requested: str, row: SessionRow) -> None:
        # Only a note for the log: a cwd that cannot even be resolved (``~nosuchuser``, a NUL
        # byte) must not fail a load whose session already has its directory.
        try:
            same = Path(requested).expanduser().resolve() == Path(row.cwd)
        except (OSError, ValueError, RuntimeError):
            same = False
        if not same:
            log.info("session %s keeps its directory %s (the client asked for %r)", row.id, row.cwd, requested)

    async def session_new(self, params: t.NewSessionRequest) -> AnswerThen:
        live = await self.sessions.start(
            model_id=None, thinking_level=None, cwd=params.cwd, title=None, system_prompt=None, approval_policy=None
        )
        session_id = live.row.id
        # Nothing about the session goes out before the answer that names it; its commands follow it.
        self.bridge.hold_updates(session_id)
        try:
            await self._attach_mcp(live.row, params.mcp_servers)
            options = await self._open_fresh(live.row)
        except BaseException:
            self.bridge.release_updates(session_id)
            raise
        answer = t.NewSessionResponse(session_id=session_id, config_options=options, modes=mode_state(live.row))
        return AnswerThen(answer, partial(self._announced, session_id))

    async def _announced(self, session_id: str) -> None:
        """The ``session/new`` answer is out: the session's held updates may follow, then its commands."""
        self.bridge.release_updates(session_id)
        await self.bridge.update(session_id, t.AvailableCommandsUpdate(available_commands=COMMANDS))

    async def session_load(self, params: t.LoadSessionRequest) -> t.LoadSessionResponse:
        live = await self.sessions.get(params.session_id)
        self._note_cwd(params.cwd, live.row)
        await self._attach_mcp(live.row, params.mcp_servers)
        ids = [p.attachment_id for m in live.history if m.role == "user" for p in m.parts if p.attachment_id]
        images = await self.sessions.store.get_attachments(ids) if ids else {}
        for update in self._replay(live.history, live.compactions, live.row.cwd, images):
            await self.bridge.update(live.row.id, update)
        await self._send_plan(live.row)
        await self.bridge.update(live.row.id, t.AvailableCommandsUpdate(available_commands=COMMANDS))
        await self._send_usage(live.row)
        return t.LoadSessionResponse(config_options=await self._open_fresh(live.row), modes=mode_state(live.row))

    def _replay(
        self, history: list[ChatMessage], compactions: list[Compaction], cwd: str, images: dict[str, bytes]
    ) -> list[t.SessionUpdate]:
        """The stored history's updates, each stored compaction at its place (after the message of its seq)."""
        updates: list[t.SessionUpdate] = []
        done = 0
        for compaction in compactions:
            upto = done
            while upto < len(history) and history[upto].seq <= compaction.seq:
                upto += 1
            updates += replay_updates(history[done:upto], self.sessions.tools, cwd, images)
            updates.append(stored_compaction(compaction, capable=self.bridge.compaction_updates))
            done = upto
        return updates + replay_updates(history[done:], self.sessions.tools, cwd, images)

    async def session_resume(self, params: t.ResumeSessionRequest) -> t.ResumeSessionResponse:
        live = await self.sessions.get(params.session_id)
        self._note_cwd(params.cwd, live.row)
        await self._attach_mcp(live.row, params.mcp_servers)
        await self._send_plan(live.row)
        await self.bridge.update(live.row.id, t.AvailableCommandsUpdate(available_commands=COMMANDS))
        await self._send_usage(live.row)
        return t.ResumeSessionResponse(config_options=await self._open_fresh(live.row), modes=mode_state(live.row))

    async def _send_plan(self, row: SessionRow) -> None:
        """The session's latest plan, if it has one, after the replayed history."""
        if row.plan is not None:
            await self.bridge.update(row.id, plan_update(row.plan.explanation, row.plan.entries))

    async def _send_usage(self, row: SessionRow) -> None:
        """Where the reopened session stands: its last context fill and its cost so far."""
        update = usage_update_of(row.context, row.cost)
        if update is not None:
            await self.bridge.update(row.id, update)

    async def session_list(self, params: t.ListSessionsRequest) -> t.ListSessionsResponse:
        cwd = params.cwd
        if cwd is not None:
            if not Path(cwd).is_absolute():
                raise InvalidParams(f"cwd must be an absolute path, got {cwd!r}.", path="$.params.cwd")
            try:
                cwd = str(Path(cwd).resolve())  # sessions record their directory resolved
            except (OSError, ValueError, RuntimeError) as exc:
                raise InvalidParams(f"cwd cannot be used: {exc}.", path="$.params.cwd") from None
        rows, cursor = await self.daemon.list_sessions(cwd, LIST_PAGE, params.cursor)
        return t.ListSessionsResponse(
            sessions=[t.SessionInfo(session_id=r.id, cwd=r.cwd, title=r.title, updated_at=r.updated_at) for r in rows],
            next_cursor=cursor,
        )

    async def session_close(self, params: t.SessionIdRequest) -> t.Empty:
        await self.sessions.row(params.session_id)  # unknown ids are an error
        if self.bridge.attached:  # a shared daemon: only this client's prompts, not another's turn
            await self.bridge.cancel_turns(params.session_id)
        else:
            await self.cancel(params.session_id)
        self.bridge.close_session(params.session_id)
        await self._detach_mcp(params.session_id)
        return t.Empty()

    async def session_delete(self, params: t.SessionIdRequest) -> t.Empty:
        await self.sessions.row(params.session_id)
        await self.bridge.cancel_turns(params.session_id)  # its waiting prompts are answered "cancelled"
        await self.sessions.delete(params.session_id)
        self.bridge.close_session(params.session_id)
        await self._detach_mcp(params.session_id)
        return t.Empty()

    async def session_set_config_option(self, params: t.SetConfigOptionRequest) -> t.SetConfigOptionResponse:
        with self.bridge.quiet(params.session_id):  # the answer carries the new options
            row = await set_config_option(self.sessions, params)
        return t.SetConfigOptionResponse(config_options=self._open(row))

    async def session_set_mode(self, params: t.SetSessionModeRequest) -> AnswerThen:
        """The session's approval policy becomes the mode (stored); ``current_mode_update`` follows the answer."""
        if params.mode_id not in MODE_IDS:
            raise InvalidParams(
                f"Unknown mode {params.mode_id!r}; the modes are {', '.join(MODE_IDS)}.",
                path="$.params.modeId",
                allowed=MODE_IDS,
            )
        await self.sessions.row(params.session_id)  # an unknown session is an error, not a new row
        with self.bridge.quiet(params.session_id):
            row = await self.sessions.update(params.session_id, approval_policy=params.mode_id)
        return AnswerThen(t.Empty(), partial(self.bridge.show_mode, row.id, row.approval_policy))

    # --- prompt turns ---------------------------------------------------------------------

    async def session_prompt(self, params: t.PromptRequest) -> t.PromptResponse:
        content = prompt_content(params.prompt)
        text = "".join(block.text for block in content if isinstance(block, TextInput))
        session_id = params.session_id
        waiter = self.bridge.begin_prompt(session_id)  # before anything is awaited
        # ``/compact`` and ``/continue`` are prompts of text alone.
        text_only = all(isinstance(b, TextInput) for b in content)
        instructions = compact_command(text) if text_only else None
        steer = _steer_meta(params.meta)
        budget = budget_command(text) if text_only else None
        try:
            if budget is not None:
                return await self._budget_command(session_id, budget)
            if text_only and _CONTINUE.match(text):
                turn_id = await self.sessions.continue_turn(session_id)
                if turn_id is None:
                    return t.PromptResponse(stop_reason="end_turn", meta={"ponder": {"action": "nothing_to_continue"}})
            else:
                try:
                    turn_id = await self._admit(session_id, content, instructions, steer)
                except ProviderNotConfigured:
                    # A key added to config.toml, or a terminal sign-in, since start-up.
                    if not await self.reload_credentials():
                        raise
                    turn_id = await self._admit(session_id, content, instructions, steer)
            await self.bridge.admitted(waiter, turn_id)
            if instructions is None and steer is None:
                await self._title_if_untitled(session_id, params.prompt)
            await waiter.done.wait()
            outcome = waiter.outcome
            if outcome is not None and outcome.stop_reason == "budget" and outcome.error is not None:
                # The editor shows max_turn_requests: the message says which budget, and how to raise it.
                message = t.AgentMessageChunk(content=t.TextContent(text=acp_wording(outcome.error.message)))
                await self.bridge.update(session_id, message)
        except anyio.get_cancelled_exc_class():
            # $/cancel_request (or shutdown): the client stopped waiting, so stop the turn; but a
            # client that left a shared daemon cancels nothing (PROTOCOL.md "Transports").
            if waiter.turn_id is not None and not self.bridge.detached:
                with anyio.CancelScope(shield=True):
                    await self.bridge.cancel_turns(session_id, [waiter.turn_id])
            raise
        finally:
            self.bridge.end_prompt(waiter)
        return prompt_answer(waiter)

    async def _admit(
        self,
        session_id: str,
        content: list[InputBlock],
        compact_instructions: str | None,
        steer: dict[str, Any] | None,
    ) -> str:
        """The prompt's turn: ``/compact [instructions]`` is a compaction turn, a steer joins the
        running turn (its id), anything else a prompt (its blocks admitted as ``session/prompt
        {content}``: a link outside the cwd stays a link)."""
        if compact_instructions is not None:
            turn_id, _compaction_id, _queued = await self.sessions.compact(session_id, compact_instructions or None)
            return turn_id
        if steer is not None:
            expected = steer.get("expected_turn_id")
            if expected is not None and not isinstance(expected, str):
                raise InvalidParams("expected_turn_id must be a string.", path="$.params._meta.ponder.expected_turn_id")
            admitted = await self.sessions.prompt(
                session_id, None, content=content, links_outside_cwd=True, delivery="steer", expected_turn_id=expected
            )
            return admitted.turn_id
        # A prompt while a turn runs waits for it (ACP's queue semantics): delivery "queue".
        admitted = await self.sessions.prompt(session_id, None, content=content, links_outside_cwd=True)
        return admitted.turn_id

    async def _title_if_untitled(self, session_id: str, blocks: list[t.PromptBlock]) -> None:
        """Name an untitled session after its first prompt (ACP has no rename of its own)."""
        try:
            row = await self.sessions.row(session_id)
            if not self.bridge.is_open(row.id):
                self._open(row)
            title = title_for(blocks)
            if row.title is None and title:
                await self.sessions.update(session_id, title=title)  # announced as session_info_update
        except PonderError as exc:  # a title is not worth failing a running turn's prompt for
            log.warning("could not title session %s: %s", session_id, exc.message)

    async def cancel(self, session_id: str) -> None:
        """Stop the session's running turn and drop its queued prompts (all answered "cancelled")."""
        await self.bridge.cancel_turns(session_id)
        await self.sessions.cancel(session_id)

    async def session_cancel(self, params: t.SessionIdRequest) -> t.Empty:
        await self.cancel(params.session_id)
        return t.Empty()

    # --- ponder's extensions ----------------------------------------------------------------

    async def models_list(self, params: t.ModelsListRequest) -> m.ModelsListResult:
        return await self.daemon.models_list(params.provider)

    async def auth_status(self, params: m.Empty) -> m.AuthStatusResult:
        return await self.daemon.auth_status()

    async def session_rename(self, params: t.RenameRequest) -> t.Empty:
        await self.sessions.row(params.session_id)
        await self.sessions.update(params.session_id, title=params.title)
        return t.Empty()

    async def session_fork(self, params: t.ForkRequest) -> t.ForkResponse:
        row = await self.sessions.fork(params.session_id, params.message_id)
        return t.ForkResponse(session_id=row.id)

    async def session_budget(self, params: t.BudgetRequest) -> t.BudgetResponse:
        """``_ponder/session/budget``: ponder's ``session/budget`` (left without ``budget``: only read)."""
        if isinstance(params.budget, UnsetType):
            row = await self.sessions.row(params.session_id)
        else:
            limits = params.budget
            given = None if limits is None else BudgetParams(max_cost=limits.max_cost, max_tokens=limits.max_tokens)
            row = await self.sessions.set_budget(params.session_id, budget_from(given))
        budget = row.budget_in_force(self.config.budget)
        return t.BudgetResponse(
            budget=None if budget is None else t.BudgetShown(max_cost=budget.max_cost, max_tokens=budget.max_tokens),
            own=row.budget_own,
            tokens_used=tokens_spent(row.totals),
            cost_used=row.cost.amount if row.cost else None,
        )

    async def _budget_command(self, session_id: str, command: BudgetCommand) -> t.PromptResponse:
        """``/budget [...]``: shows, sets or clears the budget at once (no turn, nothing stored in the
        history), answering with one message; ``end_turn``."""
        row = await self.sessions.row(session_id)
        if not command.show:
            row = await self.sessions.set_budget(session_id, merged(command, row.budget_in_force(self.config.budget)))
        sentence = budget_sentence(row, row.budget_in_force(self.config.budget))
        await self.bridge.update(session_id, t.AgentMessageChunk(content=t.TextContent(text=sentence)))
        return t.PromptResponse(stop_reason="end_turn", meta={"ponder": {"action": "budget"}})


class _NoticeEnd:
    """The incoming stream, setting ``ended`` when the client closes its end (EOF)."""

    def __init__(self, stream: IncomingLines, ended: anyio.Event) -> None:
        self._stream = stream
        self._ended = ended

    async def __aenter__(self) -> "_NoticeEnd":
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> Any:
        return await self._stream.__aexit__(*exc_info)  # type: ignore[arg-type]

    def __aiter__(self) -> "_NoticeEnd":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            self._ended.set()
            raise

    def receive_nowait(self) -> Any:
        return self._stream.receive_nowait()  # its end is seen (and told) by the next ``__anext__``


async def _cancel_prompts_after(event: anyio.Event, server: AcpServer) -> None:
    """Once ``event`` is set, answer every waiting prompt "cancelled" (by ending its turn),
    also prompts admitted later; runs until the connection is gone."""
    await event.wait()
    while True:
        arrived = server.bridge.next_prompt()  # taken first: a prompt arriving meanwhile sets it
        for session_id in server.bridge.sessions_waiting():
            await server.cancel(session_id)
        await arrived.wait()


async def serve_acp(
    config: Config,
    incoming: IncomingLines,
    outgoing: MemoryObjectSendStream[Outgoing],  # bytes; the writer also takes rpc's marks
    *,
    handle_signals: bool = False,
    on_ready: Callable[[Daemon], None] | None = None,
) -> None:
    """Serve one ACP connection until end of input or a signal, with the same parts and
    lifecycle as ``ponder serve`` (``daemon.server.core``, ``daemon.server.lifecycle``).

    Unlike ponder's own protocol, an ACP prompt stays open for its whole turn, so at end
    of input or on a shutdown signal the running turns are cancelled at once: every
    waiting prompt is answered ``cancelled``, other requests in flight as usual.
    """
    connection = Connection(outgoing, cancel_method="$/cancel_request", cancel_id_field="requestId")
    bridge = AcpBridge(connection)
    async with open_daemon(config, connection, bridge) as daemon:
        bridge.attach(daemon.sessions)
        server = AcpServer(daemon, bridge)
        server.register()
        input_ended = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_prompts_after, input_ended, server)
            tg.start_soon(_cancel_prompts_after, daemon.shutdown_requested, server)
            if on_ready is not None:
                on_ready(daemon)
            watched = _NoticeEnd(incoming, input_ended)
            await serve_connection(daemon, watched, handle_signals=handle_signals)
            tg.cancel_scope.cancel()
