"""One turn of the agent: stream the model's reply, run the tools it asks for, repeat.

Data flows one way: normalized provider events → protocol events (to the client) and one
``ChatMessage`` per reply (to the store). Every turn is bracketed by exactly one
``turn_start`` and one ``turn_end``, whatever happens (cancel, provider failure, bug), and
no event of a turn is given up on because the client reads slowly. A reply that fails
before its first event is retried with backoff (``BACKOFF_BASE_S`` doubling up to
``BACKOFF_CAP_S``, or the provider's ``retry-after``), up to ``TurnSettings.max_attempts``.
"""

import json
import logging

from daemon.agent import compaction, level_retry
from daemon.agent.context import CompactionRequest, Turn, error_info, spent_budget, wait_to_retry
from daemon.agent.history import save_and_end
from daemon.agent.reply import Reply
from daemon.agent.structured import ACCEPTED, FINAL_OUTPUT
from daemon.agent.tools import run_tools
from daemon.conversation import ChatMessage, Part
from daemon.errors import (
    BudgetExceeded,
    ContextOverflow,
    InvalidParams,
    PonderError,
    ProviderError,
    SchemaFailed,
    ThinkingLevelRejected,
)
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339
from daemon.util.redact import scrub
from daemon.vendors.overflow import is_context_overflow
from daemon.vendors.structured_output import native_refusal
from protocol import events as ev
from protocol.errors import ErrorCode
from protocol.objects import CompactionTrigger, ErrorInfo, FieldError

log = logging.getLogger("ponder.agent")

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0


async def run_turn(turn: Turn) -> str:
    """Run a turn to its end and return its stop reason. Never raises for a failed turn."""
    # turn_start says when the budget shrank near the window; a later call that sends other
    # thinking is told by a thinking_update (agent.call_thinking).
    turn.reported = compaction.fitted_thinking(turn)
    notes = await _media_notes(turn)
    await turn.emit(
        ev.TurnStart,
        {
            "model_id": turn.model_id,
            "thinking": turn.reported,
            "user_message_id": turn.user_message.message_id if turn.user_message is not None else None,
            "kind": "compaction" if turn.compaction_request is not None else "prompt",
            "continued_from": turn.continued_from,
            "notes": notes,
        },
    )
    stop_reason, error = "error", None
    with turn.cancel_scope:
        try:
            log_decision(turn)
            await turn.toolkit.prepare(turn)
            if turn.compaction_request is not None:
                stop_reason, error = await _compaction_turn(turn, turn.compaction_request)
            else:
                stop_reason = await _tool_loop(turn)
                if stop_reason == "max_tokens":
                    error = cut_off(turn)
        except BudgetExceeded as exc:
            stop_reason, error = "budget", error_info(exc)
        except SchemaFailed as exc:
            stop_reason, error = "schema_failed", error_info(exc)
            error.errors = [FieldError(path=e["path"], message=e["message"]) for e in exc.errors]
        except PonderError as exc:
            error = error_info(exc)
        except Exception as exc:
            log.exception("turn %s failed", turn.turn_id)
            error = ErrorInfo(code=int(ErrorCode.INTERNAL_ERROR), message=f"Internal error: {type(exc).__name__}.")
        if not turn.cancel_scope.cancel_called:
            # stop hooks, inside the turn's brackets and its cancel scope: they only watch
            await turn.toolkit.observe("stop", {"stop_reason": stop_reason})
    if turn.cancel_scope.cancelled_caught:
        stop_reason, error = "cancelled", None
    answer = turn.output.value if turn.output is not None and turn.output.answered else None
    if stop_reason != "end_turn":
        answer = None  # structured_output is null on every turn that did not end with a valid answer
    if turn.starting is not None:  # one that ends without a delta (cancelled, failed) has started too
        turn.starting.release()
    with turn.finishing():
        await turn.emit(
            ev.TurnEnd, {"stop_reason": stop_reason, "usage": turn.usage, "error": error, "structured_output": answer}
        )
    return stop_reason


async def _media_notes(turn: Turn) -> list[str]:
    """What the first request will leave out of the history (images as notes), for ``turn_start``."""
    if turn.media is None or turn.compaction_request is not None:
        return []
    try:
        return (await turn.media.ready(compaction.request_messages(turn))).notes()
    except PonderError:
        return []  # the store failed: the first request's own ``ready`` says so, inside the turn


def log_decision(turn: Turn) -> None:
    """The turn's thinking decision on record: one info line with what was asked, what is sent and why."""
    thinking = turn.thinking
    fragment = json.dumps(thinking.request_params, sort_keys=True, separators=(",", ":"))
    log.info(
        scrub(
            f"turn {turn.turn_id} thinking on {turn.model_id}: requested={thinking.requested} "
            f"effective={thinking.effective} source={thinking.source} fallback={thinking.fallback} "
            f"display={thinking.display} reason={thinking.reason or '-'} request={fragment}"
        )
    )


