"""The session registry and the per-session actors.

Each live session has one actor task with a bounded inbox of admitted prompts; the actor
alone runs that session's turns, one at a time, in order. Handlers admit prompts (the
user message is committed before the prompt is answered, but joins the history the
provider sees only when its own turn starts), cancel turns and edit session settings;
any method that names a session loads it from the store when needed, and idle actors
are unloaded after a while. A lease in the store keeps two daemons sharing a home
from running turns in the same session at once, and an idle live session is checked against
the store before it is answered from memory (another daemon may have changed it).

When the store refuses a write during a turn (disk full, lock held, read-only), the turn
ends with that error and the messages stay in the live session (``unsaved``): they are
written, in seq order, at the next write of the session or by a periodic retry, and the
session keeps its lease and stays loaded until then.
"""

import functools
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from daemon import agent, thinking
from daemon.catalog import Catalog, ModelSpec
from daemon.config import Config
from daemon.conversation import ChatMessage, Part
from daemon.errors import (
    InvalidParams,
    PonderError,
    ReplyNotSaved,
    SessionBusy,
    SessionNotFound,
    ShuttingDown,
    StoreError,
    StoreUnavailable,
)
from daemon.keyed_lock import KeyedLock
from daemon.providers.base import ProviderRequest, StreamLimits
from daemon.providers.registry import ProviderRegistry
from daemon.redact import SecretMask
from daemon.redact import known as known_secrets
from daemon.rpc import ClientRequestError, Connection
from daemon.store import AsyncStore, SessionRow, new_lease_owner
from daemon.timeutil import new_id, now_rfc3339
from daemon.tools import (
    Tool,
    ToolError,
    builtin_tools,
    execute_tool,
    parse_arguments,
    tool_specs,
)
from daemon.tools.approval import decide, denial_message
from daemon.tools.base import ToolContext
from protocol import events as ev
from protocol.methods import PermissionRequestParams, PermissionRequestResult
from protocol.objects import Session, Thinking

log = logging.getLogger("ponder.sessions")

LEASE_TTL_S = 3600.0  # a crashed owner is detected by its pid and start time long before this
STORE_RETRY_S = 5.0  # how often unsaved messages (and a lease the store would not release) are retried


class ClientBridge(Protocol):
    """How sessions reach the client: the ponder protocol here, ACP in ``daemon.acp``."""

    can_ask: bool  # whether the client answers permission requests

    async def emit(self, event: Any) -> None:
        """Deliver one ``agent/event`` (a ``protocol.events`` Struct with its seq)."""

    async def session_updated(self, session: Session) -> None: ...

    async def ask_permission(self, params: PermissionRequestParams) -> str:
        """The person's decision; raises ``ClientRequestError`` when they cannot be asked."""
        ...


class ToolSource(Protocol):
    """Tools beyond the built-in ones (MCP servers), asked for afresh at every turn."""

    async def tools_for(self, row: SessionRow) -> dict[str, Tool[Any]]: ...


