"""The in-memory state of one loaded session (``LiveSession``): its history, its waiting input
(``inbox``: prompts waiting for their turn, steers waiting to join the running one), its lease
and unsaved messages, and the running turn."""

import anyio
import msgspec

from daemon import agent
from daemon.context.estimate import Calibration
from daemon.conversation import ChatMessage
from daemon.sessions.inbox import Inbox, PendingSteer, PendingTurn
from daemon.store import SessionRow
from protocol.objects import Compaction, Queue, QueuedTurn, Thinking, WaitingSteer

__all__ = ["LiveSession", "PendingSteer", "PendingTurn", "no_thinking"]


class LiveSession(msgspec.Struct):
    row: SessionRow
    history: list[ChatMessage]
    inbox: Inbox
    # The session's compaction records in seq order; requests fold the history at the last one.
    compactions: list[Compaction] = msgspec.field(default_factory=list)
    # How far the provider's token counts are from ponder's estimate, learned call by call.
    calibration: Calibration = msgspec.field(default_factory=Calibration)
    emit_lock: anyio.Lock = msgspec.field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    # Admission (lease, catching up with the store, storing the prompt) is one step per
    # session: two prompts interleaving there could reload the history under each other.
    admit_lock: anyio.Lock = msgspec.field(default_factory=anyio.Lock)
    current: agent.Turn | None = None
    # The turn the actor took from the inbox and runs now (set before ``current`` is built, and
    # also for the compaction turn before a prompt): what a steer is admitted to.
    active: PendingTurn | None = None
    compacting: str | None = None  # the id of the compaction turn running before a prompt, if one is
    # Set (and replaced) whenever ``current`` goes back to None: what shutdown and delete
    # wait on for a cancelled turn to end.
    turn_ended: anyio.Event = msgspec.field(default_factory=anyio.Event)
    # Admitted prompts, stored but not yet in ``history``: a running turn must not send
    # them to its provider (they would answer a question asked later, or land between a
    # tool call and its result).
    waiting: list[ChatMessage] = msgspec.field(default_factory=list)
    # Waiting prompts a cancel dropped while a turn ran: they join the history once that
    # turn has written its last messages (a cut-off tool call's results come first).
    dropped: list[ChatMessage] = msgspec.field(default_factory=list)
    lease_held: bool = False
    # Messages the store refused (by id, latest version); written again in seq order.
    unsaved: dict[str, ChatMessage] = msgspec.field(default_factory=dict)
    retrying: bool = False  # a retry task is running for this session
    unloaded: bool = False

    @property
    def queued(self) -> int:
        """Turns waiting for the running one to end (queued prompts and compactions)."""
        return len(self.inbox.turns)

    @property
    def status(self) -> str:
        return "running" if self.current is not None or self.active is not None or self.queued else "idle"

    def queue(self) -> Queue:
        """The waiting input as the wire shows it (``Session.queue``, ``queue_update``)."""
        return Queue(
            steers=[WaitingSteer(message_id=s.message.message_id, text=text_of(s.message)) for s in self.inbox.steers],
            queued=[
                QueuedTurn(
                    turn_id=p.turn_id,
                    message_id=None if p.user_message is None else p.user_message.message_id,
                    text=None if p.user_message is None else text_of(p.user_message),
                    kind="compaction" if p.compaction is not None else "prompt",
                )
                for p in self.inbox.turns
            ],
        )

    def turn_done(self) -> None:
        """The running turn is over: ``current`` is cleared and its waiters are woken."""
        self.current = None
        self.turn_ended.set()
        self.turn_ended = anyio.Event()

    async def wait_turn_ended(self) -> None:
        """Return once no turn is running."""
        while self.current is not None:
            await self.turn_ended.wait()

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


def text_of(message: ChatMessage) -> str:
    """A user message's text blocks joined by newlines (how the queue shows it)."""
    return "\n".join(p.text for p in message.parts if p.type == "text")


def no_thinking(level: str) -> Thinking:
    """The thinking a turn reports when it could not be resolved (the model is gone)."""
    return Thinking(requested=level, effective="off", supported=[], reason=None, budget_tokens=None, request_params={})  # type: ignore[arg-type]
