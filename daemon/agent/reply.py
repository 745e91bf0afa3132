"""One streamed assistant reply: provider events out as protocol events, the message into the store.

The partial reply is checkpointed at most every ``CHECKPOINT_S`` after the last checkpoint
was written (or every ``CHECKPOINT_BYTES`` of new text) as ``interrupted``, appending only the text that arrived
since the last checkpoint, so a crash loses little and a long reply costs the same per
delta at its end as at its start; the final save (also incremental) marks it ``complete``.

A ``Watchdog`` (``daemon.agent.watchdog``) aborts a response when the provider goes silent
(``stall_timeout_s``; its keep-alives count as life) or sends only keep-alives
(``no_progress_timeout_s``). Time spent waiting for the client to read what we relay is
neither: back-pressure from our own output never counts against the provider.
"""

import logging
import time
from contextlib import AsyncExitStack
from typing import Any, cast

import anyio
import msgspec

from daemon.agent import call_thinking
from daemon.agent.call_ids import ReplyCallIds, for_provider
from daemon.agent.compaction import messages_to_send
from daemon.agent.context import Turn
from daemon.agent.history import UNFINISHED_CALL, is_unfinished_call, record_cancelled_results, save_and_end
from daemon.agent.watchdog import Verdict
from daemon.context.budget import add_usage
from daemon.context.estimate import message_tokens, request_estimate
from daemon.conversation import ChatMessage, MessageStatus, Part
from daemon.errors import PonderError, ProviderError
from daemon.media import budget
from daemon.providers.base import (
    BlockDelta,
    BlockEnd,
    BlockKind,
    BlockStart,
    KeepAlive,
    ProviderRequest,
    Stop,
    StopKind,
    UsageUpdate,
    decode_arguments,
)
from daemon.tools.text import has_surrogates
from daemon.util import foreground
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339
from daemon.util.heap import release_free_memory
from protocol import events as ev
from protocol.objects import Usage

CHECKPOINT_S = 0.5
# A fast stream checkpoints by size too: one append stays small, and so do the transient
# copies (ours and SQLite's) that it costs.
CHECKPOINT_BYTES = 1024 * 1024
# The end event of a block with at least this much text is sent once the provider's stream
# has closed (or sooner, before the next event): until then the adapter still holds the
# block's deltas, and encoding the event beside them would hold the text three times over.
LATE_END_CHARS = 1024 * 1024
log = logging.getLogger("ponder.agent")


