"""What one turn is made of: the ``Turn`` the session actor builds, its settings, how it
compacts (``CompactionSetup``, ``Summarizer``, ``CompactionRequest``), and the collaborators
through which the agent reaches the rest of the daemon, each a declared interface that
``daemon.sessions`` implements: the client (``Emit``), the session's messages (``MessageLog``),
the tools and hooks (``Toolkit``), the session's spending (``Account``), a refused thinking
level (``LevelRetry``) and the steers waiting to join (``Steers``).

It also owns how a cancelled or failed turn finishes: ``Turn.finishing`` shields the last
writes and events from cancellation, bounded by ``SHUTDOWN_GRACE_S`` once the daemon is
shutting down (``Turn.hurry``).
"""

from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import anyio
import msgspec

from daemon.agent.media import TurnMedia
from daemon.agent.structured import TurnOutput
from daemon.agent.watchdog import Watchdogs
from daemon.context.estimate import Calibration
from daemon.conversation import ChatMessage, Part, ToolSpec
from daemon.errors import PonderError, ProviderError
from daemon.providers.base import Provider, StreamLimits
from daemon.util.foreground import Hold
from protocol import events as ev
from protocol.objects import Compaction, ErrorInfo, Thinking, Usage

# How long the last writes and events of a cancelled turn may take once the daemon is
# shutting down; until then they wait for the client however long it takes to read.
SHUTDOWN_GRACE_S = 2.0

# Every event of the turn goes to the client through this one function (numbered and sent by
# ``sessions.emitter``); a plain callable, as it is passed on as it is (hooks, accounts).
Emit = Callable[[type[ev.BaseEvent], dict[str, Any]], Awaitable[None]]


class Approval(msgspec.Struct, frozen=True):
    """Whether a tool call runs: ``message`` is what the model gets when it does not, and
    ``permission`` what ``tool_execution_start`` says about the decision."""

    allowed: bool
    message: str = ""
    permission: ev.Permission | None = None


class ToolOutcome(msgspec.Struct, frozen=True):
    """What one tool call gave: its text, whether it failed, the images it returned (image
    parts with their bytes), and for ``run_command`` how the sandbox ran it
    (``tool_execution_end.sandbox``)."""

    text: str
    is_error: bool
    images: list[Part] = msgspec.field(default_factory=list)
    sandbox: ev.ToolSandbox | None = None


class MessageLog(Protocol):
    """The session's messages as a turn writes them (``sessions.persistence.TurnMessages``)."""

    def next_seq(self) -> int:
        """The sequence number of the next message of the session."""
        ...

    async def save(self, message: ChatMessage) -> None:
        """Store ``message`` whole (a reply, a tool message, a steer that joined)."""
        ...

    async def append(
        self,
        message_id: str,
        parts: dict[int, Part],
        texts: dict[int, str],
        *,
        keep_text: frozenset[int] = ...,
        final: ChatMessage | None = ...,
    ) -> None:
        """An incremental checkpoint of a streaming reply (``daemon.store.AsyncStore.append_to_message``)."""
        ...


class Toolkit(Protocol):
    """The tools of a turn and the hooks around them (``sessions.tool_runner.ToolRunner``)."""

    async def prepare(self, turn: "Turn") -> None:
        """After ``turn_start``, inside the turn's cancel scope: the ``user_prompt_submit`` hooks (a deny
        raises ``HookDenied``), then ``turn.tools`` filled in (MCP servers may take a while to start)."""
        ...

    async def approve(self, call: Part) -> Approval:
        """Whether one tool call runs, and what ``tool_execution_start`` says about it."""
        ...

    async def run(self, call: Part, output: Callable[[str], Awaitable[None]]) -> ToolOutcome:
        """Run one approved call; ``output`` gets what it prints as it runs."""
        ...

    async def observe(self, event: str, fields: dict[str, Any]) -> None:
        """Tell the watching hooks (``stop``, ``pre_compact``) what happened; they cannot change it."""
        ...


class Account(Protocol):
    """The session's spending (``sessions.accounts.TurnAccount``)."""

    async def record(self, usage: Usage, estimated: bool) -> None:
        """After each model call: its usage (``estimated``: ponder's estimate, the provider reported
        none that reads as counts) into the session's totals, told as a ``usage`` event."""
        ...

    async def spent(self, reread: bool) -> str | None:
        """Before each model call (the budget re-read from the store, the truth, when ``reread``): None
        while the session's budget allows one, else the sentence saying which is spent."""
        ...


