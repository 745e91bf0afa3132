"""The per-session actor: one task per live session takes admitted prompts from the session's
bounded inbox and runs their turns, one at a time, in order; it unloads the session once idle.
Prompts dropped from the inbox (a cancel, shutdown) still get their ``turn_start``/``turn_end``
bracket, so a client waiting on a turn id is never left hanging.

It also hands a running prompt turn the steers waiting for it (``InboxSteers``, before each
model call), and turns the steers that arrived too late to join into the next turn."""

import logging
import math
from collections.abc import Awaitable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from daemon import agent
from daemon.agent.compaction import should_compact
from daemon.catalog.catalog import Catalog
from daemon.config.settings import Config
from daemon.conversation import ChatMessage
from daemon.errors import PonderError, SessionBusy
from daemon.sessions.assembly import TurnAssembly
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.emitter import EventNumbers
from daemon.sessions.inbox import InboxClosed
from daemon.sessions.live import LiveSession, PendingTurn, no_thinking
from daemon.sessions.persistence import SessionWrites
from daemon.sessions.thinking_settings import ThinkingRequest
from daemon.store import AsyncStore, SessionRow
from daemon.util import foreground
from daemon.util.clock import new_id
from protocol import events as ev
from protocol.objects import ErrorInfo, Session, Thinking

log = logging.getLogger("ponder.sessions")


class SessionHost(Protocol):
    """What an actor needs of the registry that runs it (``SessionManager``), declared here so
    that the actor does not import the manager that imports it."""

    config: Config
    catalog: Catalog
    store: AsyncStore
    bridge: ClientBridge
    assembly: TurnAssembly
    events: EventNumbers
    writes: SessionWrites
    task_group: TaskGroup | None
    shutting_down: bool

    def unload(self, live: LiveSession) -> None: ...

    def wire_session(self, row: SessionRow) -> Session: ...

    def thinking_for(self, row: SessionRow) -> Thinking: ...