class Reply:
    """One streamed assistant reply: its events out, its message into the store."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.message: ChatMessage | None = None  # created at the first provider event
        self.wire_index: dict[int, int] = {}  # provider block index -> position in the message
        self.raw_args: dict[int, list[str]] = {}
        # Deltas of blocks still streaming, joined only when saved: appending to one string
        # per delta would copy the whole text every time (quadratic in the reply's length).
        self.text_chunks: dict[int, list[str]] = {}
        self.stop: StopKind = "end_turn"
        self.usage: Usage | None = None
        self.last_checkpoint = 0.0
        self.call_ids = ReplyCallIds(turn.history)  # unique in the session even if the provider repeats one
        self.unsaved_bytes = 0  # text received since the last checkpoint (characters, near enough)
        # What the store holds of the message: nothing until the first checkpoint, then
        # how many chunks of each streaming part it has, and which parts it must be given
        # whole at the next checkpoint (started or ended since the last one).
        self.stored = False
        self.ended = False  # the message has its final status (what ``snapshot`` no longer stands in for)
        self.stored_chunks: dict[int, int] = {}
        self.stored_len: dict[int, int] = {}  # characters of each part's text the store holds
        self.changed_parts: set[int] = set()
        self.late_end: tuple[type, dict[str, Any]] | None = None  # a big block's end event, see LATE_END_CHARS
        self.thinking = turn.thinking  # what this call sends, once its request is built
        self.sent_estimate: int | None = None  # the estimate of the request as sent (for the calibration)
        # A delta went out: the turn has started, and this reply gives way to starting ones.
        self.relayed_delta = False

    @property
    def started(self) -> bool:
        return self.message is not None

    def _request(self) -> ProviderRequest:
        return call_thinking.for_request(self.turn, self._base_request())

    def _base_request(self) -> ProviderRequest:
        turn = self.turn
        # Folded at the latest compaction (summary + kept messages), every call answered, tool
        # results too big for the window shortened (in this request only).
        messages, shortened = messages_to_send(turn)
        if shortened:
            log.info("turn %s: %d tool result(s) shortened to fit the context window", turn.turn_id, shortened)
        self.sent_estimate = request_estimate(turn.system_prompt, turn.tools, messages)
        return ProviderRequest(
            provider=turn.provider_name,
            model=turn.model_name,
            thinking=turn.thinking,  # replaced by this call's own (call_thinking.for_request)
            messages=for_provider(self._with_media(messages), turn.provider_name),
            system_prompt=turn.system_prompt if turn.output is None else turn.output.system_prompt(turn.system_prompt),
            tools=turn.tools if turn.output is None else turn.output.tools(turn.tools),
            output_cap=turn.max_output_tokens,
            limits=turn.settings.limits,
            output_schema=None if turn.output is None else turn.output.native,
        )

    def _with_media(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """Images with their bytes (or notes), resources as delimited text (``agent.media``)."""
        if self.turn.media is not None:
            return self.turn.media.render(messages)
        return budget.render(messages, budget.MediaPlan(model_id=self.turn.model_id), {})

    async def stream(self) -> tuple[ChatMessage, str]:
        turn = self.turn
        try:
            await self._relay()
        except anyio.get_cancelled_exc_class():
            with turn.finishing():
                await self._finish("interrupted")
                await record_cancelled_results(turn, self.message)
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
        """Stream the provider's events to the client, watched by a ``Watchdog``."""
        turn = self.turn
        request = self._request()
        self.thinking = request.thinking
        # Told before the call it describes, and before the watchdog starts (a slow client is not a silent provider).
        await call_thinking.announce(turn, request.thinking)
        # The response is closed (the stack) once the watch is over.
        async with AsyncExitStack() as stack:
            with turn.watchdogs.watching(turn.settings) as watchdog:
                events = aiter(await stack.enter_async_context(turn.provider.stream(request)))
                marked = False
                while True:
                    if self.relayed_delta and not marked:  # its reads give way to starting turns from now on
                        stack.enter_context(foreground.streaming())
                        marked = True
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
        if watchdog.verdict is not None:
            raise self._aborted(watchdog.verdict)

    def _aborted(self, verdict: Verdict) -> ProviderError:
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
            seq=turn.messages.next_seq(),
            role="assistant",
            parts=[],
            model_id=turn.model_id,
            thinking_requested=turn.thinking.requested,
            thinking_effective=self.thinking.effective,  # what this call sent
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
            assert message is not None  # begun above
            part = message.parts[index]
            if part.type == "tool_call":
                self.raw_args.setdefault(index, []).append(event.delta)
                await emit(
                    ev.ToolCallDelta,
                    {"message_id": message.message_id, "index": index, "call_id": part.call_id, "delta": event.delta},
                )
            else:
                self.text_chunks.setdefault(index, []).append(event.delta)
                self.unsaved_bytes += len(event.delta)
                kind = ev.ThinkingDelta if part.type == "thinking" else ev.TextDelta
                await emit(kind, {"message_id": message.message_id, "index": index, "delta": event.delta})
            if not self.relayed_delta:
                self.relayed_delta = True
                if self.turn.starting is not None:  # the first delta: the turn has started
                    self.turn.starting.release()
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
            bad = has_surrogates(event.name or "") or has_surrogates(event.call_id or "")
        elif isinstance(event, BlockDelta):
            bad = has_surrogates(event.delta)
        else:
            part = event.part
            bad = has_surrogates(part.text)
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
            # Marked unfinished until its end arrives (the adapter's whole part replaces this one): a
            # call cut off mid-arguments, even by a crash, is never sent to a provider again.
            message.parts.append(
                Part(
                    type="tool_call",
                    call_id=call_id,
                    name=event.name,
                    arguments={},
                    provider_data=dict(UNFINISHED_CALL),
                )
            )
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
                # Adapters end only blocks they could have started: thinking, text or a tool call.
                BlockStart(
                    index=event.index,
                    kind=cast(BlockKind, event.part.type),
                    call_id=event.part.call_id,
                    name=event.part.name,
                )
            )
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

    async def _emit(self, kind: type[ev.BaseEvent], fields: dict[str, Any]) -> None:
        if self.late_end is not None:
            await self._emit_late_end()
        await self.turn.emit(kind, fields)

    async def _emit_late_end(self) -> None:
        if self.late_end is not None:
            await self.turn.emit(*self.late_end)
            self.late_end = None

    def snapshot(self) -> ChatMessage | None:
        """A copy of the reply as it stands, its streaming text joined, ``status: "streaming"``
        (``session/resume`` of a session whose turn is streaming)."""
        if self.message is None or self.ended:
            return None
        parts = list(self.message.parts)
        for index, chunks in self.text_chunks.items():
            parts[index] = msgspec.structs.replace(parts[index], text="".join(chunks))
        return msgspec.structs.replace(self.message, parts=parts, status="streaming")

    def _join_streaming_text(self) -> None:
        assert self.message is not None
        for index, chunks in self.text_chunks.items():
            self.message.parts[index].text = "".join(chunks)

    async def _checkpoint(self) -> None:
        self.unsaved_bytes = 0
        try:
            await self._persist(final=False)
        finally:
            # Counted from when the write is done: when the store is slow (many sessions
            # streaming at once) a checkpoint started as soon as the last one ended would
            # make every delta a write, and the store slower still.
            self.last_checkpoint = time.monotonic()

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
            await self.turn.messages.save(message)
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
            await self.turn.messages.append(
                message.message_id, whole, appended, keep_text=frozenset(keep_text), final=message if final else None
            )
        except BaseException:
            # The counts above already include this increment, and the store may or may not
            # hold it: the next save writes the message whole (which drops appended rows).
            self.stored = False
            raise

    async def _finish(self, status: MessageStatus) -> ChatMessage | None:
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
        if status == "complete":  # a whole reply's calls are whole, whether or not the adapter ended each
            for part in message.parts:
                if is_unfinished_call(part):
                    part.provider_data = None
        message.status = status
        self.ended = True
        message.stop_reason = self.stop if status == "complete" else status
        message.usage = self.usage
        self.turn.usage = add_usage(self.turn.usage, self.usage)
        if self.stored:
            try:
                await self._persist(final=True)  # a long reply is not rewritten whole at its end
            except PonderError:
                pass  # the store refused the increment: saved whole below (kept for later if refused again)
            else:
                await self.turn.emit(ev.MessageEnd, {"message": message.to_wire()})
                await self._record_usage(message)
                return message
        try:
            await save_and_end(self.turn, message)
        except PonderError:
            await self._record_usage(message)  # the store refused the reply, but its tokens were spent
            raise
        await self._record_usage(message)
        return message

    async def _record_usage(self, message: ChatMessage) -> None:
        """Into the session's totals, after the message is stored: what the provider reported, or when it
        reported nothing that reads as counts (none, or garbage), ponder's estimate of the request as sent
        and of the reply, said so in the ``usage`` event: a token budget holds either way."""
        turn = self.turn
        usage = self.usage
        reported = usage is not None and (usage.input_tokens is not None or usage.output_tokens is not None)
        if usage is not None and turn.compaction is not None and self.sent_estimate is not None:
            turn.compaction.calibration.observe(self.sent_estimate, usage.input_tokens)
        if reported and usage is not None:
            await turn.account.record(usage, False)
            return
        sent = self.sent_estimate or 0
        if turn.compaction is not None:
            sent = turn.compaction.calibration.scale(sent)
        await turn.account.record(Usage(input_tokens=sent, output_tokens=message_tokens(message)), True)
