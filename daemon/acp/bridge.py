"""The ``ClientBridge`` of ACP: ponder's turn events as ``session/update`` notifications,
approvals as ``session/request_permission``, and the bookkeeping a blocking
``session/prompt`` needs.

Translation, event by event:

- thinking and text deltas become ``agent_thought_chunk`` / ``agent_message_chunk``,
  one stable ``messageId`` per block (derived from the stored message id and the block's
  position, so ``session/load`` replays them under the same ids). If a block's final
  text holds more than its deltas carried, the rest is sent at its end, so the chunks
  of a block always add up to exactly the stored text.
- a model's tool call becomes ``tool_call`` (``pending``, with kind, title, rawInput and
  locations) once its arguments are complete; running it sends ``tool_call_update``
  ``in_progress``, then ``completed``/``failed`` with the result (edits as a diff). Calls
  a cancelled turn never finished are closed as ``failed``.
- each model call's ``usage`` event becomes ``usage_update`` (tokens in context / window, and
  the session's cumulative cost); ``session/load`` and ``session/resume`` send the last one
  (``usage_update_of``). ACP requires a window size: a model whose window is unknown sends none.
- a ``retry`` re-checks the config options: a provider that refused the thinking level
  narrowed the levels the thought-level selector offers (``config_option_update``).
- a ``thinking_update`` (one model call sends other thinking than the turn last reported)
  becomes a ``config_option_update`` whose thought-level selector shows that call's level and
  why; when the turn ends, the session's own options are shown again.
- a compaction becomes ``compaction_update`` (in_progress, then completed/failed/cancelled, or the
  extension status ``_skipped``) for a client that advertises ``session.compaction`` (unstable),
  else one short agent message when it ends.
- a ``plan`` event (``update_plan``) becomes a ``plan`` update; the ``update_plan`` call itself
  gets no tool-call card.
- ``turn_end`` resolves the waiting ``session/prompt``; it is delivered after every
  other event of the turn, so the prompt's answer follows all of its updates.
- ``session_updated`` sends ``session_info_update`` when the title changed and
  ``config_option_update`` when the config options changed other than through the
  client's own ``session/set_config_option`` (whose answer carries them).
"""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec

from daemon.acp import toolcalls
from daemon.acp import types as t
from daemon.acp.compaction import compaction_ended, compaction_started
from daemon.acp.config_options import THOUGHT_LEVEL, call_thought_level, config_options
from daemon.acp.files import EditorFiles
from daemon.acp.plans import PLAN_TOOL, plan_update
from daemon.agent import CANCELLED_RESULT
from daemon.errors import PonderError
from daemon.jsonrpc.connection import Connection
from daemon.sessions.bridge import PermissionAnswer
from daemon.sessions.manager import SessionManager
from daemon.store import SessionRow
from daemon.tools.base import ToolError
from protocol import events as ev
from protocol.methods import PermissionRequestParams, PermissionRequestResult
from protocol.objects import ContextFill, Cost, ErrorInfo, Session, TextBlock, Thinking

log = logging.getLogger("ponder.acp")

# ponder's permission decisions as ACP options (PROTOCOL.md "Permissions": ACP options).
_OPTION_KINDS: Final[dict[str, t.PermissionKind]] = {
    "allow_once": "allow_once",
    "allow_session": "allow_always",
    "allow_always": "allow_always",
    "deny": "reject_once",
    "deny_always": "reject_always",
}
_OPTION_NAMES: Final = {
    "allow_once": "Allow",
    "allow_session": "Allow for this session",
    "allow_always": "Always allow in this project",
    "deny": "Reject",
    "deny_always": "Always reject in this project",
}


@dataclass
class TurnOutcome:
    stop_reason: str
    error: ErrorInfo | None
    model_id: str


@dataclass(eq=False)
class PromptWaiter:
    """A ``session/prompt`` in flight: being admitted (no ``turn_id`` yet), then waiting
    for its turn to end."""

    session_id: str
    turn_id: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: TurnOutcome | None = None
    cancel_requested: bool = False  # session/cancel arrived before the turn ended


