"""One turn of the agent: stream the model's reply, run the tools it asks for, repeat.

Data flows one way: normalized provider events → protocol events (to the client) and one
``ChatMessage`` per reply (to the store). The partial reply is checkpointed at most every
``CHECKPOINT_S`` (or every ``CHECKPOINT_BYTES`` of new text) as ``interrupted``, appending
only the text that arrived since the last checkpoint, so a crash loses little and a long
reply costs the same per delta at its end as at its start; the final save (also
incremental) marks it ``complete``. Every turn is bracketed by exactly one
``turn_start`` and one ``turn_end``, whatever happens (cancel, provider failure, bug), and
no event of a turn is given up on because the client reads slowly.

A watchdog task aborts a response when the provider goes silent (``stall_timeout_s``; its
keep-alives count as life) or sends only keep-alives (``no_progress_timeout_s``). Time spent
waiting for the client to read what we relay is neither: back-pressure from our own output
never counts against the provider.
"""

import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from daemon.call_ids import ReplyCallIds, for_provider
from daemon.conversation import ChatMessage, Part
from daemon.errors import PonderError, ProviderError
from daemon.providers.base import (
    BlockDelta,
    BlockEnd,
    BlockStart,
    KeepAlive,
    Provider,
    ProviderRequest,
    Stop,
    StreamLimits,
    ToolSpec,
    UsageUpdate,
    arguments_problem,
    decode_arguments,
    invalid_arguments,
)
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339
from daemon.util.heap import release_free_memory
from protocol import events as ev
from protocol.errors import ErrorCode
from protocol.objects import ErrorInfo, Thinking, Usage

log = logging.getLogger("ponder.agent")

CHECKPOINT_S = 0.5
# A fast stream checkpoints by size too: one append stays small, and so do the transient
# copies (ours and SQLite's) that it costs.
CHECKPOINT_BYTES = 1024 * 1024
# The end event of a block with at least this much text is sent once the provider's stream
# has closed (or sooner, before the next event): until then the adapter still holds the
# block's deltas, and encoding the event beside them would hold the text three times over.
LATE_END_CHARS = 1024 * 1024
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0
CANCELLED_RESULT = "Cancelled: the turn was cancelled before this tool call finished."
# How long the last writes and events of a cancelled turn may take once the daemon is
# shutting down; until then they wait for the client however long it takes to read.
SHUTDOWN_GRACE_S = 2.0
_SURROGATE = re.compile("[\ud800-\udfff]")

Emit = Callable[[type, dict[str, Any]], Awaitable[None]]
# (call part) -> (allowed, message shown to the model when denied)
Approve = Callable[[Part], Awaitable[tuple[bool, str]]]
# (name, arguments, emit_output) -> (text, is_error)
RunTool = Callable[[str, dict[str, Any], Callable[[str], Awaitable[None]]], Awaitable[tuple[str, bool]]]


class AppendParts(Protocol):
    """An incremental checkpoint: ``daemon.store.AsyncStore.append_to_message``."""

    async def __call__(
        self,
        message_id: str,
        parts: dict[int, Part],
        texts: dict[int, str],
        *,
        keep_text: frozenset[int] = ...,
        final: ChatMessage | None = ...,
    ) -> None: ...


@dataclass
class TurnSettings:
    max_steps: int = 50
    max_attempts: int = 4
    stall_timeout_s: float = 90.0  # no bytes at all (keep-alives included) from the provider
    no_progress_timeout_s: float = 600.0  # nothing but keep-alives from the provider
    limits: StreamLimits = field(default_factory=StreamLimits)