class LevelRetry(Protocol):
    """What a turn does when a provider refuses a thinking level (``sessions.thinking_settings.TurnLevels``)."""

    def learn(self, model_id: str, *, allowed: Iterable[str] | None, refused: str) -> None:
        """Remember, for the life of the daemon, what the provider said about ``model_id``'s levels."""
        ...

    def rethink(self, level: str) -> Thinking:
        """The turn's thinking decided again at ``level``, consulting what was learned."""
        ...


class Steers(Protocol):
    """The steers waiting to join a running prompt turn (``sessions.actor.InboxSteers``)."""

    def waiting(self) -> bool:
        """Whether any steer waits (what ``take`` would give now)."""
        ...

    async def take(self) -> list[ChatMessage]:
        """Before each model call: the waiting steers, in arrival order (not stored yet: the turn
        stores each as a user message of its own, in its brackets)."""
        ...


class TurnSettings(msgspec.Struct):
    max_steps: int = 50
    max_attempts: int = 4
    stall_timeout_s: float = 90.0  # no bytes at all (keep-alives included) from the provider
    no_progress_timeout_s: float = 600.0  # nothing but keep-alives from the provider
    limits: StreamLimits = msgspec.field(default_factory=StreamLimits)


# Room kept for a summary itself: an eighth of the summarizer's window, within these bounds.
SUMMARY_OUTPUT_MIN = 1024
SUMMARY_OUTPUT_MAX = 8192


