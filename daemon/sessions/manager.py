"""The session registry: loading sessions (and starting their actors), admitting prompts
under the turn lease, cancelling turns, and editing, forking and deleting sessions.

Each live session has one actor task (``actor``) with a bounded inbox of admitted prompts;
the actor alone runs that session's turns, one at a time, in order. Handlers admit prompts
(the user message is committed before the prompt is answered, but joins the history the
provider sees only when its own turn starts), cancel turns and edit session settings; any
method that names a session loads it from the store when needed, and idle actors are
unloaded after a while. A lease in the store (``persistence``) keeps two daemons sharing a
home from running turns in the same session at once, and an idle live session is checked
against the store before it is answered from memory (another daemon may have changed it).
"""

import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from daemon import agent
from daemon.agent import CompactionRequest
from daemon.catalog.catalog import Catalog, ModelSpec
from daemon.config.settings import Config
from daemon.conversation import ChatMessage, Part
from daemon.errors import (
    InvalidParams,
    ModelNotFound,
    SessionBusy,
    SessionNotFound,
    ShuttingDown,
    StateConflict,
    StoreError,
    TurnNotActive,
    UnknownAttachment,
)
from daemon.permissions.book import PermissionBook
from daemon.providers.registry import ProviderRegistry
from daemon.sandbox.confinement import Override
from daemon.sandbox.service import Sandbox
from daemon.sessions.accounts import budget_from
from daemon.sessions.actor import bracket, drop_queue, run_actor
from daemon.sessions.assembly import TurnAssembly
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.continuing import plan_continue
from daemon.sessions.emitter import EventNumbers
from daemon.sessions.inbox import Inbox
from daemon.sessions.live import LiveSession, PendingSteer, PendingTurn
from daemon.sessions.model_level import merge_levels, split_model_level
from daemon.sessions.persistence import SessionWrites
from daemon.sessions.prompt_content import ContentRules, admit_content
from daemon.sessions.thinking_settings import ThinkingRequest, session_request
from daemon.sessions.tool_runner import sandbox_override
from daemon.store import AsyncStore, SessionRow
from daemon.store.changes import StoreChange
from daemon.tools import Tool
from daemon.tools.source import ToolSource
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339
from daemon.util.keyed_lock import KeyedLock
from protocol.methods import Admission, BudgetParams, Delivery, InputBlock, SandboxParams, SessionPromptResult
from protocol.objects import (
    ApprovalPolicy,
    Budget,
    RequestedThinkingLevel,
    Session,
    Thinking,
    ThinkingDisplay,
    ThinkingFallback,
)

log = logging.getLogger("ponder.sessions")