def cut_off(turn: Turn) -> ErrorInfo:
    """Why a turn ended ``max_tokens``: the reply reached the request's output limit, which its
    thinking counts against too; a reply with no answer at all says so (never an empty success)."""
    last = turn.history[-1] if turn.history else None
    answered = last is not None and last.role == "assistant" and any(p.type == "text" and p.text for p in last.parts)
    level = turn.thinking.effective
    if answered:
        what = "The reply was cut off at the output limit"
    elif level != "off":
        what = f"The output limit was reached while the model was thinking (level {level!r}), before any answer"
    else:
        what = "The output limit was reached before any answer"
    steps = (["ask the model to continue"] if answered else []) + (
        ["lower the thinking level with thinking/set"] if level != "off" else []
    )
    steps.append("ask for a shorter answer")
    return ErrorInfo(code=int(ErrorCode.INVALID_PARAMS), message=f"{what}; {', or '.join(steps)}.")


# A reply that ended so can be followed by the steers that arrived while it streamed: one
# more model call with them. Other endings (refusal, error, cancel) end the turn, and the
# steers start the next one.
_STEERABLE_ENDINGS = ("end_turn", "tool_use", "max_tokens")


async def _tool_loop(turn: Turn) -> str:
    for step in range(turn.settings.max_steps):
        # Checked before every model call: between tool-loop steps too, not only at a prompt.
        spent = await spent_budget(turn, reread=step > 0)
        if spent is not None:
            raise BudgetExceeded(spent)
        # After the tools of the last reply have all finished (and the compaction after them):
        # the steers that arrived meanwhile join, in the provider's shape after the tool results.
        await join_steers(turn)
        reply, stop = await _respond_with_retries(turn)
        calls = [p for p in reply.parts if p.type == "tool_call"]
        if turn.output is not None and stop in ("end_turn", "tool_use"):
            verdict = await _judge_answer(turn, reply, calls)
            if verdict == "answered":
                return "end_turn"
            if verdict == "retry":
                continue  # an invalid answer, sent back (its reply's tools ran): the next model call retries
        if stop != "tool_use" or not calls:
            if stop in _STEERABLE_ENDINGS and await join_steers(turn):
                continue  # the reply called no tool: one more model call carries the steers
            # "tool_use" with no call to run is a finished turn: a turn never ends "tool_use".
            return "end_turn" if stop == "tool_use" else stop
        await run_tools(turn, calls)
        await compaction.maybe_compact(turn, backoff=_backoff)  # after each tool batch, inside this turn's brackets
    return "tool_limit"


async def _judge_answer(turn: Turn, reply: ChatMessage, calls: list[Part]) -> str | None:
    """Judge a reply of a turn that has an output schema: ``answered`` when it gave a valid answer
    (its other tool calls, if any, ran first: the model asked for them); ``retry`` when it gave an
    invalid one, whose errors were sent back (``SchemaFailed`` past the retries); None when it gave
    none yet (ordinary tool calls, which the loop runs)."""
    output = turn.output
    assert output is not None
    finals = [c for c in calls if c.name == FINAL_OUTPUT] if output.tool_mode else []
    if finals:
        errors = output.judge_call(finals[-1])
        # Only the last final_output call of a reply counts; earlier ones are told so.
        answered = {c.call_id or "": ("Superseded by a later final_output call.", True) for c in finals[:-1]}
        answered[finals[-1].call_id or ""] = (ACCEPTED, False) if not errors else (output.feedback(errors), True)
        await run_tools(turn, calls, answered)
        if not errors:
            return "answered"
        output.count_invalid(errors)
        return "retry"
    if calls:
        return None  # ordinary tool calls: the answer comes later
    errors = output.judge_text(reply)
    if not errors:
        return "answered"
    output.count_invalid(errors)
    await _send_back(turn, output.feedback(errors))
    return "retry"


async def _send_back(turn: Turn, text: str) -> None:
    """Tell the model why its answer was not taken: a user message of the turn (``origin: "schema_retry"``)."""
    message = ChatMessage(
        message_id=new_id("msg"),
        session_id=turn.session_id,
        seq=turn.messages.next_seq(),
        role="user",
        parts=[Part(type="text", text=text)],
        status="complete",
        created_at=now_rfc3339(),
        origin="schema_retry",
        turn_id=turn.turn_id,
    )
    turn.history.append(message)
    await turn.emit(ev.MessageStart, {"message_id": message.message_id, "role": "user"})
    await save_and_end(turn, message)


async def join_steers(turn: Turn) -> bool:
    """Store the steers waiting for this turn as user messages in its history (``message_start``
    and ``message_end`` with ``role: user``, in arrival order); True when any joined.

    Shielded once taken: a cancel arriving meanwhile still finds them stored, never half-joined.
    None waiting (before nearly every model call): nothing is taken, so nothing is shielded."""
    if turn.steers is None or not turn.steers.waiting():
        return False
    with turn.finishing():
        messages = await turn.steers.take()
        for message in messages:
            message.seq = turn.messages.next_seq()
            turn.history.append(message)
            await turn.emit(ev.MessageStart, {"message_id": message.message_id, "role": "user"})
            await save_and_end(turn, message)
    return bool(messages)