@dataclass
class Turn:
    """Everything one turn needs; built by the session actor."""

    session_id: str
    turn_id: str
    user_message: ChatMessage
    model_id: str
    provider_name: str
    model_name: str
    provider: Provider
    thinking: Thinking
    history: list[ChatMessage]  # the session's messages; this turn appends to it
    emit: Emit
    save: Callable[[ChatMessage], Awaitable[None]]
    append: AppendParts
    next_seq: Callable[[], int]
    approve: Approve
    run_tool: RunTool
    tools: list[ToolSpec] = field(default_factory=list)
    # Fills in ``tools`` (MCP servers may take a while to start): awaited after
    # ``turn_start`` and inside the turn's cancel scope, so a cancel reaches it.
    prepare: Callable[["Turn"], Awaitable[None]] | None = None
    system_prompt: str | None = None
    settings: TurnSettings = field(default_factory=TurnSettings)
    cancel_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    usage: Usage = field(default_factory=Usage)
    hurried: bool = False  # the daemon is shutting down: finish within SHUTDOWN_GRACE_S
    _final_scopes: set[anyio.CancelScope] = field(default_factory=set)

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


async def run_turn(turn: Turn) -> str:
    """Run a turn to its end and return its stop reason. Never raises for a failed turn."""
    await turn.emit(
        ev.TurnStart,
        {"model_id": turn.model_id, "thinking": turn.thinking, "user_message_id": turn.user_message.message_id},
    )
    stop_reason, error = "error", None
    with turn.cancel_scope:
        try:
            if turn.prepare is not None:
                await turn.prepare(turn)
            stop_reason = await _tool_loop(turn)
        except PonderError as exc:
            error = _error_info(exc)
        except Exception as exc:
            log.exception("turn %s failed", turn.turn_id)
            error = ErrorInfo(code=int(ErrorCode.INTERNAL_ERROR), message=f"Internal error: {type(exc).__name__}.")
    if turn.cancel_scope.cancelled_caught:
        stop_reason, error = "cancelled", None
    with turn.finishing():
        await turn.emit(ev.TurnEnd, {"stop_reason": stop_reason, "usage": turn.usage, "error": error})
    return stop_reason


def _error_info(exc: PonderError) -> ErrorInfo:
    status = exc.status if isinstance(exc, ProviderError) else None
    return ErrorInfo(code=int(exc.code), message=exc.message, provider_status=status)


async def _tool_loop(turn: Turn) -> str:
    for _step in range(turn.settings.max_steps):
        reply, stop = await _respond_with_retries(turn)
        calls = [p for p in reply.parts if p.type == "tool_call"]
        if stop != "tool_use" or not calls:
            # "tool_use" with no call to run is a finished turn: a turn never ends "tool_use".
            return "end_turn" if stop == "tool_use" else stop
        await _run_tools(turn, calls)
    return "tool_limit"


async def _respond_with_retries(turn: Turn) -> tuple[ChatMessage, str]:
    attempt = 1
    while True:
        reply = _Reply(turn)
        try:
            return await reply.stream()
        except ProviderError as exc:
            if reply.started or not exc.retryable or attempt >= turn.settings.max_attempts:
                raise
            delay = _backoff(attempt, exc.retry_after)
            attempt += 1
            log.info("retrying %s in %.1fs (attempt %d): %s", turn.provider_name, delay, attempt, exc.message)
            await turn.emit(
                ev.Retry,
                {
                    "attempt": attempt,
                    "max_attempts": turn.settings.max_attempts,
                    "delay_ms": int(delay * 1000),
                    "error": _error_info(exc),
                },
            )
            await anyio.sleep(delay)