class Summarizer(msgspec.Struct):
    """The model that writes summaries: the session's, or ``[compaction] model``."""

    provider: Provider
    provider_name: str
    model_name: str
    model_id: str
    thinking: Thinking  # ``[compaction] thinking_level``, else the lowest the model takes
    context_window: int | None
    max_output_tokens: int | None
    # The same level decided again, consulting what providers refused since (``LearnedLevels``):
    # how a summary whose level was refused is asked for once more. None: no retry.
    rethink: Callable[[], Thinking] | None = None

    @property
    def output_room(self) -> int:
        window = self.context_window or SUMMARY_OUTPUT_MAX * 8
        room = max(SUMMARY_OUTPUT_MIN, min(SUMMARY_OUTPUT_MAX, window // 8))
        return min(room, self.max_output_tokens) if self.max_output_tokens else room


SaveCompaction = Callable[[Compaction, Usage | None], Awaitable[Compaction]]


class CompactionSetup(msgspec.Struct):
    """What a turn needs to compact: ``[compaction]`` settings, the model's window, the summarizer,
    the session's compaction records (shared with the live session; appended to) and their save."""

    auto: bool
    reserve_tokens: int
    keep_recent_tokens: int
    context_window: int | None  # the catalogue's, the declared one, one learned from an overflow, or a default
    strip_thinking: bool  # ``ModelSpec.thinking_bound_to_prefix`` of the session's model
    summarizer: Summarizer
    records: list[Compaction]
    save: SaveCompaction
    budget_min: int  # the model's smallest thinking budget (``daemon.models.budgets.budget_range``)
    # A budget-mode model's decided thinking with a smaller budget near the window:
    # (decided, budget, output cap, reason); None for a model whose thinking is not a token budget.
    refit_thinking: Callable[[Thinking, int, int, str], Thinking] | None = None
    # The summarizer's usage goes here too (totals and budgets); see ``_account_summary_call``.
    on_summary_usage: Callable[[Usage, bool], Awaitable[None]] | None = msgspec.field(default=None)
    # How far the provider's token counts are from the estimate (the session's, shared by its turns).
    calibration: Calibration = msgspec.field(default_factory=Calibration)
    # Summaries paid for and thrown away (they did not shrink the request) for the prompt this turn
    # serves: one is the most, after it no automatic compaction is tried.
    discarded: int = 0
    # Keeps a window an overflow error named, for the model, for the life of the daemon.
    learn_window: Callable[[int], None] | None = None


class CompactionRequest(msgspec.Struct, frozen=True):
    """What a compaction turn (``kind: "compaction"``) does: a manual compaction, or one before a prompt."""

    compaction_id: str
    trigger: str  # "manual" | "threshold"
    instructions: str | None = None
    pending: int = 0  # messages at the end of the history not yet answered (the prompt that follows)


class ReplyInProgress(Protocol):
    def snapshot(self) -> ChatMessage | None:
        """The reply as it stands (``status: "streaming"``); None before its first event."""


class Turn(msgspec.Struct):
    """Everything one turn needs; built by the session actor."""

    session_id: str
    turn_id: str
    user_message: ChatMessage | None  # None for a compaction turn
    model_id: str
    provider_name: str
    model_name: str
    provider: Provider
    # The turn's decision for the model (a level retry replaces it); each call's own thinking is
    # derived from it once per request (``agent.call_thinking``).
    thinking: Thinking
    history: list[ChatMessage]  # the session's messages; this turn appends to it
    emit: Emit
    messages: MessageLog
    toolkit: Toolkit
    account: Account
    # How the agent retries a request whose level the provider refused (``agent.level_retry``).
    levels: LevelRetry
    watchdogs: Watchdogs  # the daemon's: each streamed response is watched there
    tools: list[ToolSpec] = msgspec.field(default_factory=list)  # offered to the model (``Toolkit.prepare`` fills it)
    system_prompt: str | None = None
    max_output_tokens: int | None = None  # the model's output limit: no request asks for more
    settings: TurnSettings = msgspec.field(default_factory=TurnSettings)
    # The reply streaming now, if one is: what ``session/resume`` shows of it (``Reply.snapshot``).
    in_progress: ReplyInProgress | None = None
    # Long sessions: how this session compacts (None: never), and for a compaction turn what it does.
    compaction: CompactionSetup | None = None
    compaction_request: CompactionRequest | None = None
    steers: Steers | None = None  # None: nothing can join this turn (a compaction turn)
    continued_from: str | None = None  # session/continue: the turn this one goes on with
    # The images its requests carry (PROTOCOL.md "Prompt content"); None: images are sent as notes.
    media: TurnMedia | None = None
    # The prompt's output_schema as this turn asks for it and judges it (None: any answer will do).
    output: TurnOutput | None = None
    cancel_scope: anyio.CancelScope = msgspec.field(default_factory=anyio.CancelScope)
    usage: Usage = msgspec.field(default_factory=Usage)
    # The thinking the client was last told of (``turn_start``, then each ``thinking_update``).
    reported: Thinking | None = None
    hurried: bool = False  # the daemon is shutting down: finish within SHUTDOWN_GRACE_S
    # Held from the turn's start until its first delta is relayed (``daemon.util.foreground``).
    starting: Hold | None = None
    _final_scopes: set[anyio.CancelScope] = msgspec.field(default_factory=set)

    def hurry(self) -> None:
        """Bound the turn's last writes and events (the daemon is shutting down)."""
        self.hurried = True
        deadline = anyio.current_time() + SHUTDOWN_GRACE_S
        for scope in self._final_scopes:
            scope.deadline = min(scope.deadline, deadline)

    @contextmanager
    def finishing(self) -> Iterator[None]:
        """Shielded from cancellation, for the writes and events that close a cancelled or
        failed step: they wait for a slow client instead of being dropped, unless the
        daemon is shutting down (``hurry``)."""
        with anyio.CancelScope(shield=True) as scope:
            if self.hurried:
                scope.deadline = anyio.current_time() + SHUTDOWN_GRACE_S
            self._final_scopes.add(scope)
            try:
                yield
            finally:
                self._final_scopes.discard(scope)


async def wait_to_retry(turn: Turn, attempt: int, delay: float, exc: ProviderError) -> None:
    """Tell the client (a ``retry`` event) that attempt ``attempt`` follows ``exc`` in ``delay`` seconds; then wait."""
    retry = {"attempt": attempt, "max_attempts": turn.settings.max_attempts, "delay_ms": int(delay * 1000)}
    await turn.emit(ev.Retry, {**retry, "error": error_info(exc)})
    await anyio.sleep(delay)


async def spent_budget(turn: Turn, *, reread: bool = True) -> str | None:
    """None while the session's budget allows another model call, else the sentence saying which is spent.
    ``reread``: read the budget from the store first (False for a turn's first call: admission has just
    caught up with the store when another daemon held the session)."""
    return await turn.account.spent(reread)


def error_info(exc: PonderError) -> ErrorInfo:
    """A failure as reported inside an event (``turn_end.error``, ``retry.error``, ``compaction_end.error``)."""
    status = exc.status if isinstance(exc, ProviderError) else None
    return ErrorInfo(code=int(exc.code), message=exc.message, provider_status=status)
