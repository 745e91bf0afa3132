"""What goes first on the event loop: the work someone is waiting on, before the replies
already streaming.

A burst of prompts (200 sessions prompted at once) starts its turns while the replies that
started first keep the loop busy: every await of a starting turn (its store writes, its
connection, its request, its first events) waits behind one event of every running stream,
and the later sessions' first deltas come seconds late. So what a client waits on holds the
*foreground*: a line from stdin on its way to the loop (``Handoffs``), a request while it is
handled, a starting turn until its reply's first delta (``Hold``). A task relaying a reply
that has sent its first delta marks itself (``streaming``), and the provider's read path
``step_back``s before each read of a marked task while anything holds the foreground: it
lets the loop go round a few times, so that the foreground's work gets most of the loop.

Nothing waits on a clock: when the foreground has nothing ready to run (a turn waiting for
its provider's first token), the extra rounds are empty and the streams go on at once; only
the rounds themselves cost (a few microseconds each). The order of each stream's events is
untouched: only when its next event is handled changes.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

# Rounds of the loop a streaming reply lets go by before each read while the foreground is
# held: its share of the loop against a starting turn's is one to this plus one. (A burst of
# 200 prompts over 200 streams: 4 left the first deltas' p50 where it was, 24 and 48 halved it.)
STEP_BACK_ROUNDS = 24

_holds = 0  # the foreground's holders in this process (its one event loop)
_handoffs: "set[Handoffs]" = set()


class Hold:
    """One holder of the foreground, from its making until ``release`` (idempotent)."""

    def __init__(self) -> None:
        global _holds
        _holds += 1
        self._held = True

    def release(self) -> None:
        global _holds
        if self._held:
            self._held = False
            _holds -= 1


class Handoffs:
    """What a thread has offered the loop and the loop has not taken yet (the stdin reader's
    lines): while any is on its way, it holds the foreground. Each count has one writer:
    ``offer`` is called on the offering thread, ``took`` on the loop; ``close`` on the loop
    (or on the thread once the loop has ended)."""

    def __init__(self) -> None:
        self.offered = 0
        self.taken = 0
        _handoffs.add(self)

    def offer(self) -> None:
        self.offered += 1

    def took(self) -> None:
        self.taken += 1

    def close(self) -> None:
        _handoffs.discard(self)


def held() -> bool:
    """Whether anything holds the foreground now."""
    # A copy of the set: a thread may close its handoffs once the loop has ended.
    return _holds > 0 or any(handoffs.offered != handoffs.taken for handoffs in tuple(_handoffs))


_streaming: ContextVar[bool] = ContextVar("ponder_streaming", default=False)


@contextmanager
def streaming() -> Iterator[None]:
    """Mark the current task as relaying a stream that has started: its reads step back."""
    token = _streaming.set(True)
    try:
        yield
    finally:
        _streaming.reset(token)


async def step_back() -> None:
    """In a task marked ``streaming``, let the loop go round ``STEP_BACK_ROUNDS`` times when the
    foreground is held; else nothing."""
    if _streaming.get() and held():
        for _ in range(STEP_BACK_ROUNDS):
            await anyio.lowlevel.checkpoint()