async def run_actor(manager: SessionHost, live: LiveSession, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    await _serve_inbox(manager, live)


async def _serve_inbox(manager: SessionHost, live: LiveSession) -> None:
    followed = False
    while True:
        try:
            # Idle for ``idle_unload_s`` with nobody following it: unloaded. Followed (a listening
            # daemon's subscriber): kept until a turn comes or the last follower leaves, and
            # unloaded one idle period after that if nobody follows it again.
            pending = await live.inbox.next(math.inf if followed else manager.config.idle_unload_s, wakeable=followed)
        except InboxClosed:
            return
        if pending is None and followed:
            followed = False
            continue  # its last follower left: a new idle period starts
        followed = False
        if pending is None:
            if live.status == "idle" and not manager.shutting_down and not live.unsaved:
                if manager.bridge.keeps_loaded(live.row.id, live.inbox.wake):
                    followed = True
                    continue
                manager.unload(live)
                return
            continue
        live.active = pending  # taken together with the queue: a steer from now on joins this turn
        # Someone waits for this turn's first delta: until it is relayed, the replies already
        # streaming give way (``daemon.util.foreground``).
        starting = foreground.Hold()
        try:
            if pending.announced:
                await manager.events.queue_update(live)
            await _run_turn(manager, live, pending, starting)
        finally:
            starting.release()
            if _requeue_steers(live, pending) and manager.task_group is not None:
                manager.task_group.start_soon(manager.events.queue_update, live)
            live.active = None  # together with the requeue: no steer falls between the two
        with anyio.move_on_after(2, shield=True):
            async with live.admit_lock:
                if not live.queued:
                    await manager.writes.release_lease(live)


async def _run_turn(manager: SessionHost, live: LiveSession, pending: PendingTurn, starting: foreground.Hold) -> None:
    message = pending.user_message
    emit = _releasing_emitter(manager, live, manager.events.emitter(live, pending.turn_id))
    messages = manager.writes.messages(live, pending.turn_id)
    try:
        if pending.announced:
            # It waited in the queue behind another turn, under a lease this daemon kept (so nothing
            # caught up with the store): the budget as stored now holds from its first model call,
            # also one another daemon changed meanwhile. A turn started at admission needs no read:
            # taking the lease read the row, and an await here would let a prompt admitted meanwhile
            # take a seq between this prompt and its reply.
            await manager.assembly.accounts.reread_budget(live)
        if message is not None and not pending.stored:
            # A steer whose turn ended before it joined: stored now, as the start of its own turn
            # (under the lease, which admission took for the others).
            if not live.lease_held and not await manager.writes.acquire_lease(live):
                raise SessionBusy(live.row.id, "another ponder process is running a turn in it")
            message.seq = live.next_seq()
            live.history.append(message)
            await messages.save(message)
        elif message is not None and live.take_waiting(message):
            # Stored again with its new seq, so the stored history reads as the conversation happened.
            await messages.save(message)
        turn = manager.assembly.build(live, pending, emit, messages)
        turn.continued_from = pending.continued_from
        turn.starting = starting
        if pending.compaction is None:
            turn.steers = InboxSteers(manager, live)
        # Before a prompt, when its request would not fit: a compaction turn of its own first (the
        # prompt's turn reads the history and the records when it runs, so it stays as built).
        if message is not None and await should_compact(turn):
            stop_reason, discarded = await _compact_before_prompt(manager, live, pending.thinking)
            if stop_reason == "cancelled":
                await bracket(manager, live, pending, "cancelled")
                return
            if turn.compaction is not None:  # a summary thrown away there counts for this prompt
                turn.compaction.discarded += discarded
    except PonderError as exc:
        await bracket(manager, live, pending, "error", agent.error_info(exc), emit=emit)
        return
    live.current = turn
    try:
        await agent.run_turn(turn)
    finally:
        live.turn_done()
    await _join_dropped(manager, live)
    if not live.unloaded:
        live.row.message_count = live.stored_count
        with anyio.move_on_after(2, shield=True):
            await manager.bridge.session_updated(manager.wire_session(live.row))


class InboxSteers:
    """The steers waiting in a live session's inbox to join its running turn (``agent.Steers``)."""

    def __init__(self, manager: SessionHost, live: LiveSession) -> None:
        self._manager = manager
        self._live = live

    def waiting(self) -> bool:
        return bool(self._live.inbox.steers)

    async def take(self) -> list[ChatMessage]:
        """In arrival order; the inbox keeps none (its queue changed: told as ``queue_update``)."""
        steers = self._live.inbox.take_steers()
        if steers:
            await self._manager.events.queue_update(self._live)
        return [steer.message for steer in steers]


def _requeue_steers(live: LiveSession, ended: PendingTurn) -> bool:
    """Steers that arrived too late to join the turn that just ended start the next turn, ahead
    of queued prompts and compactions: the first becomes that turn's prompt (stored when it
    starts), the others wait to join it before its first model call. Synchronous, and called
    together with clearing ``live.active``, so that no steer is admitted in between."""
    if live.unloaded or live.inbox.closed or not live.inbox.steers:
        return False
    first = live.inbox.steers.pop(0)
    pending = PendingTurn(new_id("turn"), first.message, ended.thinking, stored=False, announced=True)
    live.inbox.put(pending, front=True)
    return True


async def _compact_before_prompt(manager: SessionHost, live: LiveSession, thinking: ThinkingRequest) -> tuple[str, int]:
    """Before a prompt (the last message of the history now) whose request exceeds ``window -
    reserve``: a compaction turn of its own (``kind: "compaction"``); its stop reason, and how many
    summaries it paid for and threw away."""
    request = agent.CompactionRequest(compaction_id=new_id("cmp"), trigger="threshold", pending=1)
    pending = PendingTurn(new_id("turn"), None, thinking, request)
    # Not the releasing emitter: the prompt's turn follows under the same lease.
    turn = manager.assembly.build(
        live, pending, manager.events.emitter(live, pending.turn_id), manager.writes.messages(live)
    )
    live.current = turn
    live.compacting = pending.turn_id  # no steer joins a compaction turn
    try:
        stop_reason = await agent.run_turn(turn)
    finally:
        live.compacting = None
        live.turn_done()
    return stop_reason, turn.compaction.discarded if turn.compaction is not None else 0


def _releasing_emitter(manager: SessionHost, live: LiveSession, emit: agent.Emit) -> agent.Emit:
    """``emit`` that gives the lease back before a ``turn_end`` when nothing is queued, so a
    client told the turn is over can go on in another ponder process at once."""

    async def release_then_emit(kind: type[ev.BaseEvent], fields: dict[str, Any]) -> None:
        if live.lease_held and not live.queued and not live.inbox.steers:
            with anyio.move_on_after(2, shield=True):
                await manager.writes.release_lease(live)
        await emit(kind, fields)

    def emit_or_release(kind: type[ev.BaseEvent], fields: dict[str, Any]) -> Awaitable[None]:
        # Not a coroutine of its own: every delta passes here, and only turn_end needs more.
        return release_then_emit(kind, fields) if kind is ev.TurnEnd else emit(kind, fields)

    return emit_or_release


def drop_queue(manager: SessionHost, live: LiveSession) -> tuple[int, list[ChatMessage]]:
    """Drop the session's queued prompts (each still bracketed) and its waiting steers (stored
    nowhere): how many prompts there were, and the steers' messages, in arrival order."""
    steers = [steer.message for steer in live.inbox.take_steers()]
    dropped = 0
    for pending in live.inbox.take_turns():
        if pending.user_message is not None and not pending.stored:
            steers.append(pending.user_message)  # a steer requeued as a turn: still a steer, never announced
            continue
        dropped += 1
        # The prompt stays in the history (it was said), after the running turn if there
        # is one; its turn still gets its bracket so a client waiting on the turn id is
        # never left hanging.
        moved = False
        if pending.user_message is None:
            pass  # a compaction: nothing was stored
        elif live.current is not None:
            live.dropped.append(pending.user_message)
        else:
            moved = live.take_waiting(pending.user_message)
        background = manager.task_group
        if background is not None:
            background.start_soon(_bracket_dropped, manager, live, pending, moved)
    if (steers or dropped) and manager.task_group is not None and not live.unloaded:
        manager.task_group.start_soon(manager.events.queue_update, live)
    return dropped, steers


async def _join_dropped(manager: SessionHost, live: LiveSession) -> None:
    """The prompts dropped while the turn that just ended ran: into the history, after it."""
    moved = [message for message in live.dropped if live.take_waiting(message)]
    live.dropped.clear()
    for message in moved:
        await _save_dropped(manager, live, message)


async def _save_dropped(manager: SessionHost, live: LiveSession, message: ChatMessage) -> None:
    """Store a dropped prompt again with the seq it took at the end of the history."""
    if live.unloaded:  # a deleted session's prompts go with it
        return
    try:
        await manager.store.save_message(message)
    except PonderError as exc:  # shutting down, or the session just deleted
        log.info("a dropped prompt keeps its first seq: %s", exc.message)


async def _bracket_dropped(manager: SessionHost, live: LiveSession, pending: PendingTurn, moved: bool) -> None:
    if moved and pending.user_message is not None:
        await _save_dropped(manager, live, pending.user_message)
    await bracket(manager, live, pending, "cancelled")


async def bracket(
    manager: SessionHost,
    live: LiveSession,
    pending: PendingTurn,
    stop_reason: str,
    error: ErrorInfo | None = None,
    *,
    emit: agent.Emit | None = None,
) -> None:
    """The ``turn_start``/``turn_end`` of a turn that never ran (dropped, or it could not be built);
    a compaction turn also gets its one ``compaction_end``."""
    try:
        thinking_now = pending.thinking.decide(manager.catalog, manager.catalog.get(live.row.model_id))
    except PonderError:
        thinking_now = no_thinking(pending.thinking.level)
    emit = emit or manager.events.emitter(live, pending.turn_id)
    message, compaction = pending.user_message, pending.compaction
    await emit(
        ev.TurnStart,
        {
            "model_id": live.row.model_id,
            "thinking": thinking_now,
            "user_message_id": message.message_id if message is not None else None,
            "kind": "compaction" if compaction is not None else "prompt",
            "continued_from": pending.continued_from,
        },
    )
    if compaction is not None:
        status = "cancelled" if stop_reason == "cancelled" else "failed"
        await emit(ev.CompactionEnd, {"compaction_id": compaction.compaction_id, "status": status, "error": error})
    await emit(ev.TurnEnd, {"stop_reason": stop_reason, "usage": None, "error": error})