@dataclass
class _Block:
    acp_message_id: str
    sent: list[str] = field(default_factory=list)


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any]
    before: toolcalls.Snapshot | None = None
    finished: bool = False


@dataclass
class _Turn:
    """What the translation of one running turn needs to remember."""

    session_id: str
    model_id: str
    cwd: str
    blocks: dict[tuple[str, int], _Block] = field(default_factory=dict)
    calls: dict[str, _Call] = field(default_factory=dict)
    compactions: dict[str, int] = field(default_factory=dict)  # compaction id -> tokens before
    thinking_changed: bool = False  # a thinking_update showed one call's thinking in the options


class AcpBridge:
    can_ask = True  # every ACP client answers session/request_permission

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.sessions: SessionManager | None = None  # attached once the daemon exists
        self._turns: dict[str, _Turn] = {}
        self._prompts: set[PromptWaiter] = set()  # every session/prompt in flight
        # The prompts answered when a turn ends: its own, and the steers that joined it.
        self._by_turn: dict[str, list[PromptWaiter]] = {}
        self._doomed: set[str] = set()  # turns to cancel the moment they start
        self._open: dict[str, tuple[str | None, bytes]] = {}  # session -> (title, encoded options) last sent
        self._modes: dict[str, str] = {}  # session -> the mode (approval policy) the client was last shown
        self._quiet: dict[str, int] = {}
        self._prompt_begun = anyio.Event()  # set (and replaced) when a session/prompt arrives
        # New sessions whose id the client does not know yet (their session/new answer is not
        # out): their updates wait until it is (PROTOCOL.md "ACP mode in an editor").
        self._unannounced: dict[str, anyio.Event] = {}
        # The client advertised ``clientCapabilities.session.compaction`` (unstable): compaction_update
        # notifications; otherwise a compaction is told as a short agent message.
        self.compaction_updates = False
        # ``clientCapabilities.fs``: the file tools read and write through the editor (``files_for``).
        self.fs_reads = False
        self.fs_writes = False
        self.client_name: str | None = None  # clientInfo.name from initialize
        # Attached to a listening daemon (``ponder acp --attach``): the file tools use the disk
        # (PROTOCOL.md "ACP mode"), ``following`` subscribes the connection to a session it opens
        # or prompts, and once the client has left (``detached``) its open prompts cancel nothing.
        self.attached = False
        self.following: Callable[[str], None] | None = None
        self.unfollowing: Callable[[str], None] | None = None
        self.detached = False

    def attach(self, sessions: SessionManager) -> None:
        self.sessions = sessions

    @property
    def _manager(self) -> SessionManager:
        assert self.sessions is not None, "AcpBridge.attach was not called"
        return self.sessions

    async def update(self, session_id: str, update: t.SessionUpdate) -> None:
        held = self._unannounced.get(session_id)
        if held is not None:
            await held.wait()
        await self.connection.notify("session/update", t.SessionNotification(session_id=session_id, update=update))

    def keeps_loaded(self, session_id: str, released: Callable[[], None]) -> bool:
        return False  # stdio ``ponder acp``: its one client follows every session (the plain idle rule)

    def files_for(self, session_id: str) -> EditorFiles | None:
        if self.attached or not (self.fs_reads or self.fs_writes):
            return None
        return EditorFiles(self.connection, session_id, reads=self.fs_reads, writes=self.fs_writes)

    def _reader(self, session_id: str) -> toolcalls.Reader:
        """How a diff reads a file: through the editor when the file tools do."""
        files = self.files_for(session_id)
        if files is None or not files.reads:
            return toolcalls.disk_text

        async def editor_text(path: Path) -> Any:
            try:
                return await files.read_text(path)
            except ToolError:  # most editors refuse a file that does not exist: a new file
                exists = await anyio.to_thread.run_sync(path.exists)
                return toolcalls.UNREADABLE if exists else None

        return editor_text

    def hold_updates(self, session_id: str) -> None:
        """Updates for ``session_id`` wait until ``release_updates``: the client cannot know the
        session before the answer that names it."""
        self._unannounced.setdefault(session_id, anyio.Event())

    def release_updates(self, session_id: str) -> None:
        held = self._unannounced.pop(session_id, None)
        if held is not None:
            held.set()

    # --- sessions the client has open ------------------------------------------------------

    def open_session(self, row: SessionRow, options: list[t.ConfigOption]) -> None:
        self._open[row.id] = (row.title, msgspec.json.encode(options))
        self._modes[row.id] = row.approval_policy
        if self.following is not None:
            self.following(row.id)

    def is_open(self, session_id: str) -> bool:
        return session_id in self._open

    def close_session(self, session_id: str) -> None:
        self._open.pop(session_id, None)
        self._modes.pop(session_id, None)
        if self.unfollowing is not None and not self.waiting(session_id):
            self.unfollowing(session_id)

    @contextmanager
    def quiet(self, session_id: str) -> Iterator[None]:
        """Changes made inside are answered by the caller, not announced as updates."""
        self._quiet[session_id] = self._quiet.get(session_id, 0) + 1
        try:
            yield
        finally:
            self._quiet[session_id] -= 1
            if not self._quiet[session_id]:
                del self._quiet[session_id]

    async def session_updated(self, session: Session) -> None:
        known = self._open.get(session.session_id)
        if known is None:
            return
        title, sent_options = known
        if session.title != title:
            await self.update(
                session.session_id, t.SessionInfoUpdate(title=session.title, updated_at=session.updated_at)
            )
        try:
            row = await self._manager.row(session.session_id)
        except PonderError:
            return  # deleted meanwhile
        options = config_options(self._manager, row)
        encoded = msgspec.json.encode(options)
        self._open[session.session_id] = (session.title, encoded)
        if encoded != sent_options and session.session_id not in self._quiet:
            await self.update(session.session_id, t.ConfigOptionUpdate(config_options=options))
        if self._modes.get(session.session_id) != row.approval_policy and session.session_id not in self._quiet:
            await self.show_mode(session.session_id, row.approval_policy)

    async def show_mode(self, session_id: str, mode: str) -> None:
        """``current_mode_update``: the session's approval policy is now ``mode``."""
        if session_id in self._open:
            self._modes[session_id] = mode
        await self.update(session_id, t.CurrentModeUpdate(current_mode_id=mode))

    async def _refresh(self, session_id: str) -> None:
        try:
            row = await self._manager.row(session_id)
        except PonderError:
            return
        await self.session_updated(self._manager.wire_session(row))

    async def refresh_options(self) -> None:
        """Announce changed options of every open session (e.g. newly available models)."""
        for session_id in list(self._open):
            await self._refresh(session_id)

    # --- prompts waiting for their turn -------------------------------------------------

    def begin_prompt(self, session_id: str) -> PromptWaiter:
        """Register a prompt as it arrives, before it is admitted: a ``session/cancel``
        handled while the prompt is still being admitted then applies to it too."""
        waiter = PromptWaiter(session_id)
        self._prompts.add(waiter)
        if self.following is not None:  # its turn's events must reach this connection from turn_start on
            self.following(session_id)
        self._prompt_begun.set()
        self._prompt_begun = anyio.Event()
        return waiter

    def next_prompt(self) -> anyio.Event:
        """An event set when the next ``session/prompt`` arrives (take it before looking at the waiters)."""
        return self._prompt_begun

    async def admitted(self, waiter: PromptWaiter, turn_id: str) -> None:
        """The prompt's turn is queued. Call it with nothing awaited since admission, so the
        turn's ``turn_end`` cannot have been translated yet."""
        waiter.turn_id = turn_id
        self._by_turn.setdefault(turn_id, []).append(waiter)
        if waiter.cancel_requested:  # cancelled while it was being admitted
            self._doomed.add(turn_id)
            await self._cancel_running(waiter.session_id, turn_id)

    def end_prompt(self, waiter: PromptWaiter) -> None:
        self._prompts.discard(waiter)
        waiters = self._by_turn.get(waiter.turn_id or "")
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._by_turn[waiter.turn_id or ""]

    def sessions_waiting(self) -> list[str]:
        return list(dict.fromkeys(w.session_id for w in self._prompts if w.outcome is None))

    def waiting(self, session_id: str) -> list[PromptWaiter]:
        return [w for w in self._prompts if w.session_id == session_id and w.outcome is None]

    async def cancel_turns(self, session_id: str, turn_ids: list[str] | None = None) -> None:
        """Cancel the session's prompts (those of ``turn_ids``, else all): the running turn
        now, a waiting one the moment it starts, one still being admitted once it is.

        A turn the actor has taken from its inbox but not started yet cannot be reached
        by ``SessionManager.cancel``; dooming it cancels it as soon as it starts.
        """
        for waiter in self.waiting(session_id):
            if turn_ids is None or waiter.turn_id in turn_ids:
                waiter.cancel_requested = True
                if waiter.turn_id is not None:
                    self._doomed.add(waiter.turn_id)
                    await self._cancel_running(session_id, waiter.turn_id)

    async def _cancel_running(self, session_id: str, turn_id: str) -> None:
        if not self._manager.is_live(session_id):
            return
        live = await self._manager.get(session_id)
        if live.current is not None and live.current.turn_id == turn_id:
            live.current.cancel_scope.cancel()

    # --- events -------------------------------------------------------------------------

    def emit_nowait(self, event: ev.BaseEvent) -> bool:
        """Never at once: each event is translated first, which may await (the session's row, a snapshot)."""
        return False

    async def emit(self, event: ev.BaseEvent) -> None:
        try:
            await self._translate(event)
        except PonderError as exc:  # e.g. the session vanished mid-turn; never break the turn
            log.warning("could not translate %s: %s", type(event).__name__, exc.message)

    async def _translate(self, event: Any) -> None:
        if isinstance(event, ev.TurnStart):
            await self._turn_start(event)
            return
        turn = self._turns.get(event.turn_id)
        if turn is None:
            return  # a turn that started before this bridge saw it (cannot happen in one process)
        sid = event.session_id
        if isinstance(event, (ev.ThinkingStart, ev.TextStart)):
            turn.blocks[(event.message_id, event.index)] = _Block(
                toolcalls.block_message_id(event.message_id, event.index)
            )
        elif isinstance(event, (ev.ThinkingDelta, ev.TextDelta)):
            await self._chunk(turn, sid, event, event.delta)
        elif isinstance(event, (ev.ThinkingEnd, ev.TextEnd)):
            await self._block_end(turn, sid, event)
        elif isinstance(event, ev.ToolCallEnd):
            turn.calls[event.call_id] = _Call(event.name, event.arguments)
            if event.name == PLAN_TOOL:
                return  # shown as the plan it sets (``ev.PlanUpdate``), not as a card
            tools = self._manager.tools
            start = toolcalls.tool_call(tools, event.call_id, event.name, event.arguments, turn.cwd, "pending")
            await self.update(sid, start)
        elif isinstance(event, (ev.ToolExecutionStart, ev.ToolExecutionEnd)) and event.name == PLAN_TOOL:
            pass  # no card for it: its plan event is what the client sees
        elif isinstance(event, ev.ToolExecutionStart):
            await self._execution_start(turn, sid, event)
        elif isinstance(event, (ev.HookStart, ev.HookEnd)):
            pass  # ACP has no update for hooks: a hook's denial reaches the client as the tool call's failure
        elif isinstance(event, ev.ToolExecutionEnd):
            await self._execution_end(turn, sid, event)
        elif isinstance(event, ev.PlanUpdate):
            await self.update(sid, plan_update(event.explanation, event.entries))
        elif isinstance(event, ev.UsageEvent):
            update = usage_update_of(event.context, event.totals_cost)
            if update is not None:
                await self.update(sid, update)
        elif isinstance(event, ev.Retry):
            # A provider that refused the thinking level narrowed the levels the model takes
            # (the daemon remembers it): the thought-level selector shows the new list and why.
            await self._refresh(sid)
        elif isinstance(event, ev.ThinkingUpdate):
            await self._thinking_update(turn, sid, event.thinking)
        elif isinstance(event, ev.MessageEnd) and event.message.role == "user":
            # A steer that joined the running turn: the editor shows it where it joined.
            text = "\n".join(b.text for b in event.message.content if isinstance(b, TextBlock))
            await self.update(
                sid, t.UserMessageChunk(content=t.TextContent(text=text), message_id=event.message.message_id)
            )
        elif isinstance(event, ev.CompactionStart):
            turn.compactions[event.compaction_id] = event.tokens_before
            if self.compaction_updates:
                await self.update(sid, compaction_started(event.compaction_id))
        elif isinstance(event, ev.CompactionEnd):
            await self._compaction_end(turn, sid, event)
        elif isinstance(event, ev.TurnEnd):
            await self._turn_end(turn, sid, event)

    async def _turn_start(self, event: ev.TurnStart) -> None:
        manager = self._manager
        row = await manager.row(event.session_id)
        self._turns[event.turn_id] = _Turn(event.session_id, event.model_id, row.cwd)
        if event.turn_id in self._doomed:
            await self._cancel_running(event.session_id, event.turn_id)

    async def _chunk(self, turn: _Turn, sid: str, event: Any, text: str) -> None:
        block = turn.blocks.get((event.message_id, event.index))
        if block is None or not text:
            return
        block.sent.append(text)
        content = t.TextContent(text=text)
        thought = isinstance(event, (ev.ThinkingDelta, ev.ThinkingEnd))
        kind = t.AgentThoughtChunk if thought else t.AgentMessageChunk
        await self.update(sid, kind(content=content, message_id=block.acp_message_id))

    async def _block_end(self, turn: _Turn, sid: str, event: Any) -> None:
        key = (event.message_id, event.index)
        if key not in turn.blocks:
            turn.blocks[key] = _Block(toolcalls.block_message_id(event.message_id, event.index))
        sent = "".join(turn.blocks[key].sent)
        if event.text != sent:
            if event.text.startswith(sent):
                await self._chunk(turn, sid, event, event.text[len(sent) :])
            else:
                log.warning("block %s/%d ended with text that differs from its deltas", *key)
        del turn.blocks[key]

    async def _execution_start(self, turn: _Turn, sid: str, event: ev.ToolExecutionStart) -> None:
        call = turn.calls.setdefault(event.call_id, _Call(event.name, event.arguments))
        call.before = await toolcalls.snapshot(event.name, event.arguments, turn.cwd, self._reader(sid))
        await self.update(sid, t.ToolCallProgress(tool_call_id=event.call_id, status="in_progress"))

    async def _execution_end(self, turn: _Turn, sid: str, event: ev.ToolExecutionEnd) -> None:
        call = turn.calls.setdefault(event.call_id, _Call(event.name, {}))
        call.finished = True
        content: list[t.ToolContent] = toolcalls.text_content(event.result)
        if not event.is_error and call.before is not None:
            diff = await self._diff(sid, call, call.before)
            if diff is not None:
                content = [diff]
        status = "failed" if event.is_error else "completed"
        await self.update(sid, t.ToolCallProgress(tool_call_id=event.call_id, status=status, content=content))

    async def _diff(self, sid: str, call: _Call, before: toolcalls.Snapshot) -> t.DiffToolContent | None:
        content = call.arguments.get("content")
        if call.name == "write_file" and self.fs_writes and not self.fs_reads and isinstance(content, str):
            # Written into the editor, which cannot be read back: the text handed to it.
            return t.DiffToolContent(path=str(before.path), old_text=before.text, new_text=content)
        return await toolcalls.diff_after(before, self._reader(sid))

    async def _compaction_end(self, turn: _Turn, sid: str, event: ev.CompactionEnd) -> None:
        update = compaction_ended(
            capable=self.compaction_updates,
            compaction_id=event.compaction_id,
            status=event.status,
            summary=event.summary,
            tokens_before=turn.compactions.pop(event.compaction_id, None),
            tokens_after=event.tokens_after,
            error=event.error.message if event.error is not None else None,
        )
        await self.update(sid, update)

    async def _thinking_update(self, turn: _Turn, sid: str, thinking: Thinking) -> None:
        """The options with the thought level this model call really sends, and why."""
        row = await self._manager.row(sid)
        options = [
            call_thought_level(thinking) if option.id == THOUGHT_LEVEL else option
            for option in config_options(self._manager, row)
        ]
        turn.thinking_changed = True
        known = self._open.get(sid)
        if known is not None:  # the session's own options go out again when the turn ends
            self._open[sid] = (known[0], msgspec.json.encode(options))
        await self.update(sid, t.ConfigOptionUpdate(config_options=options))

    async def _turn_end(self, turn: _Turn, sid: str, event: ev.TurnEnd) -> None:
        if turn.thinking_changed:  # before the prompt's answer: the session's own thought level again
            await self._refresh(sid)
        for call_id, call in turn.calls.items():
            if not call.finished and call.name != PLAN_TOOL:  # announced, then the turn ended before it ran
                await self.update(
                    sid,
                    t.ToolCallProgress(
                        tool_call_id=call_id, status="failed", content=toolcalls.text_content(CANCELLED_RESULT)
                    ),
                )
        del self._turns[event.turn_id]
        self._doomed.discard(event.turn_id)
        for waiter in self._by_turn.get(event.turn_id, []):
            waiter.outcome = TurnOutcome(event.stop_reason, event.error, turn.model_id)
            waiter.done.set()

    # --- approval -------------------------------------------------------------------------

    async def ask_permission(self, params: PermissionRequestParams) -> PermissionAnswer:
        turn = self._turns.get(params.turn_id)
        cwd = turn.cwd if turn is not None else (await self._manager.row(params.session_id)).cwd
        request = t.RequestPermissionRequest(
            session_id=params.session_id,
            tool_call=t.ToolCallFields(
                tool_call_id=params.call_id,
                title=params.title,
                kind=toolcalls.tool_kind(params.tool),
                status="pending",
                raw_input=params.arguments,
                locations=toolcalls.locations(params.tool, params.arguments, cwd),
                content=await toolcalls.preview(params.tool, params.arguments, cwd, self._reader(params.session_id)),
            ),
            # optionId is ponder's decision; "always" ones keep the request's suggested rule.
            options=[
                t.PermissionOption(option_id=o, name=_OPTION_NAMES[o], kind=_OPTION_KINDS[o]) for o in params.options
            ],
        )
        answer = await self.connection.request("session/request_permission", request, t.RequestPermissionResponse)
        choice = answer.outcome.option_id
        if answer.outcome.outcome != "selected" or choice not in params.options:
            # cancelled: the client withdrew the question
            return PermissionAnswer(PermissionRequestResult(decision="deny"), None)
        return PermissionAnswer(PermissionRequestResult(decision=choice), None)


def usage_update_of(context: ContextFill | None, cost: Cost | None) -> t.UsageUpdate | None:
    """ACP's ``usage_update`` for a context fill and a session's cost so far; None while the
    fill or its window is unknown (ACP requires both)."""
    if context is None or context.size is None:
        return None
    acp_cost = None if cost is None else t.Cost(amount=cost.amount, currency=cost.currency)
    return t.UsageUpdate(used=context.used, size=context.size, cost=acp_cost)