class SessionManager:
    """Every session of this daemon: the live ones in memory, the others in the store."""

    def __init__(
        self,
        config: Config,
        store: AsyncStore,
        catalog: Catalog,
        providers: ProviderRegistry,
        bridge: ClientBridge,
        *,
        tool_sources: list[ToolSource] | None = None,
        discover_models: Callable[[str], Awaitable[None]] | None = None,
        sandbox: Sandbox | None = None,
        permissions: PermissionBook | None = None,
    ) -> None:
        self.config = config
        self.sandbox = sandbox  # how run_command is confined; None: not at all (and not reported)
        self.store = store
        self.catalog = catalog
        self.providers = providers
        self.bridge = bridge
        self.tool_sources = tool_sources or []  # e.g. MCP servers; asked for tools at each turn
        # Models found at run time (a provider's discovery): looked up before a model id is resolved.
        self.discover_models = discover_models
        self._live: dict[str, LiveSession] = {}
        self._loading: dict[str, anyio.Event] = {}
        self._changes = KeyedLock()  # per session: settings changes apply one at a time, in arrival order
        self.task_group: TaskGroup | None = None  # the actors' (set by ``run``)
        self.shutting_down = False
        # The permission rules and hooks (config.toml, permissions.toml, each session's).
        self.permissions = permissions if permissions is not None else PermissionBook(config)
        self.assembly = TurnAssembly(
            config, store, catalog, providers, bridge, self.tool_sources, self.permissions, sandbox
        )
        self.accounts = self.assembly.accounts  # every model call's usage, cost and budget
        self.events = EventNumbers(bridge)
        self.writes = SessionWrites(store, self.background_task_group)

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The built-in tools (made at first use, so that start-up does not import them)."""
        return self.assembly.tools

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the actors' task group until cancelled (call ``shutdown`` first)."""
        try:
            async with anyio.create_task_group() as tg:
                self.task_group = tg
                await tg.start(self.assembly.watchdogs.run)  # before any turn streams
                # Another daemon's changes (a store with a change feed: PostgreSQL) reach our clients.
                tg.start_soon(self.store.follow_changes, self._apply_store_changes)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            for live in self._live.values():
                live.inbox.close()

    def background_task_group(self) -> TaskGroup | None:
        """Where daemon-lifetime background work (a device-login poll) runs; None once shutting down."""
        return None if self.shutting_down else self.task_group

    async def shutdown(self, timeout_s: float = 1.5) -> None:
        """Cancel every running turn and wait (bounded) for them to persist and end."""
        self.shutting_down = True
        for live in list(self._live.values()):
            drop_queue(self, live)
            if live.current is not None:
                live.current.hurry()
                live.current.cancel_scope.cancel()
        with anyio.move_on_after(timeout_s, shield=True):
            for live in list(self._live.values()):
                await live.wait_turn_ended()
            for live in list(self._live.values()):
                if live.unsaved:
                    try:
                        await self.writes.flush_unsaved(live)
                    except StoreError:
                        pass  # said below
                await self.writes.release_lease(live)
        for live in self._live.values():
            if live.unsaved:
                log.error(
                    "session %s: %d message(s) the store refused could not be saved before exit and are lost.",
                    live.row.id,
                    len(live.unsaved),
                )

    # --- loading --------------------------------------------------------------------------

    async def get(self, session_id: str) -> LiveSession:
        """The live session, loaded from the store (and its actor started) when needed."""
        live = self._live.get(session_id)
        if live is not None:
            await self._sync(live)
            return live
        loading = self._loading.get(session_id)
        if loading is not None:
            await loading.wait()
            return await self.get(session_id)
        self._loading[session_id] = done = anyio.Event()
        try:
            row = await self.store.get_session(session_id)
            if row is None:
                raise SessionNotFound(session_id)
            history = await self.store.get_messages(session_id)
            live = await self._activate(row, history)
            live.compactions[:] = [stored.compaction for stored in await self.store.get_compactions(session_id)]
            return live
        finally:
            del self._loading[session_id]
            done.set()

    async def _sync(self, live: LiveSession) -> None:
        """Catch up with what another daemon sharing this home did to an idle live session.

        One indexed read: a deleted session is unloaded (``SessionNotFound``), other messages
        are reloaded, a renamed or re-modelled one takes the stored row. Skipped while this
        daemon holds the lease or has unsaved messages: then memory is the truth.
        """
        if live.changing_here:
            return
        async with live.admit_lock:
            if live.changing_here or live.unloaded:
                return
            await self._refresh(live)

    async def discover(self, model_id: str | None) -> None:
        if model_id and self.discover_models is not None:
            await self.discover_models(model_id)

    async def _activate(self, row: SessionRow, history: list[ChatMessage]) -> LiveSession:
        if self.shutting_down or self.task_group is None:
            raise ShuttingDown()
        await self.discover(row.model_id)
        live = LiveSession(row=row, history=history, inbox=Inbox(self.config.max_queued_prompts))
        self._live[row.id] = live
        await self.task_group.start(run_actor, self, live)
        return live

    async def row(self, session_id: str) -> SessionRow:
        """A session's row, from the live session when loaded, without loading history."""
        live = self._live.get(session_id)
        if live is not None:
            await self._sync(live)
            return live.row
        row = await self.store.get_session(session_id)
        if row is None:
            raise SessionNotFound(session_id)
        return row

    def wire_session(self, row: SessionRow) -> Session:
        live = self._live.get(row.id)
        # Memory is the truth while this daemon may be changing the session; otherwise the
        # row given (fresh from the store for session/list) is, as another daemon may have.
        if live is not None and (live.row is row or live.changing_here):
            row = live.row
            row.message_count = live.stored_count
        session = row.to_wire(live.status if live is not None else "idle", self.config.budget)
        if live is not None:
            session = msgspec.structs.replace(session, queue=live.queue())
        if self.sandbox is not None:
            session.sandbox = self.sandbox.wire(row.id, row.cwd, sandbox_override(row))
        if session.budget is not None and session.budget.max_cost is not None and not self._priced(row.model_id):
            session.budget = msgspec.structs.replace(session.budget, cost_enforced=False)
        return session

    def _priced(self, model_id: str) -> bool:
        """Whether ponder knows a price for ``model_id`` (an unknown model has none)."""
        try:
            return self.catalog.price(self.catalog.get(model_id)) is not None
        except ModelNotFound:
            return False

    def thinking_request(self, row: SessionRow, turn_level: RequestedThinkingLevel | None = None) -> ThinkingRequest:
        """What ``row`` asks of thinking now; ``turn_level`` is a prompt's own level."""
        return session_request(row, self.config, turn_level)

    def thinking_for(self, row: SessionRow) -> Thinking:
        """The session's thinking decision for its model (PROTOCOL.md "Thinking controls")."""
        return self.thinking_request(row).decide(self.catalog, self.catalog.get(row.model_id))

    def _resolve_model(self, model_id: str) -> tuple[ModelSpec, RequestedThinkingLevel | None]:
        """The model ``model_id`` names and the level its ``/LEVEL`` suffix asks for, if any."""
        name, level = split_model_level(model_id, self._names_model)
        return self.catalog.get(name), level

    def _names_model(self, model_id: str) -> bool:
        try:
            self.catalog.get(model_id)
        except ModelNotFound:
            return False
        return True

    # --- creating and editing -------------------------------------------------------------

    async def start(
        self,
        *,
        model_id: str | None,
        thinking_level: RequestedThinkingLevel | None,
        cwd: str | None,
        title: str | None,
        system_prompt: str | None,
        approval_policy: ApprovalPolicy | None,
        display: ThinkingDisplay | None = None,
        fallback: ThinkingFallback | None = None,
        budget: BudgetParams | None = None,
        sandbox: SandboxParams | None = None,
    ) -> LiveSession:
        """A new session. ``model_id`` may end in ``/LEVEL``; display and fallback left out
        follow config.toml's ``[defaults]``, and a level left out is ``default``; ``budget``
        None follows config.toml's ``[budget]`` (as the daemon reads it, also after a change to the
        file and a restart), a budget is the session's own, and one without limits is none.
        Refusals name the argument at fault (``InvalidParams.argument``)."""
        await self.discover(model_id)
        spec, suffix = self._resolve_model(model_id or self.catalog.default_model_id())
        self._check_cost_budget(spec, budget_from(budget))
        level = merge_levels(model_id or spec.id, suffix, thinking_level)
        row = SessionRow(
            id=new_id("ses"),
            cwd=str(_check_cwd(cwd)),
            model_id=spec.id,
            thinking_level=level or "default",
            approval_policy=approval_policy or self.config.default_approval_policy,
            title=title,
            system_prompt=system_prompt,
            thinking_display=display,
            thinking_fallback=fallback,
            budget=None if budget is None else budget_from(budget),
            budget_own=budget is not None,
        )
        # Fallback "error": refused before anything is stored.
        self.thinking_request(row).check(self.catalog, spec, "thinking_level" if level else "model_id")
        override = Override() if sandbox is None else Override(mode=sandbox.mode, network=sandbox.network)
        if self.sandbox is not None:
            # [sandbox] required with no sandbox here: -32009, and nothing is created.
            await anyio.to_thread.run_sync(self.sandbox.check_start, override, Path(row.cwd))
        row.sandbox_mode, row.sandbox_network = override.mode, override.network  # kept with the session
        row = await self.store.create_session(row)
        return await self._activate(row, [])

    def changes(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Hold while reading and changing a session's settings. Changes to one session apply
        one at a time in the order they were asked for (enter it before awaiting anything, as
        ``update``, ``set_model`` and ``set_thinking`` do, and that is arrival order); the
        holder may call those methods inside."""
        return self._changes.hold(session_id)

    async def update(self, session_id: str, **fields: Any) -> SessionRow:
        async with self.changes(session_id):
            row = await self.store.update_session(session_id, **fields)
            live = self._live.get(session_id)
            if live is not None:
                live.row = row
            for kind in ("model_id", "thinking_level"):
                if kind in fields:
                    change = kind.removesuffix("_id").removesuffix("_level")
                    await self.store.record_change(session_id, change, fields[kind])
            await self.bridge.session_updated(self.wire_session(row))
            return row

    async def set_model(
        self, session_id: str, model_id: str, level: RequestedThinkingLevel | None
    ) -> tuple[SessionRow, ModelSpec]:
        """Switch the session's model (``model_id`` may end in ``/LEVEL``); refusals name the argument
        at fault, ``thinking_level`` for the level (``level`` or the suffix) or ``model_id``."""
        async with self.changes(session_id):
            row = await self.row(session_id)
            await self.discover(model_id)
            spec, suffix = self._resolve_model(model_id)
            level = merge_levels(model_id, suffix, level)
            fields: dict[str, Any] = {"model_id": spec.id}
            if level is not None:
                # "default" is kept as asked: it follows the defaults on this model and the next.
                fields["thinking_level"] = level
            # Fallback "error": a level the new model does not take refuses the switch.
            argument = "thinking_level" if level is not None else "model_id"
            self.thinking_request(msgspec.structs.replace(row, **fields)).check(self.catalog, spec, argument)
            row = await self.update(row.id, **fields)
            return row, spec

    async def set_thinking(
        self,
        session_id: str,
        level: RequestedThinkingLevel | None = None,
        *,
        display: ThinkingDisplay | None = None,
        fallback: ThinkingFallback | None = None,
        budget_tokens: int | msgspec.UnsetType | None = msgspec.UNSET,
    ) -> SessionRow:
        """Change some of the session's thinking controls (``budget_tokens=None`` clears a custom budget);
        the caller gives at least one. A level the model does not take under fallback ``error`` is
        refused naming ``level`` (or ``fallback``, when that is what made it an error)."""
        fields: dict[str, Any] = {}
        if level is not None:
            fields["thinking_level"] = level
        if display is not None:
            fields["thinking_display"] = display
        if fallback is not None:
            fields["thinking_fallback"] = fallback
        if budget_tokens is not msgspec.UNSET:
            fields["thinking_budget"] = budget_tokens
        async with self.changes(session_id):
            row = await self.row(session_id)
            # Fallback "error": a level the model does not take is refused and nothing changes.
            argument = "level" if level is not None else "fallback"
            self.thinking_request(msgspec.structs.replace(row, **fields)).check(
                self.catalog, self.catalog.get(row.model_id), argument
            )
            return await self.update(row.id, **fields)

    async def set_budget(self, session_id: str, budget: Budget | None) -> SessionRow:
        """Raise, lower or clear (None) a session's budget; a running turn sees it before its next model call."""
        async with self.changes(session_id):
            row = await self.row(session_id)
            self._check_cost_budget(self.catalog.get(row.model_id), budget)
            stored = await self.store.set_budget(row.id, budget)
            live = self._live.get(session_id)
            if live is not None:
                # Only the budget: the live row's totals may be newer than this read of the store.
                live.row.budget, live.row.budget_own = stored.budget, stored.budget_own
                stored = live.row
            await self.bridge.session_updated(self.wire_session(stored))
            return stored

    def _check_cost_budget(self, spec: ModelSpec, budget: Budget | None) -> None:
        """A cost budget on a model without a known price could never be reached: refused, saying how
        to give the model a price (never a budget that silently holds nothing)."""
        if budget is None or budget.max_cost is None or self.catalog.price(spec) is not None:
            return
        raise InvalidParams(
            f"ponder knows no price for {spec.id}, so a cost budget could not be kept: set price = {{input = ..., "
            f"output = ...}} (USD per million tokens) on its [[providers.{spec.provider}.models]] entry "
            f'(model = "{spec.model}") in config.toml, or give max_tokens instead.',
            argument="budget.max_cost",
        )

    async def fork(self, session_id: str, message_id: str | None) -> SessionRow:
        source = await self.row(session_id)
        if self.sandbox is not None:
            await anyio.to_thread.run_sync(self.sandbox.check_start, sandbox_override(source), Path(source.cwd))
        new_row = SessionRow(
            id=new_id("ses"),
            cwd=source.cwd,
            model_id=source.model_id,
            thinking_level=source.thinking_level,
            approval_policy=source.approval_policy,
            title=source.title,
            system_prompt=source.system_prompt,
            parent_id=source.id,
            thinking_display=source.thinking_display,
            thinking_fallback=source.thinking_fallback,
            thinking_budget=source.thinking_budget,
            budget=source.budget,  # the fork's own spending starts at zero
            budget_own=source.budget_own,
            sandbox_mode=source.sandbox_mode,
            sandbox_network=source.sandbox_network,
            plan=source.plan,
        )
        if message_id is not None:
            messages = await self.store.get_messages(session_id)
            if not any(m.message_id == message_id for m in messages):
                raise InvalidParams(f"Message {message_id!r} is not in session {session_id!r}.", argument="message_id")
        return await self.store.fork_session(source.id, new_row, message_id)

    async def delete(self, session_id: str) -> None:
        await self.row(session_id)
        live = self._live.pop(session_id, None)
        if live is not None:
            live.unloaded = True
            drop_queue(self, live)
            turn = live.current
            if turn is not None:
                turn.hurry()
                turn.cancel_scope.cancel()
                with anyio.move_on_after(3):
                    await live.wait_turn_ended()
            live.inbox.close()
        await self.store.delete_session(session_id)

    # --- prompts and turns ----------------------------------------------------------------

    async def prompt(
        self,
        session_id: str,
        text: str | None,
        thinking_level: RequestedThinkingLevel | None = None,
        content: list[InputBlock] | None = None,
        *,
        links_outside_cwd: bool = False,
        delivery: Delivery = "queue",
        expected_turn_id: str | None = None,
        client_message_id: str | None = None,
        output: agent.OutputRequest | None = None,
        max_turns: int | None = None,
    ) -> SessionPromptResult:
        """Admit a prompt (``text``, or ``content`` blocks: PROTOCOL.md "Prompt content");
        ``thinking_level`` applies to its turn only. The prompt keeps the thinking settings in
        force now, also while it waits behind another turn. Content is read, checked and
        normalised before anything is stored; a refusal stores nothing.

        ``delivery: "steer"`` joins the running prompt turn before its next model call (not
        stored until then), or starts a turn like a prompt when none runs; ``client_message_id``
        makes a prompt sent twice admitted once (PROTOCOL.md "Steering, the queue and continuing").
        The caller gives exactly one of ``text`` and ``content``, ``expected_turn_id`` only with a
        steer, and no ``thinking_level`` with a steer (it runs with the running turn's thinking)."""
        # Entered before anything is awaited, so prompts and settings changes to one session take
        # effect in the order they arrived: a prompt whose images are still being read in a worker
        # thread is not overtaken by a text prompt sent after it, and it keeps the settings in force
        # when it was sent (a thinking/set sent after it waits for its admission).
        async with self.changes(session_id):
            turn_level = thinking_level  # this turn's own level; None: the session's
            live, spec = await self._live_for_turn(session_id)
            # Fallback "error": a level the model does not take is refused before anything is stored.
            argument = "thinking_level" if turn_level is not None else "session_id"
            self.thinking_request(live.row, turn_level).check(self.catalog, spec, argument)
            if content is None:
                parts = [Part(type="text", text=text or "")]
            else:
                rules = ContentRules(
                    cwd=Path(live.row.cwd),
                    model_id=spec.id,
                    takes_images=spec.takes_images,
                    vision_models=[m.id for m in self.catalog.list_models(spec.provider) if m.takes_images],
                    links_outside_cwd=links_outside_cwd,
                )
                parts = await admit_content(content, rules)
            async with live.admit_lock:
                if client_message_id is not None:
                    earlier = _earlier_answer(live, client_message_id, parts)
                    if earlier is not None:
                        return earlier
                if delivery == "steer":
                    target = _steer_target(live, expected_turn_id)
                    if target is not None:
                        return await self._admit_steer(live, target, parts, client_message_id)
                if live.inbox.full:
                    raise SessionBusy(live.row.id)
                # Holding no lease (the usual idle session): lease, catch-up and the prompt's save are
                # one store transaction below, not three round trips (a burst of prompts batches them).
                one_step = not live.lease_held and not live.unsaved
                if not one_step:
                    await self._make_room(live)
                    if live.unsaved:
                        await self.writes.flush_unsaved(live)  # earlier replies go in first, or the prompt is refused
                known_count = live.stored_count
                queued = live.status == "running"
                turn_id = new_id("turn")
                message = ChatMessage(
                    message_id=new_id("msg"),
                    session_id=session_id,
                    seq=live.next_seq(),
                    role="user",
                    parts=parts,
                    status="complete",
                    created_at=now_rfc3339(),
                    origin="steer" if delivery == "steer" else "prompt",
                    turn_id=turn_id,
                    client_message_id=client_message_id,
                    output=_stored_output(output, max_turns),
                )
                answer = SessionPromptResult(
                    turn_id=turn_id,
                    message_id=message.message_id,
                    queued=queued,
                    delivery="queued" if queued else "started",
                )
                message.admission = msgspec.to_builtins(answer)
                live.waiting.append(message)  # before the save: a running turn's next seq must skip it
                try:
                    if one_step:
                        await self._lease_and_save(live, message, known_count)
                    else:
                        await self.store.save_message(message)
                    for part in parts:
                        part.data = None  # stored once by content; requests read the bytes back from the store
                except BaseException:
                    live.waiting.remove(message)  # refused: the client is told, nothing is kept
                    if live.current is None and not live.queued:
                        with anyio.move_on_after(2, shield=True):
                            await self.writes.release_lease(live)
                    raise
                pending = PendingTurn(
                    turn_id,
                    message,
                    self.thinking_request(live.row, turn_level),
                    announced=queued,
                    output=output,
                    max_turns=max_turns,
                )
                live.inbox.put(pending)
                if queued:
                    await self.events.queue_update(live)
                return answer

    async def _admit_steer(
        self, live: LiveSession, turn_id: str, parts: list[Part], client_message_id: str | None
    ) -> SessionPromptResult:
        """Under ``admit_lock``: a steer for running turn ``turn_id``, kept in memory until it joins."""
        if live.inbox.full:
            raise SessionBusy(live.row.id)
        message = ChatMessage(
            message_id=new_id("msg"),
            session_id=live.row.id,
            seq=0,  # taken when it joins
            role="user",
            parts=parts,
            status="complete",
            created_at=now_rfc3339(),
            origin="steer",
            client_message_id=client_message_id,
        )
        answer = SessionPromptResult(
            turn_id=turn_id, message_id=message.message_id, queued=False, delivery="steer_pending"
        )
        message.admission = msgspec.to_builtins(answer)
        live.inbox.add_steer(PendingSteer(message, turn_id))
        await self.events.queue_update(live)
        return answer

    async def continue_turn(self, session_id: str) -> str | None:
        """``session/continue``: a new turn that goes on from the stored tail of the last prompt
        turn (its id); None when there is nothing to continue."""
        live, _spec = await self._live_for_turn(session_id)
        async with live.admit_lock:
            if live.status == "running":
                raise SessionBusy(session_id, "a turn is running", reason="turn_running")
            plan = plan_continue(live.history, session_id)
            if plan is None:
                return None
            await self._make_room(live)
            plan = plan_continue(live.history, session_id)  # the lease may have brought another daemon's messages
            if plan is None:
                with anyio.move_on_after(2, shield=True):
                    await self.writes.release_lease(live)
                return None
            if live.unsaved:
                await self.writes.flush_unsaved(live)
            turn_id = new_id("turn")
            for message in plan.new_messages:
                message.seq = live.next_seq()
                message.turn_id = turn_id
                await self.store.save_message(message)  # refused: nothing was added to the history
                live.history.append(message)
            output, max_turns = _output_of_last_prompt(live.history)  # the turn goes on under them
            live.inbox.put(
                PendingTurn(
                    turn_id,
                    plan.user_message,
                    self.thinking_request(live.row),
                    continued_from=plan.continued_from,
                    stored=True,
                    output=output,
                    max_turns=max_turns,
                )
            )
            return turn_id

    async def remove_queued(self, session_id: str, message_id: str) -> None:
        """``session/queue/remove``: take a waiting steer or queued prompt back. A prompt is deleted
        from the store and its turn bracketed ``cancelled``; a steer was stored nowhere."""
        live = await self.get(session_id)
        async with live.admit_lock:
            taken = live.inbox.remove(message_id)
            if taken is None:
                if any(m.message_id == message_id for m in live.history):
                    raise StateConflict(
                        f"Message {message_id!r} was already delivered; it cannot be taken back.", "already_delivered"
                    )
                raise StateConflict(
                    f"No waiting prompt or steer {message_id!r} in session {session_id!r}.", "unknown_message_id"
                )
            if isinstance(taken, PendingTurn) and taken.user_message is not None and taken.stored:
                live.waiting = [m for m in live.waiting if m is not taken.user_message]
                with anyio.CancelScope(shield=True):
                    await self.store.delete_message(session_id, message_id)
            await self.events.queue_update(live)
        if isinstance(taken, PendingTurn):
            await bracket(self, live, taken, "cancelled")

    async def attachment(self, session_id: str, attachment_id: str) -> tuple[str, bytes]:
        """(mime_type, bytes) of an attachment the session's messages name (``attachment/get``)."""
        await self.row(session_id)  # session_not_found first
        found = await self.store.get_attachment(session_id, attachment_id)
        if found is None:
            raise UnknownAttachment(session_id, attachment_id)
        return found

    async def compact(self, session_id: str, instructions: str | None) -> tuple[str, str, bool]:
        """Admit a compaction turn (``session/compact``), queued like a prompt while a turn runs:
        (turn_id, compaction_id, queued)."""
        live, _ = await self._live_for_turn(session_id)
        async with live.admit_lock:
            await self._make_room(live)
            queued = live.status == "running"
            compaction_id = new_id("cmp")
            request = CompactionRequest(compaction_id=compaction_id, trigger="manual", instructions=instructions)
            turn_id = new_id("turn")
            live.inbox.put(PendingTurn(turn_id, None, self.thinking_request(live.row), request, announced=queued))
            if queued:
                await self.events.queue_update(live)
            return turn_id, compaction_id, queued

    async def _live_for_turn(self, session_id: str) -> tuple[LiveSession, ModelSpec]:
        """The live session a new turn is admitted to, and its model; refuses while shutting down,
        and says provider_not_configured before anything is stored or queued."""
        live = await self.get(session_id)
        if self.shutting_down:
            raise ShuttingDown()
        spec = self.catalog.get(live.row.model_id)
        self.providers.get(spec.provider, spec.api)
        return live, spec

    async def _make_room(self, live: LiveSession) -> None:
        """Under ``admit_lock``: room in the inbox, and the turn lease (catching up with what another
        daemon did while we held none); ``SessionBusy`` otherwise."""
        if live.inbox.full:
            raise SessionBusy(live.row.id)
        if not live.lease_held:
            if not await self.writes.acquire_lease(live):
                raise await self._held_elsewhere(live)
            await self._refresh(live)

    async def _held_elsewhere(self, live: LiveSession) -> SessionBusy:
        """``SessionBusy`` naming the daemon whose turn lease keeps this one out."""
        holder = await self.store.lease_holder(live.row.id) or "another process"
        return SessionBusy(live.row.id, f"another ponder daemon ({holder}, sharing this home) is running a turn in it")

    async def _lease_and_save(self, live: LiveSession, message: ChatMessage, known_count: int) -> None:
        """Under ``admit_lock``, holding no lease: take the turn lease, catch up and store the
        prompt ``message`` (waiting already) in one store transaction (``Store.admit``); when
        another daemon added messages meanwhile, catch up first and store it after them."""
        admitted = await self.writes.admit(live, message, known_count)
        if not admitted.leased:
            raise await self._held_elsewhere(live)
        if admitted.saved:
            assert admitted.row is not None
            live.row = admitted.row
            return
        await self._catch_up(live, admitted.row, known_count)
        live.waiting.remove(message)  # its seq is taken again, after what the other daemon stored
        message.seq = live.next_seq()
        live.waiting.append(message)
        await self.store.save_message(message)

    async def _refresh(self, live: LiveSession) -> None:
        """Catch up with what another daemon sharing this home did while we held no lease:
        take the stored row, and the stored history when messages were added; a deleted
        session is unloaded (``SessionNotFound``)."""
        await self._catch_up(live, await self.store.get_session(live.row.id), live.stored_count)

    async def _catch_up(self, live: LiveSession, row: SessionRow | None, known_count: int) -> None:
        """``_refresh`` with the stored ``row`` read already; ``known_count``: the messages we hold."""
        if row is None:
            self.unload(live)
            raise SessionNotFound(live.row.id)
        if row.message_count != known_count:
            waiting = {m.message_id for m in live.waiting}
            live.history[:] = [m for m in await self.store.get_messages(live.row.id) if m.message_id not in waiting]
            live.compactions[:] = [stored.compaction for stored in await self.store.get_compactions(live.row.id)]
        live.row = row

    async def cancel(self, session_id: str) -> tuple[bool, int, list[ChatMessage]]:
        """Cancel the running turn and drop the waiting input: (a turn was cancelled, prompts
        dropped, the steers that were waiting: stored nowhere, given back to the client)."""
        live = self._live.get(session_id)
        if live is None:
            await self.row(session_id)  # unknown ids still get session_not_found
            return False, 0, []
        dropped, steers = drop_queue(self, live)
        turn = live.current
        if turn is None:
            return False, dropped, steers
        turn.cancel_scope.cancel()
        return True, dropped, steers

    async def _apply_store_changes(self, changes: list[StoreChange]) -> None:
        """Another daemon changed these sessions (PROTOCOL.md "Store backends"): a live session this
        daemon is not changing catches up with the store, one deleted there is unloaded, and each
        changed one's subscribers get ``session/updated``."""
        if any(change.kind == "resync" for change in changes):
            ids = list(dict.fromkeys([*self._live, *(c.session_id for c in changes if c.session_id)]))
        else:
            ids = list(dict.fromkeys(change.session_id for change in changes))
        for session_id in ids:
            if self.shutting_down:
                return
            try:
                row = await self.store.get_session(session_id)
            except StoreError as exc:
                log.warning(
                    "session %s: another daemon changed it, and it could not be read: %s", session_id, exc.message
                )
                continue
            live = self._live.get(session_id)
            if row is None:
                if live is not None and live.current is None and not live.unsaved:
                    drop_queue(self, live)
                    self.unload(live)  # deleted elsewhere: its next request answers session_not_found
                continue
            if live is not None and not live.changing_here:
                async with live.admit_lock:  # not while a prompt is being admitted (it catches up itself)
                    if not live.changing_here:
                        try:
                            await self._catch_up(live, row, live.stored_count)
                        except (SessionNotFound, StoreError):
                            continue
                        row = live.row
            await self.bridge.session_updated(self.wire_session(row))

    def unload(self, live: LiveSession) -> None:
        if self._live.get(live.row.id) is live:
            del self._live[live.row.id]
        live.unloaded = True
        live.inbox.close()

    def is_live(self, session_id: str) -> bool:
        return session_id in self._live


def _steer_target(live: LiveSession, expected_turn_id: str | None) -> str | None:
    """The turn a steer joins: the running prompt turn, or a steer turn about to start; None when
    no turn runs (the steer then starts one like a prompt). ``TurnNotActive`` when it names
    another turn, names one while none runs, or a compaction turn runs."""
    active = live.active
    if live.compacting is not None or (active is not None and active.compaction is not None):
        running = live.compacting or (active.turn_id if active is not None else None)
        raise TurnNotActive(
            'A compaction turn is running and cannot be steered; send the message again with delivery "queue".',
            active_turn_id=running,
            reason="not_steerable",
        )
    target = active.turn_id if active is not None else None
    if target is None and live.inbox.turns and not live.inbox.turns[0].stored:
        target = live.inbox.turns[0].turn_id  # steers that came too late for the last turn start this one
    if expected_turn_id is None or expected_turn_id == target:
        return target
    if target is None:
        raise TurnNotActive(
            f"Turn {expected_turn_id!r} is not running and no turn is; send the message without expected_turn_id "
            "to start one.",
            active_turn_id=None,
            reason="no_active_turn",
        )
    raise TurnNotActive(
        f"Turn {expected_turn_id!r} is not the running turn ({target!r}); steer that one or queue the message.",
        active_turn_id=target,
        reason="turn_mismatch",
    )


def _content_key(parts: list[Part]) -> list[tuple[str, str, str | None]]:
    """What makes two prompts the same: their blocks' kinds, texts and attachments (by content)."""
    return [(p.type, p.text, p.attachment_id) for p in parts]


def _earlier_answer(live: LiveSession, client_message_id: str, parts: list[Part]) -> SessionPromptResult | None:
    """The first answer to a prompt with this ``client_message_id`` (a client that lost it sends
    again), None when the id is new; ``client_message_id_reused`` when it came with other content."""
    waiting = [steer.message for steer in live.inbox.steers]
    waiting += [p.user_message for p in live.inbox.turns if p.user_message is not None and not p.stored]
    for message in [*waiting, *live.stored_messages]:
        if message.client_message_id != client_message_id:
            continue
        if _content_key(message.parts) != _content_key(parts):
            raise StateConflict(
                f"client_message_id {client_message_id!r} was already used for another message in this session; "
                "use a new id (a UUID) for each message.",
                "client_message_id_reused",
            )
        if message.admission is not None:
            return msgspec.convert(message.admission, SessionPromptResult)
        delivery: Admission = "steer_pending" if message.origin == "steer" else "started"
        return SessionPromptResult(
            turn_id=message.turn_id or "", message_id=message.message_id, queued=False, delivery=delivery
        )
    return None


def _check_cwd(cwd: str | None) -> Path:
    try:
        path = Path(cwd).expanduser() if cwd else Path(os.getcwd())
    except RuntimeError:  # ``~name`` for a user without a home directory
        raise InvalidParams(f"cwd {cwd!r} names a user with no home directory.", argument="cwd") from None
    if not path.is_absolute():
        raise InvalidParams(f"cwd must be an absolute path, got {cwd!r}.", argument="cwd")
    shown = repr(str(path)) if len(str(path)) <= 200 else repr(str(path)[:200]) + "..."  # a 5,000-character path
    try:
        # is_dir() turns only some errors into False: a name too long, for one, still raises.
        if path.is_dir():
            return path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidParams(f"cwd {shown} cannot be used: {reason}.", argument="cwd") from None
    raise InvalidParams(f"cwd {shown} is not an existing directory.", argument="cwd")


def _stored_output(output: agent.OutputRequest | None, max_turns: int | None) -> dict[str, Any] | None:
    """What a prompt's message keeps of its output request and limit (``ChatMessage.output``)."""
    if output is None and max_turns is None:
        return None
    stored: dict[str, Any] = {"max_turns": max_turns}
    if output is not None:
        stored.update({"schema": output.schema, "retries": output.retries})
    return stored


def _output_of_last_prompt(history: list[ChatMessage]) -> tuple[agent.OutputRequest | None, int | None]:
    """The output request and limit of the prompt that started the last prompt turn (steers that
    joined a running turn are passed over): what ``session/continue`` keeps."""
    for message in reversed(history):
        if message.role != "user" or message.origin not in ("prompt", "steer"):
            continue
        if message.origin == "steer" and (message.admission or {}).get("delivery") == "steer_pending":
            continue  # joined a running turn: that turn's prompt says
        stored = message.output or {}
        output = None
        if isinstance(stored.get("schema"), dict):
            output = agent.OutputRequest(schema=stored["schema"], retries=int(stored.get("retries", 2)))
        max_turns = stored.get("max_turns")
        return output, max_turns if isinstance(max_turns, int) else None
    return None, None