async def _compaction_turn(turn: Turn, request: CompactionRequest) -> tuple[str, ErrorInfo | None]:
    """A turn that only compacts: ``end_turn`` when it completed or was skipped, else ``error``."""
    if turn.compaction is None:
        raise InvalidParams("This session's model cannot be compacted.")
    spent = await spent_budget(turn)
    if spent is not None:  # a summary is a model call: a spent budget stops it too
        exc = BudgetExceeded(spent)
        await turn.emit(
            ev.CompactionEnd, {"compaction_id": request.compaction_id, "status": "failed", "error": error_info(exc)}
        )
        raise exc
    trigger: CompactionTrigger = "manual" if request.trigger == "manual" else "threshold"
    outcome = await compaction.compact(
        turn,
        trigger,
        compaction_id=request.compaction_id,
        instructions=request.instructions,
        pending=request.pending,
        backoff=_backoff,
    )
    if outcome.status in ("completed", "skipped"):
        return "end_turn", None
    return "error", outcome.error


async def _respond_with_retries(turn: Turn) -> tuple[ChatMessage, str]:
    attempt = 1
    level_refused: str | None = None  # the level a provider refused in this reply, once retried
    overflow_retried = False
    images_refused = False  # a provider refused an image of this request, once retried without it
    while True:
        if turn.media is not None:
            await turn.media.ready(compaction.request_messages(turn))
        reply = turn.in_progress = Reply(turn)
        try:
            return await reply.stream()
        except ThinkingLevelRejected as exc:
            if reply.started:
                raise
            level_retry.learn(turn, exc)
            if level_refused is not None:
                raise level_retry.refused_twice(turn, level_refused, exc) from exc
            retried = level_retry.retry_thinking(turn, exc)
            if retried is None:
                raise
            level_refused = level_retry.refused_level(turn, exc)
            attempt += 1
            message = level_retry.retry_message(turn, level_refused, retried)
            log.info("%s", message)
            turn.thinking = retried
            await _retry_at_once(turn, attempt, message, exc)
        except ProviderError as exc:
            output = turn.output
            if (
                not reply.started
                and output is not None
                and output.native is not None
                and (native_refusal(exc.message, exc.status))
            ):
                output.fall_back()  # this model, for the life of the daemon: the final_output tool
                attempt += 1
                message = (
                    f"{turn.model_id} refused native structured output ({exc.message}); "
                    "retrying with the final_output tool."
                )
                log.info("%s", scrub(message))
                await _retry_at_once(turn, attempt, message, exc)
                continue
            if not reply.started and not images_refused and turn.media is not None:
                refused = await turn.media.rejected(exc, turn.history)
                if refused:
                    images_refused = True  # the request once more, with that image as a note
                    attempt += 1
                    what = "an image" if refused == 1 else f"{refused} images"
                    message = f"The provider refused {what} ({exc.message}); retrying with a note in its place."
                    await _retry_at_once(turn, attempt, message, exc)
                    continue
            if not reply.started and is_context_overflow(exc.message, status=exc.status, kind=exc.kind):
                # The window and the real size the error names: the retry is shortened to them.
                compaction.learn_from_overflow(turn, exc.message, reply.sent_estimate)
                setup = turn.compaction
                if overflow_retried or setup is None or not setup.auto:
                    raise ContextOverflow(exc, compacted=overflow_retried, advice=compaction.advice(turn)) from exc
                overflow_retried = True  # compact (when something can be folded), then retry the request once
                if not setup.discarded:
                    outcome = await compaction.compact(turn, "overflow", backoff=_backoff)
                    if outcome.status in ("failed", "cancelled"):
                        raise ContextOverflow(exc, compacted=False, advice=compaction.advice(turn)) from exc
                # The summary was a model call: the retry is another, and the budget may be spent now.
                spent = await spent_budget(turn)
                if spent is not None:
                    raise BudgetExceeded(spent) from exc
                continue
            if reply.started or not exc.retryable or attempt >= turn.settings.max_attempts:
                raise
            delay = _backoff(attempt, exc.retry_after)
            attempt += 1
            log.info("retrying %s in %.1fs (attempt %d): %s", turn.provider_name, delay, attempt, exc.message)
            await wait_to_retry(turn, attempt, delay, exc)


async def _retry_at_once(turn: Turn, attempt: int, message: str, exc: ProviderError) -> None:
    """The ``retry`` event for a request sent again at once, changed so that the provider takes it
    (another thinking level, an image as a note, the ``final_output`` tool for native structured output):
    ``message`` says what was refused and what changed."""
    error = ErrorInfo(code=int(exc.code), message=message, provider_status=exc.status)
    retry = {"attempt": attempt, "max_attempts": max(attempt, turn.settings.max_attempts), "delay_ms": 0}
    await turn.emit(ev.Retry, {**retry, "error": error})


def _backoff(attempt: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return min(retry_after, BACKOFF_CAP_S * 4)
    base = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
    import random  # only once a call is retried

    return base / 2 + random.uniform(0, base / 2)
