"""The ``ClientBridge`` of the ponder protocol, for one client (stdio) or many (``--listen``):
events as ``agent/event`` notifications, setting changes as ``session/updated``, approvals as
``permission/request``, each sent to the connections that follow the session.

Each connection is a ``Peer``. A stdio peer follows every session and is waited for when it
reads slowly (back-pressure: nothing is lost). A listening daemon's peers follow the sessions
they subscribed to (``session/subscribe``, or a method that subscribes the caller); an event is
encoded once and queued to each without waiting: a peer with more than its bound waiting for it
(in bytes: ``daemon.jsonrpc.backlog``) is dropped with a reason, so one client that stops reading
never stalls the others or the turn. A session someone follows stays loaded while idle
(``keeps_loaded``); on stdio the plain idle rule applies.

A peer may speak another dialect on the same core (ACP, through ``ponder acp --attach``): its
events are handed, unencoded, to its own ``DialectClient`` (the dialect's bridge) through a
bounded queue that a task of its connection drains (so its translation never holds up the turn
or the others; a full queue drops it like a ponder peer), and its permission requests are asked
through that bridge, in the same first-answer-wins race.

Every event also goes into its session's ring (``daemon.server.ring``), from which a subscriber
catches up after a reconnect. A permission request goes to every following controller that
takes them; the first answer wins, the others' later answers get ``already_resolved``
(``Connection.forget_request``), and a controller that subscribes while it waits is asked too.
"""

import itertools
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from daemon.errors import PonderError
from daemon.jsonrpc.connection import ClientRequestError, Connection, encode_notification, encode_request
from daemon.server.ring import Catchup, EventRing
from daemon.sessions.bridge import PermissionAnswer
from protocol.methods import PermissionRequestParams, PermissionRequestResult
from protocol.objects import Session

if TYPE_CHECKING:
    from daemon.tools.client_files import ClientFiles
    from protocol import events as ev

log = logging.getLogger("ponder.clients")

MAX_RINGS = 256  # sessions whose recent events are kept (the least recently active are let go)
Role = Literal["controller", "observer"]
TransportKind = Literal["stdio", "unix", "websocket"]


class DialectClient(Protocol):
    """A connection in another dialect (ACP): its bridge translates the events, asks for approval."""

    client_name: str | None

    async def emit(self, event: "ev.BaseEvent") -> None: ...

    async def session_updated(self, session: Session) -> None: ...

    async def ask_permission(self, params: PermissionRequestParams) -> PermissionAnswer: ...


# Structs with ``eq=False`` (compared and hashed by identity: they are kept in sets and as keys),
# not dataclasses: this module is on the start path, and a dataclass compiles its generated
# methods at import (tests/server/test_start_path.py).
class Peer(msgspec.Struct, eq=False):
    """One connected client: how to reach it, what it declared at ``initialize``, what it follows."""

    connection: Connection
    connection_id: str
    kind: TransportKind
    # None: the client is waited for when it reads slowly (stdio); else how to drop it, with a reason.
    drop: Callable[[str], None] | None
    everything: bool = False  # follows every session (stdio)
    role: Role = "controller"
    can_ask: bool = False  # answers permission requests
    client_name: str | None = None
    sessions: set[str] = msgspec.field(default_factory=set)
    gone: bool = False
    # ``shutdown`` on a listening daemon: this connection closes, the daemon stays.
    close_requested: anyio.Event = msgspec.field(default_factory=anyio.Event)
    # Another dialect's connection: its bridge, and the queue its connection's task translates from.
    dialect: DialectClient | None = None
    relay: MemoryObjectSendStream[Any] | None = None

    @property
    def name(self) -> str | None:
        return self.dialect.client_name if self.dialect is not None else self.client_name

    def follows(self, session_id: str) -> bool:
        return self.everything or session_id in self.sessions

    def asks(self, session_id: str) -> bool:
        """Whether this peer is sent the session's permission requests."""
        return not self.gone and self.role == "controller" and self.can_ask and self.follows(session_id)


class _Ask(msgspec.Struct, eq=False):
    """A permission request waiting for its first answer."""

    request_id: str
    params: PermissionRequestParams
    encoded: bytes
    asked: set[Peer] = msgspec.field(default_factory=set)
    answer: dict[str, Any] | None = None
    answered_by: Peer | None = None
    changed: anyio.Event = msgspec.field(default_factory=anyio.Event)
    # Where the asks through another dialect's bridge run (open while the request waits), and each one's scope.
    task_group: anyio.abc.TaskGroup | None = None
    relayed: dict[Peer, anyio.CancelScope] = msgspec.field(default_factory=dict)

    def wake(self) -> None:
        self.changed.set()