class RpcBridge:
    """The ``ClientBridge`` of the ponder protocol over a JSON-RPC ``Connection``."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.can_ask = False  # set by initialize

    async def emit(self, event: Any) -> None:
        await self.connection.notify("agent/event", event)

    def emit_nowait(self, event: Any) -> bool:
        return self.connection.notify_nowait("agent/event", event)

    async def session_updated(self, session: Session) -> None:
        await self.connection.notify("session/updated", {"session": session})

    async def ask_permission(self, params: PermissionRequestParams) -> str:
        answer = await self.connection.request("permission/request", params, PermissionRequestResult)
        return answer.decision


@dataclass
class PendingTurn:
    turn_id: str
    user_message: ChatMessage


@dataclass
class LiveSession:
    row: SessionRow
    history: list[ChatMessage]
    inbox_send: Any
    inbox_receive: Any
    emit_lock: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    # Admission (lease, catching up with the store, storing the prompt) is one step per
    # session: two prompts interleaving there could reload the history under each other.
    admit_lock: anyio.Lock = field(default_factory=anyio.Lock)
    current: agent.Turn | None = None
    # Admitted prompts, stored but not yet in ``history``: a running turn must not send
    # them to its provider (they would answer a question asked later, or land between a
    # tool call and its result).
    waiting: list[ChatMessage] = field(default_factory=list)
    # Waiting prompts a cancel dropped while a turn ran: they join the history once that
    # turn has written its last messages (a cut-off tool call's results come first).
    dropped: list[ChatMessage] = field(default_factory=list)
    allowed_tools: set[str] = field(default_factory=set)
    lease_held: bool = False
    # Messages the store refused (by id, latest version); written again in seq order.
    unsaved: dict[str, ChatMessage] = field(default_factory=dict)
    retrying: bool = False  # a retry task is running for this session
    unloaded: bool = False

    @property
    def queued(self) -> int:
        return self.inbox_send.statistics().current_buffer_used

    @property
    def status(self) -> str:
        return "running" if self.current is not None or self.queued else "idle"

    def next_seq(self) -> int:
        seqs = [m.seq for m in self.waiting]
        if self.history:
            seqs.append(self.history[-1].seq)
        return max(seqs, default=0) + 1

    def take_waiting(self, message: ChatMessage) -> bool:
        """Move an admitted prompt from ``waiting`` to the end of the history (nothing if it is
        not waiting). True when it took a new seq, as a prompt queued behind a turn whose
        replies were stored after it does (the caller stores it again)."""
        if not any(m is message for m in self.waiting):
            return False
        self.waiting = [m for m in self.waiting if m is not message]
        renumbered = bool(self.history) and self.history[-1].seq >= message.seq
        if renumbered:
            message.seq = self.next_seq()
        self.history.append(message)
        return renumbered

    @property
    def changing_here(self) -> bool:
        """This daemon may be changing the session: its memory is the truth, not the store."""
        return self.lease_held or bool(self.unsaved) or self.status != "idle"

    @property
    def stored_count(self) -> int:
        return len(self.history) + len(self.waiting)

    @property
    def stored_messages(self) -> list[ChatMessage]:
        """Every message the store holds: the history, then the prompts waiting for their turn."""
        return [*self.history, *self.waiting]


class SessionManager:
    def __init__(
        self,
        config: Config,
        store: AsyncStore,
        catalog: Catalog,
        providers: ProviderRegistry,
        bridge: ClientBridge,
    ) -> None:
        self.config = config
        self.store = store
        self.catalog = catalog
        self.providers = providers
        self.bridge = bridge
        self.tool_sources: list[ToolSource] = []  # e.g. MCP servers; asked for tools at each turn
        # Models found at run time (a provider's discovery): looked up before a model id is resolved.
        self.discover_models: Callable[[str], Awaitable[None]] | None = None
        self._live: dict[str, LiveSession] = {}
        self._loading: dict[str, anyio.Event] = {}
        self._changes = KeyedLock()  # per session: settings changes apply one at a time, in arrival order
        self._event_seq: dict[str, int] = {}
        self._lease_owner = new_lease_owner()
        self._tg: TaskGroup | None = None
        self.shutting_down = False

    @functools.cached_property
    def tools(self) -> dict[str, Tool[Any]]:
        """The built-in tools; made at first use, so that start-up does not import them."""
        return builtin_tools(self.config.scan_time_limit_s)

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the actors' task group until cancelled (call ``shutdown`` first)."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            for live in self._live.values():
                live.inbox_send.close()
                live.inbox_receive.close()

    def background_task_group(self) -> TaskGroup | None:
        """Where daemon-lifetime background work (a device-login poll) runs; None once shutting down."""
        return None if self.shutting_down else self._tg

    async def shutdown(self, timeout_s: float = 1.5) -> None:
        """Cancel every running turn and wait (bounded) for them to persist and end."""
        self.shutting_down = True
        for live in list(self._live.values()):
            self._drop_queue(live)
            if live.current is not None:
                live.current.hurry()
                live.current.cancel_scope.cancel()
        with anyio.move_on_after(timeout_s, shield=True):
            while any(live.current is not None for live in self._live.values()):
                await anyio.sleep(0.01)
            for live in list(self._live.values()):
                if live.unsaved:
                    try:
                        await self._flush_unsaved(live)
                    except StoreError:
                        pass  # said below
                await self._release_lease(live)
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
            return await self._activate(row, history)
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
        if self.shutting_down or self._tg is None:
            raise ShuttingDown()
        await self.discover(row.model_id)
        send, receive = anyio.create_memory_object_stream[PendingTurn](self.config.max_queued_prompts)
        live = LiveSession(row=row, history=history, inbox_send=send, inbox_receive=receive)
        self._live[row.id] = live
        await self._tg.start(self._actor, live)
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
        return row.to_wire(live.status if live is not None else "idle")

    def thinking_for(self, row: SessionRow) -> Thinking:
        spec = self.catalog.get(row.model_id)
        return thinking.resolve_thinking(spec, row.thinking_level)

    # --- creating and editing -------------------------------------------------------------

    async def start(
        self,
        *,
        model_id: str | None,
        thinking_level: str | None,
        cwd: str | None,
        title: str | None,
        system_prompt: str | None,
        approval_policy: str | None,
    ) -> LiveSession:
        await self.discover(model_id)
        spec = self.catalog.get(model_id or self.catalog.default_model_id())
        level = self._initial_level(spec, thinking_level)
        row = SessionRow(
            id=new_id("ses"),
            cwd=str(_check_cwd(cwd)),
            model_id=spec.id,
            thinking_level=level,
            approval_policy=approval_policy or self.config.default_approval_policy,
            title=title,
            system_prompt=system_prompt,
        )
        row = await self.store.create_session(row)
        return await self._activate(row, [])

    def _initial_level(self, spec: ModelSpec, requested: str | None) -> str:
        raw = requested if requested is not None else self.config.default_thinking_level
        level = thinking.parse_level(raw, path="$.params.thinking_level") if raw else "default"
        if level == "default":
            level = self.catalog.default_level(spec)
        return level

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

    async def set_model(self, session_id: str, model_id: str, level: str | None) -> tuple[SessionRow, ModelSpec]:
        async with self.changes(session_id):
            row = await self.row(session_id)
            await self.discover(model_id)
            spec = self.catalog.get(model_id)
            fields: dict[str, Any] = {"model_id": spec.id}
            if level is not None:
                parsed = thinking.parse_level(level, path="$.params.thinking_level")
                fields["thinking_level"] = self.catalog.default_level(spec) if parsed == "default" else parsed
            row = await self.update(row.id, **fields)
            return row, spec

    async def set_thinking(self, session_id: str, level: str) -> SessionRow:
        async with self.changes(session_id):
            row = await self.row(session_id)
            parsed = thinking.parse_level(level, path="$.params.level")
            if parsed == "default":
                parsed = self.catalog.default_level(self.catalog.get(row.model_id))
            return await self.update(row.id, thinking_level=parsed)

    async def fork(self, session_id: str, message_id: str | None) -> SessionRow:
        source = await self.row(session_id)
        new_row = SessionRow(
            id=new_id("ses"),
            cwd=source.cwd,
            model_id=source.model_id,
            thinking_level=source.thinking_level,
            approval_policy=source.approval_policy,
            title=source.title,
            system_prompt=source.system_prompt,
            parent_id=source.id,
        )
        if message_id is not None:
            messages = await self.store.get_messages(session_id)
            if not any(m.message_id == message_id for m in messages):
                raise InvalidParams(
                    f"Message {message_id!r} is not in session {session_id!r}.", path="$.params.message_id"
                )
        return await self.store.fork_session(source.id, new_row, message_id)

    async def delete(self, session_id: str) -> None:
        await self.row(session_id)
        live = self._live.pop(session_id, None)
        if live is not None:
            live.unloaded = True
            self._drop_queue(live)
            turn = live.current
            if turn is not None:
                turn.hurry()
                turn.cancel_scope.cancel()
                with anyio.move_on_after(3):
                    while live.current is not None:
                        await anyio.sleep(0.01)
            live.inbox_send.close()
        await self.store.delete_session(session_id)

    # --- prompts and turns ----------------------------------------------------------------

    async def prompt(self, session_id: str, text: str) -> tuple[str, bool]:
        live = await self.get(session_id)
        if self.shutting_down:
            raise ShuttingDown()
        spec = self.catalog.get(live.row.model_id)
        self.providers.get(spec.provider, spec.api)  # provider_not_configured before anything is stored
        async with live.admit_lock:
            if live.queued >= self.config.max_queued_prompts:
                raise SessionBusy(session_id)
            if not live.lease_held:
                if not await self.store.acquire_lease(session_id, self._lease_owner, LEASE_TTL_S):
                    raise SessionBusy(session_id, "another ponder process is running a turn in it")
                live.lease_held = True
                await self._refresh(live)
            if live.unsaved:
                await self._flush_unsaved(live)  # earlier replies go in first, or the prompt is refused
            queued = live.status == "running"
            message = ChatMessage(
                message_id=new_id("msg"),
                session_id=session_id,
                seq=live.next_seq(),
                role="user",
                parts=[Part(type="text", text=text)],
                status="complete",
                created_at=now_rfc3339(),
            )
            live.waiting.append(message)  # before the save: a running turn's next seq must skip it
            try:
                await self.store.save_message(message)
            except BaseException:
                live.waiting.remove(message)  # refused: the client is told, nothing is kept
                if live.current is None and not live.queued:
                    with anyio.move_on_after(2, shield=True):
                        await self._release_lease(live)
                raise
            turn_id = new_id("turn")
            live.inbox_send.send_nowait(PendingTurn(turn_id, message))
            return turn_id, queued

    async def _refresh(self, live: LiveSession) -> None:
        """Catch up with what another daemon sharing this home did while we held no lease:
        take the stored row, and the stored history when messages were added; a deleted
        session is unloaded (``SessionNotFound``)."""
        row = await self.store.get_session(live.row.id)
        if row is None:
            self._unload(live)
            raise SessionNotFound(live.row.id)
        if row.message_count != live.stored_count:
            waiting = {m.message_id for m in live.waiting}
            live.history[:] = [m for m in await self.store.get_messages(live.row.id) if m.message_id not in waiting]
        live.row = row

    async def cancel(self, session_id: str) -> tuple[bool, int]:
        live = self._live.get(session_id)
        if live is None:
            await self.row(session_id)  # unknown ids still get session_not_found
            return False, 0
        dropped = self._drop_queue(live)
        turn = live.current
        if turn is None:
            return False, dropped
        turn.cancel_scope.cancel()
        return True, dropped

    def _drop_queue(self, live: LiveSession) -> int:
        dropped = 0
        while True:
            try:
                pending = live.inbox_receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return dropped
            dropped += 1
            # The prompt stays in the history (it was said), after the running turn if there
            # is one; its turn still gets its bracket so a client waiting on the turn id is
            # never left hanging.
            moved = False
            if live.current is not None:
                live.dropped.append(pending.user_message)
            else:
                moved = live.take_waiting(pending.user_message)
            if self._tg is not None:
                self._tg.start_soon(self._bracket_dropped, live, pending, moved)

    async def _join_dropped(self, live: LiveSession) -> None:
        """The prompts dropped while the turn that just ended ran: into the history, after it."""
        moved = [message for message in live.dropped if live.take_waiting(message)]
        live.dropped.clear()
        for message in moved:
            await self._save_dropped(live, message)

    async def _save_dropped(self, live: LiveSession, message: ChatMessage) -> None:
        """Store a dropped prompt again with the seq it took at the end of the history."""
        if live.unloaded:  # a deleted session's prompts go with it
            return
        try:
            await self.store.save_message(message)
        except PonderError as exc:  # shutting down, or the session just deleted
            log.info("a dropped prompt keeps its first seq: %s", exc.message)

    async def _bracket_dropped(self, live: LiveSession, pending: PendingTurn, moved: bool) -> None:
        if moved:
            await self._save_dropped(live, pending.user_message)
        try:
            thinking_now = self.thinking_for(live.row)
        except PonderError:
            thinking_now = _no_thinking(live.row.thinking_level)
        emit = self._emitter(live, pending.turn_id)
        await emit(
            ev.TurnStart,
            {
                "model_id": live.row.model_id,
                "thinking": thinking_now,
                "user_message_id": pending.user_message.message_id,
            },
        )
        await emit(ev.TurnEnd, {"stop_reason": "cancelled", "usage": None, "error": None})

    async def _actor(self, live: LiveSession, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        with live.inbox_receive:
            await self._serve_inbox(live)

    async def _serve_inbox(self, live: LiveSession) -> None:
        while True:
            with anyio.move_on_after(self.config.idle_unload_s) as idle:
                try:
                    pending = await live.inbox_receive.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
            if idle.cancelled_caught:
                if live.status == "idle" and not self.shutting_down and not live.unsaved:
                    self._unload(live)
                    return
                continue
            await self._run_turn(live, pending)
            with anyio.move_on_after(2, shield=True):
                async with live.admit_lock:
                    if not live.queued:
                        await self._release_lease(live)

    async def _release_lease(self, live: LiveSession) -> None:
        """Give the turn lease back, unless messages are unsaved (they go in first, under it).

        A store that refuses keeps the lease ours (the periodic retry releases it later)
        instead of failing the caller: a turn's end must not die of it.
        """
        if not live.lease_held or live.unsaved:
            return
        live.lease_held = False
        try:
            await self.store.release_lease(live.row.id, self._lease_owner)
        except StoreError as exc:
            live.lease_held = True
            log.warning("session %s: could not release its turn lease: %s", live.row.id, exc.message)
            self._retry_later(live)

    def _saver(self, live: LiveSession) -> Callable[[ChatMessage], Awaitable[None]]:
        """The turn's save: this message after any earlier unsaved ones; kept in memory if refused."""

        async def save(message: ChatMessage) -> None:
            live.unsaved[message.message_id] = message
            try:
                await self._flush_unsaved(live)
            except StoreUnavailable as exc:
                log.error("session %s: %d message(s) not saved yet: %s", live.row.id, len(live.unsaved), exc.message)
                self._retry_later(live)
                raise ReplyNotSaved(exc.message) from exc
            except anyio.get_cancelled_exc_class():
                if live.unsaved:
                    self._retry_later(live)  # the write may or may not have happened: write it again
                raise

        return save

    async def _flush_unsaved(self, live: LiveSession) -> None:
        """Write the messages the store refused, in seq order; raises (keeping the rest) if it still refuses."""
        for message in sorted(live.unsaved.values(), key=lambda m: m.seq):
            try:
                await self.store.save_message(message)
            except StoreUnavailable:
                raise
            except PonderError:
                # Not an outage (the session was deleted meanwhile, or a bug): retrying cannot help.
                live.unsaved.pop(message.message_id, None)
                raise
            if live.unsaved.get(message.message_id) is message:
                del live.unsaved[message.message_id]

    def _retry_later(self, live: LiveSession) -> None:
        if not live.retrying and self._tg is not None and not self.shutting_down:
            live.retrying = True
            self._tg.start_soon(self._retry_store_writes, live)

    async def _retry_store_writes(self, live: LiveSession) -> None:
        """Every ``STORE_RETRY_S``: save the unsaved messages, then give the lease back, once idle."""
        try:
            while (live.unsaved or live.lease_held) and not live.unloaded and not self.shutting_down:
                await anyio.sleep(STORE_RETRY_S)
                async with live.admit_lock:
                    if live.current is not None or live.queued:
                        continue  # a running turn saves them itself and releases the lease after
                    try:
                        await self._flush_unsaved(live)
                    except StoreError:
                        continue
                    log.info("session %s: the messages kept in memory are saved now", live.row.id)
                    await self._release_lease(live)
        finally:
            live.retrying = False

    def _unload(self, live: LiveSession) -> None:
        if self._live.get(live.row.id) is live:
            del self._live[live.row.id]
        live.unloaded = True
        live.inbox_send.close()

    async def _run_turn(self, live: LiveSession, pending: PendingTurn) -> None:
        message = pending.user_message
        emit = self._releasing_emitter(live, self._emitter(live, pending.turn_id))
        try:
            if live.take_waiting(message):
                # Stored again with its new seq, so the stored history reads as the conversation happened.
                await self._saver(live)(message)
            turn = self._build_turn(live, pending, emit)
        except PonderError as exc:
            await emit(
                ev.TurnStart,
                {
                    "model_id": live.row.model_id,
                    "thinking": _no_thinking(live.row.thinking_level),
                    "user_message_id": message.message_id,
                },
            )
            await emit(ev.TurnEnd, {"stop_reason": "error", "usage": None, "error": agent._error_info(exc)})
            return
        live.current = turn
        try:
            await agent.run_turn(turn)
        finally:
            live.current = None
        await self._join_dropped(live)
        if not live.unloaded:
            live.row.message_count = live.stored_count
            with anyio.move_on_after(2, shield=True):
                await self.bridge.session_updated(self.wire_session(live.row))

    def _releasing_emitter(self, live: LiveSession, emit: agent.Emit) -> agent.Emit:
        """``emit`` that gives the lease back before a ``turn_end`` when nothing is queued, so a
        client told the turn is over can go on in another ponder process at once."""

        async def release_then_emit(kind: type, fields: dict[str, Any]) -> None:
            if kind is ev.TurnEnd and live.lease_held and not live.queued:
                with anyio.move_on_after(2, shield=True):
                    await self._release_lease(live)
            await emit(kind, fields)

        return release_then_emit

    def _build_turn(self, live: LiveSession, pending: PendingTurn, emit: agent.Emit) -> agent.Turn:
        row = live.row
        spec = self.catalog.get(row.model_id)
        provider = self.providers.get(spec.provider, spec.api)
        resolved = thinking.resolve_thinking(spec, row.thinking_level)
        adjust = getattr(provider, "adjust_thinking", None)
        if adjust is not None:
            probe = ProviderRequest(
                provider=spec.provider, model=spec.model, thinking=resolved, messages=agent.repair_history(live.history)
            )
            resolved = adjust(probe) or resolved
        cwd = Path(row.cwd)
        tools = dict(self.tools)

        async def prepare(turn: agent.Turn) -> None:
            for source in self.tool_sources:
                tools.update(await source.tools_for(row))
            turn.tools = tool_specs(tools) if spec.supports_tools else []

        async def run_tool(name: str, arguments: dict[str, Any], output: Any) -> tuple[str, bool]:
            # Files may hold keys (``.env``) and MCP servers may echo theirs: what a tool prints
            # reaches events, the store and the model, so credentials are masked on the way
            # out. Known now, not at turn start: a short-lived provider token may be new since.
            secrets = known_secrets()  # each ``Secret``, MCP ``env`` values
            mask = SecretMask(secrets)

            async def masked_output(chunk: str) -> None:
                if text := mask.feed(chunk):
                    await output(text)

            context = ToolContext(
                cwd=cwd,
                emit_output=masked_output if output is not None else None,
                secrets=secrets,
                pass_env=self.config.pass_env,
            )
            result = await execute_tool(tools, name, arguments, context)
            if (rest := mask.flush()) and output is not None:
                await output(rest)
            return mask.scrub(result.text), result.is_error

        async def approve(call: Part) -> tuple[bool, str]:
            return await self._approve(live, pending.turn_id, call, tools)

        return agent.Turn(
            session_id=row.id,
            turn_id=pending.turn_id,
            user_message=pending.user_message,
            model_id=spec.id,
            provider_name=spec.provider,
            model_name=spec.model,
            provider=provider,
            thinking=resolved,
            history=live.history,
            emit=emit,
            save=self._saver(live),
            append=self.store.append_to_message,
            next_seq=live.next_seq,
            approve=approve,
            run_tool=run_tool,
            prepare=prepare,
            system_prompt=row.system_prompt,
            settings=agent.TurnSettings(
                max_steps=self.config.max_tool_steps,
                max_attempts=self.config.retry_max_attempts,
                stall_timeout_s=self.config.stall_timeout_s,
                no_progress_timeout_s=self.config.no_progress_timeout_s,
                limits=StreamLimits(
                    max_event_bytes=self.config.max_event_bytes, max_response_bytes=self.config.max_response_bytes
                ),
            ),
        )

    async def _approve(
        self, live: LiveSession, turn_id: str, call: Part, tools: dict[str, Tool[Any]]
    ) -> tuple[bool, str]:
        name = call.name or ""
        tool = tools.get(name)
        if tool is None:
            return True, ""  # unknown tools fail in execute_tool with a message the model can use
        policy = live.row.approval_policy
        verdict = decide(policy, tool.mutating, name, live.allowed_tools, self.bridge.can_ask)
        if verdict == "run":
            return True, ""
        if verdict == "deny":
            return False, denial_message(policy, name)
        try:
            title = tool.summary(parse_arguments(tool, call.arguments or {}))
        except ToolError:
            return True, ""  # invalid arguments: execute_tool reports them without running anything
        params = PermissionRequestParams(
            session_id=live.row.id,
            turn_id=turn_id,
            call_id=call.call_id or "",
            tool=name,
            arguments=call.arguments or {},
            title=title,
            options=["allow_once", "allow_session", "deny"],
        )
        try:
            decision = await self.bridge.ask_permission(params)
        except ClientRequestError:
            return False, denial_message(policy, name, "cannot_ask")
        if decision == "allow_session":
            live.allowed_tools.add(name)
        if decision == "deny":
            return False, denial_message(policy, name, "user_denied")
        return True, ""

    # --- events ---------------------------------------------------------------------------

    def _emitter(self, live: LiveSession, turn_id: str) -> agent.Emit:
        session_id = live.row.id
        deliver = self.bridge.emit
        deliver_nowait = getattr(self.bridge, "emit_nowait", None)
        lock = live.emit_lock
        event_seq = self._event_seq

        async def emit(kind: type, fields: dict[str, Any]) -> None:
            # The lock keeps seq order equal to wire order when tools emit concurrently.
            # Fast path (the common case): nobody else is emitting and the outgoing queue
            # has room, so the event is numbered and queued without yielding to the loop.
            # An event that was not delivered (cancelled while the client was not reading,
            # or unencodable) gives its seq back, so the client never sees a gap.
            if deliver_nowait is not None and not lock.locked():
                lock.acquire_nowait()
                try:
                    seq = event_seq[session_id] = event_seq.get(session_id, 0) + 1
                    event = kind(session_id=session_id, turn_id=turn_id, seq=seq, **fields)
                    if not deliver_nowait(event):
                        await deliver(event)  # queue full: wait, still holding the lock
                except BaseException:
                    event_seq[session_id] = seq - 1
                    raise
                finally:
                    lock.release()
                return
            async with lock:
                seq = event_seq[session_id] = event_seq.get(session_id, 0) + 1
                try:
                    await deliver(kind(session_id=session_id, turn_id=turn_id, seq=seq, **fields))
                except BaseException:
                    event_seq[session_id] = seq - 1
                    raise

        return emit

    def is_live(self, session_id: str) -> bool:
        return session_id in self._live


def _check_cwd(cwd: str | None) -> Path:
    try:
        path = Path(cwd).expanduser() if cwd else Path(os.getcwd())
    except RuntimeError:  # ``~name`` for a user without a home directory
        raise InvalidParams(f"cwd {cwd!r} names a user with no home directory.", path="$.params.cwd") from None
    if not path.is_absolute():
        raise InvalidParams(f"cwd must be an absolute path, got {cwd!r}.", path="$.params.cwd")
    shown = repr(str(path)) if len(str(path)) <= 200 else repr(str(path)[:200]) + "..."  # a 5,000-character path
    try:
        # is_dir() turns only some errors into False: a name too long, for one, still raises.
        if path.is_dir():
            return path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidParams(f"cwd {shown} cannot be used: {reason}.", path="$.params.cwd") from None
    raise InvalidParams(f"cwd {shown} is not an existing directory.", path="$.params.cwd")


def _no_thinking(level: str) -> Thinking:
    return Thinking(requested=level, effective="off", supported=[], reason=None, budget_tokens=None, request_params={})  # type: ignore[arg-type]