def _backoff(attempt: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return min(retry_after, BACKOFF_CAP_S * 4)
    base = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
    return base / 2 + random.uniform(0, base / 2)


class _Watchdog:
    """Aborts one streamed response when the provider goes silent or sends only keep-alives.

    One task per response (a cancel scope per event would cost more than relaying the
    event): the stream loop only stamps the time after each event, and time spent relaying
    an event to the client is excluded, since a slow client is not a stalled provider.
    """

    def __init__(self, settings: TurnSettings, scope: anyio.CancelScope) -> None:
        self.settings = settings
        self.scope = scope
        self.last_life = self.last_progress = time.monotonic()
        self.relaying = False
        self.verdict: str | None = None  # "stall" or "no_progress" once it fired

    async def run(self) -> None:
        stall_s, progress_s = self.settings.stall_timeout_s, self.settings.no_progress_timeout_s
        while True:
            if self.relaying:  # the provider's clock starts again when the client has read
                await anyio.sleep(min(1.0, stall_s / 4))
                continue
            now = time.monotonic()
            stall_left = self.last_life + stall_s - now
            progress_left = self.last_progress + progress_s - now
            if stall_left <= 0 or progress_left <= 0:
                self.verdict = "stall" if stall_left <= 0 else "no_progress"
                self.scope.cancel()
                return
            await anyio.sleep(min(stall_left, progress_left))


class _Reply:
    """One streamed assistant reply: its events out, its message into the store."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.message: ChatMessage | None = None  # created at the first provider event
        self.wire_index: dict[int, int] = {}  # provider block index -> position in the message
        self.raw_args: dict[int, list[str]] = {}
        # Deltas of blocks still streaming, joined only when saved: appending to one string
        # per delta would copy the whole text every time (quadratic in the reply's length).
        self.text_chunks: dict[int, list[str]] = {}
        self.stop = "end_turn"
        self.usage: Usage | None = None
        self.last_checkpoint = 0.0
        self.call_ids = ReplyCallIds(turn.history)  # unique in the session even if the provider repeats one
        self.unsaved_bytes = 0  # text received since the last checkpoint (characters, near enough)
        # What the store holds of the message: nothing until the first checkpoint, then
        # how many chunks of each streaming part it has, and which parts it must be given
        # whole at the next checkpoint (started or ended since the last one).
        self.stored = False
        self.stored_chunks: dict[int, int] = {}
        self.stored_len: dict[int, int] = {}  # characters of each part's text the store holds
        self.changed_parts: set[int] = set()
        self.late_end: tuple[type, dict[str, Any]] | None = None  # a big block's end event, see LATE_END_CHARS

    @property
    def started(self) -> bool:
        return self.message is not None

    def _request(self) -> ProviderRequest:
        return ProviderRequest(
            provider=self.turn.provider_name,
            model=self.turn.model_name,
            thinking=self.turn.thinking,
            messages=for_provider(repair_history(self.turn.history), self.turn.provider_name),
            system_prompt=self.turn.system_prompt,
            tools=self.turn.tools,
            limits=self.turn.settings.limits,
        )

    async def stream(self) -> tuple[ChatMessage, str]:
        turn = self.turn
        try:
            await self._relay()
        except anyio.get_cancelled_exc_class():
            with turn.finishing():
                await self._finish("interrupted")
                await _record_cancelled_results(turn, self.message)
            raise
        except Exception:  # a ProviderError, or an adapter's bug on odd data: keep the partial reply
            if self.started:
                with turn.finishing():
                    await self._finish("error")
            raise
        if self.message is None:
            await self._begin()
        message = await self._finish("complete")
        assert message is not None
        return message, self.stop

    async def _relay(self) -> None:
        """Stream the provider's events to the client, watched by a ``_Watchdog``."""
        turn = self.turn
        failure: Exception | None = None
        async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:
                watchdog = _Watchdog(turn.settings, scope)
                tg.start_soon(watchdog.run)  # connecting and waiting for headers count as silence too
                try:
                    events = aiter(await stack.enter_async_context(turn.provider.stream(self._request())))
                    while True:
                        try:
                            event = await anext(events)
                        except StopAsyncIteration:
                            break
                        except RecursionError:  # e.g. JSON nested past the decoder's limit
                            raise self._unreadable("data nested too deeply to read") from None
                        if isinstance(event, KeepAlive):  # proves the stream lives, not that the model progresses
                            watchdog.last_life = time.monotonic()
                            continue
                        watchdog.relaying = True
                        await self._on_event(event)
                        watchdog.relaying = False
                        watchdog.last_life = watchdog.last_progress = time.monotonic()
                except Exception as exc:
                    failure = exc
            tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if watchdog.verdict is not None:
            raise self._aborted(watchdog.verdict)

    def _aborted(self, verdict: str) -> ProviderError:
        turn = self.turn
        if verdict == "stall":
            seconds, what = turn.settings.stall_timeout_s, "nothing"
        else:
            seconds, what = turn.settings.no_progress_timeout_s, "only keep-alives"
        return ProviderError(
            f"{turn.provider_name} sent {what} for {seconds:g} s; the stream was aborted.",
            provider=turn.provider_name,
            retryable=True,
            kind=verdict,
        )

    async def _begin(self) -> None:
        turn = self.turn
        self.message = ChatMessage(
            message_id=new_id("msg"),
            session_id=turn.session_id,
            seq=turn.next_seq(),
            role="assistant",
            parts=[],
            model_id=turn.model_id,
            thinking_requested=turn.thinking.requested,
            thinking_effective=turn.thinking.effective,
            status="interrupted",
            created_at=now_rfc3339(),
        )
        turn.history.append(self.message)
        self.last_checkpoint = time.monotonic()
        await self._emit(ev.MessageStart, {"message_id": self.message.message_id, "role": "assistant"})

    async def _on_event(self, event: Any) -> None:
        if isinstance(event, (BlockStart, BlockDelta, BlockEnd)):
            self._check_unicode(event)
            if self.message is None:
                await self._begin()
        message = self.message
        emit = self._emit
        if isinstance(event, BlockDelta):
            index = self.wire_index.get(event.index)
            if index is None:
                return  # a delta for a block that never started: ignore it
            part = message.parts[index]  # type: ignore[union-attr]
            if part.type == "tool_call":
                self.raw_args.setdefault(index, []).append(event.delta)
                await emit(
                    ev.ToolCallDelta,
                    {"message_id": message.message_id, "index": index, "call_id": part.call_id, "delta": event.delta},  # type: ignore[union-attr]
                )
            else:
                self.text_chunks.setdefault(index, []).append(event.delta)
                self.unsaved_bytes += len(event.delta)
                kind = ev.ThinkingDelta if part.type == "thinking" else ev.TextDelta
                await emit(kind, {"message_id": message.message_id, "index": index, "delta": event.delta})  # type: ignore[union-attr]
            if self.unsaved_bytes >= CHECKPOINT_BYTES or time.monotonic() - self.last_checkpoint >= CHECKPOINT_S:
                await self._checkpoint()
        elif isinstance(event, BlockStart):
            await self._start_block(event)
        elif isinstance(event, BlockEnd):
            await self._end_block(event)
        elif isinstance(event, UsageUpdate):
            self.usage = event.usage
        elif isinstance(event, Stop):
            self.stop = event.reason

    def _unreadable(self, what: str) -> ProviderError:
        name = self.turn.provider_name
        return ProviderError(f"{name} sent {what}; the response was aborted.", provider=name, kind="invalid_data")

    def _check_unicode(self, event: BlockStart | BlockDelta | BlockEnd) -> None:
        """Reject text that cannot be encoded (a lone UTF-16 surrogate, which a JSON escape
        such as ``\\ud800`` can carry) before it reaches the client or the store."""
        if isinstance(event, BlockStart):
            bad = any(_SURROGATE.search(text) is not None for text in (event.name or "", event.call_id or ""))
        elif isinstance(event, BlockDelta):
            bad = not event.delta.isascii() and _SURROGATE.search(event.delta) is not None
        else:
            part = event.part
            bad = not part.text.isascii() and _SURROGATE.search(part.text) is not None
            if not bad and part.type != "text":
                try:  # names, arguments, round-trip data: small next to the text
                    msgspec.json.encode(msgspec.structs.replace(part, text=""))
                except UnicodeEncodeError:
                    bad = True
        if bad:
            raise self._unreadable("text that is not valid Unicode (a lone UTF-16 surrogate)")

    async def _start_block(self, event: BlockStart) -> None:
        message = self.message
        assert message is not None
        index = len(message.parts)
        self.wire_index[event.index] = index
        self.changed_parts.add(index)
        if event.kind == "tool_call":
            call_id = self.call_ids.start(event.index, event.call_id)
            message.parts.append(Part(type="tool_call", call_id=call_id, name=event.name, arguments={}))
            await self._emit(
                ev.ToolCallStart,
                {"message_id": message.message_id, "index": index, "call_id": call_id, "name": event.name or ""},
            )
        else:
            message.parts.append(Part(type=event.kind))
            kind = ev.ThinkingStart if event.kind == "thinking" else ev.TextStart
            await self._emit(kind, {"message_id": message.message_id, "index": index})

    async def _end_block(self, event: BlockEnd) -> None:
        message = self.message
        assert message is not None
        if event.index not in self.wire_index:
            await self._start_block(
                BlockStart(index=event.index, kind=event.part.type, call_id=event.part.call_id, name=event.part.name)
            )  # type: ignore[arg-type]
        index = self.wire_index[event.index]
        part = self.call_ids.finish(event.index, event.part) if event.part.type == "tool_call" else event.part
        message.parts[index] = part
        self.text_chunks.pop(index, None)
        self.changed_parts.add(index)
        mid = message.message_id
        if part.type in ("thinking", "text"):
            end: tuple[type, dict[str, Any]] = (
                (ev.ThinkingEnd, {"message_id": mid, "index": index, "text": part.text, "redacted": part.redacted})
                if part.type == "thinking"
                else (ev.TextEnd, {"message_id": mid, "index": index, "text": part.text})
            )
            if len(part.text) < LATE_END_CHARS:
                await self._emit(*end)
            else:
                await self._emit_late_end()
                self.late_end = end
        elif part.type == "tool_call":
            await self._emit(
                ev.ToolCallEnd,
                {
                    "message_id": mid,
                    "index": index,
                    "call_id": part.call_id,
                    "name": part.name,
                    "arguments": part.arguments or {},
                },
            )

    async def _emit(self, kind: type, fields: dict[str, Any]) -> None:
        await self._emit_late_end()
        await self.turn.emit(kind, fields)

    async def _emit_late_end(self) -> None:
        if self.late_end is not None:
            await self.turn.emit(*self.late_end)
            self.late_end = None

    def _join_streaming_text(self) -> None:
        assert self.message is not None
        for index, chunks in self.text_chunks.items():
            self.message.parts[index].text = "".join(chunks)

    async def _checkpoint(self) -> None:
        self.last_checkpoint = time.monotonic()
        self.unsaved_bytes = 0
        await self._persist(final=False)

    async def _persist(self, *, final: bool) -> None:
        """Store the reply so far: whole the first time, then incrementally, so that a
        checkpoint costs what arrived since the last one, however long the reply is.

        Parts never stored are written whole; parts streaming get their new text appended;
        parts that ended (and every part, at the ``final`` save) get their fields written
        with their stored text kept and only the rest of their text appended.
        """
        message = self.message
        assert message is not None
        if not self.stored:
            self._join_streaming_text()
            await self.turn.save(message)
            self.stored = True
            self.changed_parts.clear()
            self.stored_chunks = {index: len(chunks) for index, chunks in self.text_chunks.items()}
            self.stored_len = {index: len(part.text) for index, part in enumerate(message.parts)}
            return
        whole: dict[int, Part] = {}
        keep_text: set[int] = set()
        appended: dict[int, str] = {}
        positions = range(len(message.parts)) if final else sorted(self.changed_parts | self.text_chunks.keys())
        for index in positions:
            part, chunks, stored = message.parts[index], self.text_chunks.get(index), self.stored_len.get(index)
            if chunks is not None and not final and stored is not None:  # streaming: its new text only
                done = self.stored_chunks.get(index, 0)
                if len(chunks) > done:
                    appended[index] = "".join(chunks[done:])
                    self.stored_len[index] = stored + len(appended[index])
                    self.stored_chunks[index] = len(chunks)
                continue
            if chunks is not None and not final:  # started since the last checkpoint
                part.text = "".join(chunks)
                self.stored_chunks[index] = len(chunks)
            whole[index] = part
            if stored is not None and len(part.text) >= stored:  # the text starts with what is stored
                keep_text.add(index)
                if len(part.text) > stored:
                    appended[index] = part.text[stored:]
            self.stored_len[index] = len(part.text)
        self.changed_parts.clear()
        if not (whole or appended or final):
            return
        try:
            await self.turn.append(
                message.message_id, whole, appended, keep_text=frozenset(keep_text), final=message if final else None
            )
        except BaseException:
            # The counts above already include this increment, and the store may or may not
            # hold it: the next save writes the message whole (which drops appended rows).
            self.stored = False
            raise

    async def _finish(self, status: str) -> ChatMessage | None:
        message = self.message
        if message is None:
            return None
        if self.late_end is not None:
            # The provider's stream is closed and its copy of the deltas freed: give their
            # pages back before the big end event is encoded into fresh ones.
            release_free_memory()
            await self._emit_late_end()
        self._join_streaming_text()
        for index, chunks in self.raw_args.items():
            part = message.parts[index]
            if part.type == "tool_call" and not part.arguments:
                part.arguments = decode_arguments("".join(chunks)) or {}
        message.status = status  # type: ignore[assignment]
        message.stop_reason = self.stop if status == "complete" else status
        message.usage = self.usage
        if self.usage is not None:
            self.turn.usage = add_usage(self.turn.usage, self.usage)
        if self.stored:
            try:
                await self._persist(final=True)  # a long reply is not rewritten whole at its end
            except PonderError:
                pass  # the store refused the increment: saved whole below (kept for later if refused again)
            else:
                await self.turn.emit(ev.MessageEnd, {"message": message.to_wire()})
                return message
        await _save_and_end(self.turn, message)
        return message


def add_usage(total: Usage, more: Usage) -> Usage:
    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return Usage(
        input_tokens=plus(total.input_tokens, more.input_tokens),
        output_tokens=plus(total.output_tokens, more.output_tokens),
        reasoning_tokens=plus(total.reasoning_tokens, more.reasoning_tokens),
        cache_read_tokens=plus(total.cache_read_tokens, more.cache_read_tokens),
        cache_write_tokens=plus(total.cache_write_tokens, more.cache_write_tokens),
    )


# --- tools ------------------------------------------------------------------------------


async def _run_tools(turn: Turn, calls: list[Part]) -> None:
    """Run the calls of one reply (approved ones concurrently) and record one tool message."""
    message = ChatMessage(
        message_id=new_id("msg"),
        session_id=turn.session_id,
        seq=turn.next_seq(),
        role="tool",
        parts=[],
        status="complete",
        created_at=now_rfc3339(),
    )
    turn.history.append(message)
    results: list[Part | None] = [None] * len(calls)
    await turn.emit(ev.MessageStart, {"message_id": message.message_id, "role": "tool"})
    try:
        approved: list[int] = []
        for i, call in enumerate(calls):
            raw = invalid_arguments(call)
            if raw is not None:  # nothing to approve or run: the model hears why and may try again
                await _emit_start(turn, call)
                results[i] = await _finish_call(turn, message, call, arguments_problem(raw), True)
                continue
            allowed, why = await turn.approve(call)
            if allowed:
                approved.append(i)
            else:
                await _emit_start(turn, call)
                results[i] = await _finish_call(turn, message, call, why, True)
        async with anyio.create_task_group() as tg:
            for i in approved:
                tg.start_soon(_execute, turn, message, calls[i], results, i)
    except anyio.get_cancelled_exc_class():
        with turn.finishing():
            message.parts = _with_cancelled(calls, results)
            message.status = "interrupted"
            await _save_and_end(turn, message)
        raise
    message.parts = [r for r in results if r is not None]
    await _save_and_end(turn, message)


async def _save_and_end(turn: Turn, message: ChatMessage) -> None:
    """Save a finished message and close its bracket with ``message_end``.

    When the store refuses it, the bracket still closes (the message is what will be saved
    once the store takes it) and the error then ends the turn with one ``turn_end``.
    """
    try:
        await turn.save(message)
    except PonderError:
        await turn.emit(ev.MessageEnd, {"message": message.to_wire()})
        raise
    await turn.emit(ev.MessageEnd, {"message": message.to_wire()})


async def _emit_start(turn: Turn, call: Part) -> None:
    await turn.emit(
        ev.ToolExecutionStart, {"call_id": call.call_id, "name": call.name, "arguments": call.arguments or {}}
    )


async def _execute(turn: Turn, message: ChatMessage, call: Part, results: list[Part | None], i: int) -> None:
    await _emit_start(turn, call)

    async def output(chunk: str) -> None:
        await turn.emit(ev.ToolExecutionOutput, {"call_id": call.call_id, "chunk": chunk})

    text, is_error = await turn.run_tool(call.name or "", call.arguments or {}, output)
    results[i] = await _finish_call(turn, message, call, text, is_error)


async def _finish_call(turn: Turn, message: ChatMessage, call: Part, text: str, is_error: bool) -> Part:
    await turn.emit(
        ev.ToolExecutionEnd,
        {
            "call_id": call.call_id,
            "name": call.name,
            "is_error": is_error,
            "result": text,
            "message_id": message.message_id,
        },
    )
    return Part(type="tool_result", call_id=call.call_id, name=call.name, text=text, is_error=is_error)


def _with_cancelled(calls: list[Part], results: list[Part | None]) -> list[Part]:
    return [
        r
        if r is not None
        else Part(type="tool_result", call_id=c.call_id, name=c.name, text=CANCELLED_RESULT, is_error=True)
        for c, r in zip(calls, results, strict=True)
    ]


async def _record_cancelled_results(turn: Turn, reply: ChatMessage | None) -> None:
    """A reply cut off after asking for tools gets "cancelled" results, so history stays valid."""
    if reply is None:
        return
    calls = [p for p in reply.parts if p.type == "tool_call"]
    if not calls:
        return
    message = ChatMessage(
        message_id=new_id("msg"),
        session_id=turn.session_id,
        seq=turn.next_seq(),
        role="tool",
        parts=_with_cancelled(calls, [None] * len(calls)),
        status="interrupted",
        created_at=now_rfc3339(),
    )
    turn.history.append(message)
    await turn.save(message)


def repair_history(history: list[ChatMessage]) -> list[ChatMessage]:
    """The history as providers must see it: every tool call answered by a result.

    A crash between a reply that asked for tools and its tool message leaves calls without
    results; each gets a synthetic "cancelled" result (in memory only; the store keeps
    what really happened).
    """
    answered = {p.call_id for m in history if m.role == "tool" for p in m.parts if p.type == "tool_result"}
    calls = [p for m in history if m.role == "assistant" for p in m.parts if p.type == "tool_call"]
    if all(p.call_id in answered for p in calls):
        return history
    repaired: list[ChatMessage] = []
    pending: list[Part] = []
    for message in history:
        if pending and message.role == "tool":
            message = msgspec.structs.replace(
                message, parts=[*message.parts, *_with_cancelled(pending, [None] * len(pending))]
            )
            pending = []
        elif pending:
            repaired.append(_synthetic_tool_message(repaired[-1], pending))
            pending = []
        repaired.append(message)
        if message.role == "assistant":
            pending = [p for p in message.parts if p.type == "tool_call" and p.call_id not in answered]
    if pending:
        repaired.append(_synthetic_tool_message(repaired[-1], pending))
    return repaired


def _synthetic_tool_message(after: ChatMessage, calls: list[Part]) -> ChatMessage:
    return ChatMessage(
        message_id=f"{after.message_id}-results",
        session_id=after.session_id,
        seq=after.seq,
        role="tool",
        parts=_with_cancelled(calls, [None] * len(calls)),
        status="interrupted",
    )