class RpcBridge:
    def __init__(self, *, listening: bool = False, approval_timeout_s: float = 300.0) -> None:
        self.listening = listening
        self.approval_timeout_s = approval_timeout_s
        self.peers: list[Peer] = []
        self._followers: dict[str, list[Peer]] = {}  # session -> peers that subscribed to it
        self._everyone: list[Peer] = []  # peers that follow every session (stdio)
        # session -> what to call when its last follower leaves (its actor keeps it loaded till then)
        self._released: dict[str, Callable[[], None]] = {}
        self._rings: OrderedDict[str, EventRing] = OrderedDict()
        self._let_go: dict[str, int] = {}  # the last seq of each session whose ring was let go
        # This daemon run's event numbering: the emitter counts each session's events from 1 in
        # every daemon run, so a seq from another run names other events (PROTOCOL.md notes).
        self.epoch = os.urandom(8).hex()  # (not secrets: it is not on the start path)
        self._asks: dict[str, dict[str, _Ask]] = {}  # session -> request id -> waiting request
        self._ids = itertools.count(1)
        self._ask_ids = itertools.count(1)

    # --- peers ------------------------------------------------------------------------------

    def add_peer(
        self,
        connection: Connection,
        kind: TransportKind,
        drop: Callable[[str], None] | None = None,
        *,
        dialect: DialectClient | None = None,
        relay: MemoryObjectSendStream[Any] | None = None,
    ) -> Peer:
        peer = Peer(connection, f"c{next(self._ids)}", kind, drop, everything=kind == "stdio")
        if dialect is not None:
            peer.dialect, peer.relay, peer.can_ask = dialect, relay, True
        self.peers.append(peer)
        if peer.everything:
            self._everyone.append(peer)
        return peer

    def remove_peer(self, peer: Peer) -> None:
        """The client went away: it follows nothing more; what it was asked, others may still answer."""
        if peer.gone:
            return
        peer.gone = True
        if peer in self.peers:
            self.peers.remove(peer)
        if peer in self._everyone:
            self._everyone.remove(peer)
        for session_id in list(peer.sessions):
            self._unfollow(peer, session_id)
        for asks in self._asks.values():
            for ask in asks.values():
                self._withdraw(ask, peer)
        if peer.relay is not None:
            peer.relay.close()

    def _withdraw(self, ask: "_Ask", peer: Peer) -> None:
        """``peer`` is no longer asked (it left or unsubscribed): others may still answer."""
        if peer in ask.asked:
            ask.asked.discard(peer)
            peer.connection.forget_request(ask.request_id, resolved_elsewhere=False)
            scope = ask.relayed.pop(peer, None)
            if scope is not None:
                scope.cancel()
            ask.wake()

    def _drop(self, peer: Peer, reason: str) -> None:
        log.warning("dropping connection %s: %s", peer.connection_id, reason)
        drop = peer.drop
        self.remove_peer(peer)
        if drop is not None:
            drop(reason)

    def follow(self, peer: Peer, session_id: str) -> bool:
        """Subscribe ``peer`` to a session's live events; False when it followed it already."""
        if peer.gone or peer.follows(session_id):
            return False
        peer.sessions.add(session_id)
        self._followers.setdefault(session_id, []).append(peer)
        return True

    def unfollow(self, peer: Peer, session_id: str) -> None:
        self._unfollow(peer, session_id)
        for ask in list(self._asks.get(session_id, {}).values()):
            self._withdraw(ask, peer)

    def follow_in_dialect(self, peer: Peer, session_id: str) -> None:
        """Another dialect's peer follows a session it opened or prompted, and is asked what the
        session waits for."""
        assert peer.dialect is not None
        self.follow(peer, session_id)
        if peer.asks(session_id):
            for ask in list(self._asks.get(session_id, {}).values()):
                if peer not in ask.asked and ask.answer is None:
                    self._ask_through_dialect(peer, ask)

    def unfollow_in_dialect(self, peer: Peer, session_id: str) -> None:
        if session_id in peer.sessions:
            self.unfollow(peer, session_id)

    async def _ask_waiting(self, peer: Peer, session_id: str) -> None:
        if peer.asks(session_id):
            for ask in list(self._asks.get(session_id, {}).values()):
                if peer not in ask.asked and ask.answer is None:
                    await self._send_ask(peer, ask)

    def _unfollow(self, peer: Peer, session_id: str) -> None:
        peer.sessions.discard(session_id)
        followers = self._followers.get(session_id)
        if followers is not None and peer in followers:
            followers.remove(peer)
            if not followers:
                del self._followers[session_id]
                released = self._released.pop(session_id, None)
                if released is not None:
                    released()

    def keeps_loaded(self, session_id: str, released: Callable[[], None]) -> bool:
        """Whether a subscriber keeps the idle session loaded (a listening daemon; a stdio client
        follows every session, so the plain idle rule applies there); ``released`` is called when
        the last one leaves."""
        if not self._followers.get(session_id):
            return False
        self._released[session_id] = released  # one actor per session: a reloaded one replaces it
        return True

    def subscribers(self, session_id: str) -> int:
        """How many connections follow the session (``session/list`` rows say so)."""
        return len(self._everyone) + len(self._followers.get(session_id, ()))

    def _targets(self, session_id: str) -> list[Peer]:
        followers = self._followers.get(session_id)
        if not followers:
            return self._everyone
        return [*self._everyone, *followers]

    # --- the ring -----------------------------------------------------------------------------

    def ring(self, session_id: str) -> EventRing:
        ring = self._rings.get(session_id)
        if ring is None:
            ring = self._rings[session_id] = EventRing()
            self._let_go.pop(session_id, None)  # the new ring knows where it starts (its floor)
            while len(self._rings) > MAX_RINGS:
                gone_id, gone = self._rings.popitem(last=False)
                self._let_go[gone_id] = gone.last_seq
        return ring

    def last_seq(self, session_id: str) -> int:
        """The session's latest event seq in this daemon run (0: none yet)."""
        ring = self._rings.get(session_id)
        return self._let_go.get(session_id, 0) if ring is None else ring.last_seq

    def _record(self, session_id: str, seq: int, data: bytes) -> None:
        ring = self._rings.get(session_id)
        if ring is None:
            ring = self.ring(session_id)
        else:
            self._rings.move_to_end(session_id)
        ring.append(seq, data)

    # --- sending --------------------------------------------------------------------------------

    def _queue(self, peer: Peer, data: bytes) -> None:
        """Queue to a peer that is not waited for; one whose queue is full is dropped."""
        if not peer.connection.queue_nowait(data):
            self._drop(peer, "the client does not read its messages (its outgoing queue is full)")

    def _relay(self, peer: Peer, item: Any) -> None:
        """Hand an event (or a changed session) to another dialect's peer; a full queue drops it."""
        assert peer.relay is not None
        try:
            peer.relay.send_nowait(item)
        except anyio.WouldBlock:
            self._drop(peer, "the client does not read its messages (its queue of events is full)")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # its connection is closing

    def emit_nowait(self, event: "ev.BaseEvent") -> bool:
        targets = self._targets(event.session_id)
        if len(targets) == 1 and targets[0].drop is None:  # stdio: one client, waited for
            data = encode_notification("agent/event", event)
            if not targets[0].connection.send_encoded_nowait(data):
                return False
            self._record(event.session_id, event.seq, data)
            return True
        for peer in targets:
            if peer.drop is None and not peer.connection.can_send_now():
                return False  # a waited-for client has no room: the emitter awaits ``emit``
        data = encode_notification("agent/event", event)
        self._record(event.session_id, event.seq, data)
        for peer in targets:
            if peer.relay is not None:
                self._relay(peer, event)
            elif peer.drop is not None:
                self._queue(peer, data)
            else:
                peer.connection.queue_nowait(data)
        return True

    async def emit(self, event: "ev.BaseEvent") -> None:
        data = encode_notification("agent/event", event)
        targets = self._targets(event.session_id)
        # The waited-for ones first: if this is cancelled there, nobody got the event and the
        # emitter gives its seq back.
        for peer in targets:
            if peer.drop is None:
                await peer.connection.send_encoded(data)
        self._record(event.session_id, event.seq, data)
        for peer in targets:
            if peer.gone:
                continue
            if peer.relay is not None:
                self._relay(peer, event)
            elif peer.drop is not None:
                self._queue(peer, data)

    async def _send_to(self, targets: list[Peer], data: bytes, relayed: Any = None) -> None:
        """``data`` to each ponder peer; ``relayed`` (if any) to each peer of another dialect."""
        for peer in list(targets):
            if peer.gone:
                continue
            if peer.relay is not None:
                if relayed is not None:
                    self._relay(peer, relayed)
            elif peer.drop is None:
                await peer.connection.send_encoded(data)
            else:
                self._queue(peer, data)

    async def session_updated(self, session: Session) -> None:
        data = encode_notification("session/updated", {"session": session})
        await self._send_to(self._targets(session.session_id), data, session)

    async def broadcast(self, method: str, params: Any) -> None:
        """A notification for every connection (``auth/completed``)."""
        await self._send_to(self.peers, encode_notification(method, params))

    # --- subscribing ------------------------------------------------------------------------------

    def catchup(self, session_id: str, after_seq: int | None, epoch: str | None = None) -> tuple[int, Catchup]:
        """(last_seq, what a subscriber that saw everything up to ``after_seq`` of ``epoch`` gets).

        ``snapshot_required`` also when the seq cannot be of this daemon run: another ``epoch``,
        or an ``after_seq`` beyond anything this run numbered (a client that saw a daemon before a
        restart); else nothing would tell it that it holds another run's events."""
        ring = self._rings.get(session_id)
        last = self.last_seq(session_id)
        if after_seq is None:
            return last, "none"
        if (epoch is not None and epoch != self.epoch) or after_seq > last:
            return last, "snapshot_required"
        if after_seq == last:
            return last, "none"
        if ring is None:
            return last, "snapshot_required"  # events it lacks were numbered, and let go
        return last, ring.catchup(after_seq)

    def subscribe_then(
        self, peer: Peer, session_id: str, after_seq: int | None, last_seq: int, catchup: Catchup
    ) -> Callable[[], Awaitable[None]]:
        """What runs right behind the ``session/subscribe`` answer: the peer gets the held events it
        missed (``after_seq < seq``, and those that arrived since the answer was made, ``seq >
        last_seq``, which it would otherwise lack), then follows the session, then is asked what
        the session waits for if it takes permission requests."""

        async def then() -> None:
            if peer.gone:
                return
            if peer.follows(session_id):
                # Already following: the live ones after last_seq reached it live.
                ring = self._rings.get(session_id)
                if catchup == "events" and ring is not None:
                    assert after_seq is not None
                    for data in ring.since_until(after_seq, last_seq):
                        await peer.connection.send_encoded(data)
            elif not await self._catch_up(
                peer, session_id, after_seq if after_seq is not None and catchup == "events" else last_seq
            ):
                return
            await self._ask_waiting(peer, session_id)

        return then

    async def _catch_up(self, peer: Peer, session_id: str, after: int) -> bool:
        """Send ``peer`` the held events after ``after``, waiting for room in its queue (a catch-up
        may be longer than the queue), then make it follow the session. Events that arrive while
        it waits join the ring and are sent in the next round; the last look at the ring and the
        follow happen with no await between them, so nothing is missed and nothing sent twice.
        False when it was dropped meanwhile, or fell so far behind that the ring let go of events
        it still lacked (then it is dropped, with that reason: it subscribes again and is told
        ``snapshot_required``)."""
        while True:
            if peer.gone:
                return False
            ring = self._rings.get(session_id)
            if ring is not None and after < ring.floor:
                self._drop(peer, "it fell behind while catching up (the session's held events moved on)")
                return False
            pending = [] if ring is None else ring.since_pairs(after)
            if not pending:
                self.follow(peer, session_id)
                return True
            for _seq, data in pending:
                if peer.gone:
                    return False
                await peer.connection.send_encoded(data)
            after = pending[-1][0]

    def pending_requests(self, session_id: str) -> list[PermissionRequestParams]:
        return [ask.params for ask in self._asks.get(session_id, {}).values() if ask.answer is None]

    def files_for(self, session_id: str) -> "ClientFiles | None":
        return None  # the ponder dialect's file tools use the disk

    # --- permission requests --------------------------------------------------------------------

    @property
    def can_ask(self) -> bool:
        """Whether asking can get an answer: on a listening daemon always (a controller may attach
        before the timeout); on stdio, whether its client takes permission requests."""
        return self.listening or any(peer.can_ask and peer.role == "controller" for peer in self._everyone)

    def _ask_through_dialect(self, peer: Peer, ask: _Ask) -> None:
        assert ask.task_group is not None
        ask.asked.add(peer)
        scope = ask.relayed[peer] = anyio.CancelScope()
        ask.task_group.start_soon(self._ask_in_dialect, peer, ask, scope)

    async def _send_ask(self, peer: Peer, ask: _Ask) -> None:
        if peer.dialect is not None:
            self._ask_through_dialect(peer, ask)
            return
        ask.asked.add(peer)
        peer.connection.expect_answer(ask.request_id, self._answered(ask, peer))
        if peer.drop is None:
            await peer.connection.send_encoded(ask.encoded)
        else:
            self._queue(peer, ask.encoded)

    async def ask_permission(self, params: PermissionRequestParams) -> PermissionAnswer:
        session_id = params.session_id
        request_id = f"ponder-permission-{next(self._ask_ids)}"
        ask = _Ask(request_id, params, encode_request(request_id, "permission/request", params))
        self._asks.setdefault(session_id, {})[request_id] = ask
        failure: ClientRequestError | None = None
        try:
            async with anyio.create_task_group() as tg:
                ask.task_group = tg
                try:
                    await self._wait_for_answer(ask)
                except ClientRequestError as exc:  # raised below, not as a task group's exception group
                    failure = exc
                tg.cancel_scope.cancel()  # the asks through other dialects still open are withdrawn
            if failure is not None:
                raise failure
        except anyio.get_cancelled_exc_class():
            # Withdrawn (the turn was cancelled): the clients asked are told; late answers are ignored.
            for peer in ask.asked:
                if peer.dialect is not None:
                    continue  # its ask was cancelled with the task group (the dialect tells its client)
                peer.connection.forget_request(request_id, resolved_elsewhere=False)
                if not peer.gone:
                    peer.connection.queue_nowait(
                        encode_notification(
                            peer.connection.cancel_method, {peer.connection.cancel_id_field: request_id}
                        )
                    )
            raise
        finally:
            asks = self._asks.get(session_id)
            if asks is not None:
                asks.pop(request_id, None)
                if not asks:
                    del self._asks[session_id]
        winner, answer = ask.answered_by, ask.answer
        assert winner is not None and answer is not None
        try:
            result = msgspec.convert(answer.get("result"), PermissionRequestResult)
        except msgspec.ValidationError as exc:
            raise ClientRequestError(f"The client's answer to permission/request is invalid: {exc}") from None
        from protocol.events import ResolvedBy  # the event types load with the session manager, off the start path

        return PermissionAnswer(result, ResolvedBy(connection_id=winner.connection_id, client_name=winner.name))

    async def _wait_for_answer(self, ask: _Ask) -> None:
        session_id = ask.params.session_id
        deadline = anyio.current_time() + self.approval_timeout_s
        for peer in list(self._targets(session_id)):
            if peer.asks(session_id):
                await self._send_ask(peer, ask)
        while ask.answer is None:
            ask.changed = anyio.Event()
            if ask.asked:
                await ask.changed.wait()
                continue
            if not self.listening:
                raise ClientRequestError("No client can answer permission requests.")
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                await ask.changed.wait()
            if ask.answer is None and not ask.asked and anyio.current_time() >= deadline:
                raise ClientRequestError(f"No client able to answer attached within {self.approval_timeout_s:g} s.")

    async def _ask_in_dialect(self, peer: Peer, ask: _Ask, scope: anyio.CancelScope) -> None:
        """Ask through a dialect's bridge; its answer enters the race like a ponder client's."""
        assert peer.dialect is not None
        answered = self._answered(ask, peer)
        with scope:
            try:
                answer = await peer.dialect.ask_permission(ask.params)
            except PonderError as exc:  # could not be asked, or answered with an error: as a ponder client's error
                log.info("connection %s could not answer a permission request: %s", peer.connection_id, exc.message)
                answered({"error": {"message": exc.message}})
                return
            answered({"result": msgspec.to_builtins(answer.result)})

    def _answered(self, ask: _Ask, peer: Peer) -> Callable[[dict[str, Any]], None]:
        def answered(message: dict[str, Any]) -> None:
            if ask.answer is not None:
                return
            if "error" in message:
                ask.asked.discard(peer)
                ask.wake()
                return
            ask.answer, ask.answered_by = message, peer
            for other in ask.asked:
                if other is not peer:
                    other.connection.forget_request(ask.request_id, resolved_elsewhere=True)
                    scope = ask.relayed.pop(other, None)
                    if scope is not None:
                        scope.cancel()  # the dialect withdraws its question
            ask.wake()

        return answered
