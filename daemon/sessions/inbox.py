"""A session's waiting input (``Inbox``): the admitted turns waiting for the running one to end,
in the order they will run, and the steers waiting to join the running turn before its next
model call (PROTOCOL.md "Steering, the queue and continuing").

Unlike a channel, it can be read and edited in place: ``queue_update`` shows it, and
``session/queue/remove`` takes a waiting prompt or steer back out of it. Both kinds count
against one capacity (``[defaults] max_queued_prompts``). Every method but ``next`` is
synchronous, so a check and the change it decides happen without another task in between.
"""

from collections import deque

import anyio
import msgspec

from daemon import agent
from daemon.conversation import ChatMessage
from daemon.sessions.thinking_settings import ThinkingRequest


class PendingTurn(msgspec.Struct):
    turn_id: str
    user_message: ChatMessage | None  # None for a compaction turn, and for a continue with nothing new to say
    # The thinking settings in force when the prompt was sent (a per-turn level included):
    # a queued prompt keeps them, whatever changes before its turn starts.
    thinking: ThinkingRequest
    compaction: agent.CompactionRequest | None = None  # what a compaction turn does (session/compact)
    continued_from: str | None = None  # session/continue: the turn this one goes on with
    output: agent.OutputRequest | None = None  # the prompt's output_schema and output_retries
    max_turns: int | None = None  # at most this many model calls (``ponder ask --max-turns``)
    # False for a steer requeued as a turn (stored when its turn starts); True for an admitted prompt.
    stored: bool = True
    announced: bool = False  # a queue_update showed it waiting: its leaving is told too


class PendingSteer(msgspec.Struct):
    """A steer admitted while a turn runs: not stored until it joins that turn."""

    message: ChatMessage  # seq 0 until it joins; ``origin: "steer"``
    turn_id: str  # the running turn it was admitted to (the answer's ``turn_id``)


class InboxClosed(Exception):
    """The session was unloaded or deleted: its actor stops."""


class Inbox:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.turns: deque[PendingTurn] = deque()
        self.steers: list[PendingSteer] = []
        self.closed = False
        self._arrived = anyio.Event()
        self._woken = False

    def __len__(self) -> int:
        return len(self.turns) + len(self.steers)

    @property
    def full(self) -> bool:
        return len(self) >= self.capacity

    def put(self, pending: PendingTurn, *, front: bool = False) -> None:
        """Queue a turn (``front``: ahead of the others, as a steer whose turn ended before it joined)."""
        if front:
            self.turns.appendleft(pending)
        else:
            self.turns.append(pending)
        self._arrived.set()

    def add_steer(self, steer: PendingSteer) -> None:
        self.steers.append(steer)

    def take_steers(self) -> list[PendingSteer]:
        """Every waiting steer, in the order they arrived; the inbox keeps none."""
        steers, self.steers = self.steers, []
        return steers

    def take_turns(self) -> list[PendingTurn]:
        """Every queued turn, in order; the inbox keeps none."""
        turns = list(self.turns)
        self.turns.clear()
        return turns

    def remove(self, message_id: str) -> PendingTurn | PendingSteer | None:
        """Take the waiting prompt or steer whose message is ``message_id`` out; None if none waits."""
        for steer in self.steers:
            if steer.message.message_id == message_id:
                self.steers.remove(steer)
                return steer
        for pending in self.turns:
            if pending.user_message is not None and pending.user_message.message_id == message_id:
                self.turns.remove(pending)
                return pending
        return None

    async def next(self, timeout_s: float, *, wakeable: bool = False) -> PendingTurn | None:
        """The next queued turn, waiting up to ``timeout_s`` for one (None then, or at ``wake``
        when ``wakeable``); ``InboxClosed`` once closed."""
        self._woken = False  # a wake meant for an earlier wait is not this one's
        with anyio.move_on_after(timeout_s):
            while not self.turns:
                if self.closed:
                    raise InboxClosed()
                if wakeable and self._woken:
                    return None
                self._arrived = anyio.Event()
                await self._arrived.wait()
            if self.closed:
                raise InboxClosed()
            return self.turns.popleft()
        if self.closed:
            raise InboxClosed()
        return None

    def wake(self) -> None:
        """End a ``wakeable`` wait of ``next`` (the session's last subscriber left: its actor looks
        again at whether to unload it); any other wait goes on."""
        self._woken = True
        self._arrived.set()

    def close(self) -> None:
        self.closed = True
        self._arrived.set()
