"""Compaction inside the agent: the history a request sends, when to compact, and one compaction.

The pure rules are ``daemon.context``'s (estimate, window, cut, shrink, summary, history); this
module runs them against a ``Turn``: it sends the latest compaction's summary plus the messages
from its ``first_kept_seq`` on (``request_messages``), with tool results too big to fit shortened
in the request (``messages_to_send``); checks the estimated next request against ``window -
reserve`` (``maybe_compact``); and runs one compaction (``compact``): the
``compaction_start``/``compaction_end`` events, the summarizer's call, and the record, stored in
one write only when it shrinks the estimate. Messages are never changed.

A turn can outgrow the window on its own: the cut then falls inside it (between a tool result
and the next model call, ``daemon.context.cut.choose_cut_in_turn``), and the summary carries
the request in progress verbatim. A summary is only asked for when folding can shrink the
request even if the summarizer fills all the room it is given; one that did not shrink it
anyway is thrown away and counted (``CompactionSetup.discarded``): no further automatic
compaction is tried for that prompt, so no prompt pays for more than one discarded summary.

Estimates are corrected by what the provider counts (``CompactionSetup.calibration``, from
every call's reported input tokens and from the numbers an overflow error names), and an
overflow error that names the window teaches it (``learn_from_overflow``).
"""

import logging
import time
from collections.abc import Callable
from typing import Literal

import anyio
import msgspec

from daemon.agent.context import CompactionSetup, Summarizer, Turn, error_info, spent_budget, wait_to_retry
from daemon.agent.history import repair_history
from daemon.context.budget import add_usage
from daemon.context.cut import choose_cut, choose_cut_in_turn
from daemon.context.estimate import messages_tokens, next_request_estimate, request_estimate, text_tokens
from daemon.context.history import compaction_shrinks, history_for_request
from daemon.context.shrink import FLOOR_TOKENS, fit_tool_results, shortened
from daemon.context.summary import SummaryRequest, summary_request
from daemon.context.window import effective_keep_recent, fit_thinking_budget, needs_compaction
from daemon.conversation import ChatMessage
from daemon.errors import PonderError, ProviderError, ThinkingLevelRejected
from daemon.models.budgets import ANSWER_ROOM
from daemon.providers.base import BlockEnd, KeepAlive, ProviderRequest, UsageUpdate
from daemon.util.clock import new_id
from daemon.vendors.overflow import overflow_numbers
from protocol import events as ev
from protocol.objects import Compaction, CompactionTrigger, ErrorInfo, Thinking, Usage

log = logging.getLogger("ponder.agent")

CompactionStatus = Literal["completed", "skipped", "failed", "cancelled"]
Backoff = Callable[[int, float | None], float]  # (attempt, retry_after) -> seconds before the next attempt


class CompactionOutcome(msgspec.Struct, frozen=True):
    status: CompactionStatus
    error: ErrorInfo | None = None


def latest(turn: Turn) -> Compaction | None:
    setup = turn.compaction
    return setup.records[-1] if setup is not None and setup.records else None


def request_messages(turn: Turn, history: list[ChatMessage] | None = None) -> list[ChatMessage]:
    """The history a request sends: every unanswered call answered, then folded at the latest compaction
    (summary + kept messages, without thinking for models that bind it to its prefix)."""
    repaired = repair_history(turn.history if history is None else history)
    setup = turn.compaction
    strip = setup.strip_thinking if setup is not None else False
    return history_for_request(repaired, latest(turn), strip_thinking=strip)


# What a request may take of the window: the rest is the reply's (an eighth of the window, at most
# ANSWER_ROOM). Old tool results shortened to fit keep at most this much each (a 32nd of the window).
OLD_RESULT_CAP_MAX = 2000
# The request in progress, carried verbatim in a summary that folds it, is at most this share of the window.
VERBATIM_REQUEST_SHARE = 16
# The shortest summary worth paying for: folding that cannot leave this much room is skipped unasked.
SUMMARY_FLOOR_TOKENS = 500
IN_PROGRESS_HEADING = "\n\n## The request in progress (verbatim)\n"


def request_limit(context_window: int) -> int:
    """The most tokens a request may take of ``context_window``; the rest is room for the reply."""
    return context_window - min(ANSWER_ROOM, context_window // 8)


def messages_to_send(turn: Turn) -> tuple[list[ChatMessage], int]:
    """``request_messages`` as the provider gets them: tool results too big for the window shortened
    (the store keeps them whole), unless ``[compaction] auto`` is off; and how many were shortened."""
    messages = request_messages(turn)
    setup = turn.compaction
    if setup is None or not setup.auto or not setup.context_window:  # ``auto = false``: sent as they are
        return messages, 0
    window = setup.context_window
    # The limit in the estimate's units: the calibration says how far the provider's counts are from it.
    limit = int(request_limit(window) / setup.calibration.ratio)
    fixed = request_estimate(turn.system_prompt, turn.tools, [])
    old_cap = max(FLOOR_TOKENS, min(OLD_RESULT_CAP_MAX, window // 32))
    return fit_tool_results(messages, fixed_tokens=fixed, limit=limit, old_cap=old_cap)


def full_estimate(turn: Turn, history: list[ChatMessage] | None = None) -> int:
    """The next request counted from scratch, corrected by what the provider counted before."""
    estimate = request_estimate(turn.system_prompt, turn.tools, request_messages(turn, history))
    return _scaled(turn, estimate)


def _scaled(turn: Turn, estimate: int) -> int:
    return turn.compaction.calibration.scale(estimate) if turn.compaction is not None else estimate


def next_estimate(turn: Turn) -> int:
    """The next request: from the provider-reported tokens of the last reply made since the latest
    compaction plus what was appended after it (corrected by the calibration); counted from scratch
    when there is none."""
    folded_at = latest(turn)
    for index in range(len(turn.history) - 1, -1, -1):
        message = turn.history[index]
        if folded_at is not None and message.seq <= folded_at.seq:
            break
        usage = message.usage
        if message.role == "assistant" and usage is not None and usage.input_tokens:
            appended = _scaled(turn, messages_tokens(turn.history[index + 1 :]))
            return next_request_estimate(usage.input_tokens, usage.output_tokens or 0, []) + appended
    return full_estimate(turn)


def learn_from_overflow(turn: Turn, message: str, sent_estimate: int | None) -> None:
    """What an overflow error teaches: the window it names (when smaller than the one assumed, or
    none was known: kept for the model by ``CompactionSetup.learn_window``), and how many tokens
    the request really had (the calibration)."""
    setup = turn.compaction
    if setup is None:
        return
    used, limit = overflow_numbers(message)
    if limit is not None and (setup.context_window is None or limit < setup.context_window):
        setup.context_window = limit
        if setup.learn_window is not None:
            setup.learn_window(limit)
    if used is not None and sent_estimate:
        setup.calibration.observe(sent_estimate, used)


def fitted_thinking(turn: Turn) -> Thinking:
    """The turn's thinking for its next request: a budget-mode model's budget shrinks when the request
    is close to the window, so that budget and answer fit (with the reason in ``Thinking.reason``)."""
    setup, decided = turn.compaction, turn.thinking
    if setup is None or setup.refit_thinking is None or decided.budget_tokens is None or not setup.context_window:
        return decided
    answer = min(ANSWER_ROOM, setup.context_window // 8)
    budget, reason = fit_thinking_budget(
        budget_tokens=decided.budget_tokens,
        budget_min=setup.budget_min,
        answer_tokens=answer,
        request_estimate=next_estimate(turn),
        context_window=setup.context_window,
    )
    if reason is None:
        return decided
    return setup.refit_thinking(decided, budget, budget + answer, reason)


def advice(turn: Turn) -> str | None:
    """What to do about a request that does not fit even after compacting and shortening: which of
    its parts nothing here can shrink take the room (the system prompt and tools, the latest prompt).
    None when automatic compaction is off (then compacting is the advice)."""
    setup = turn.compaction
    if setup is None or not setup.auto:
        return None
    fixed = _scaled(turn, request_estimate(turn.system_prompt, turn.tools, []))
    prompt = next((m for m in reversed(turn.history) if m.role == "user"), None)
    asked = _scaled(turn, messages_tokens([prompt])) if prompt is not None else 0
    window = f"its {setup.context_window:,}-token window" if setup.context_window else "its window"
    return (
        f"What no compaction can shrink takes most of {turn.model_id}'s room ({window}): about {fixed:,} tokens of "
        f"system prompt and tool definitions and {asked:,} of the latest prompt. Send a shorter prompt, switch to a "
        "model with a larger context window (model/set), or start a new session."
    )


async def should_compact(turn: Turn) -> bool:
    """Whether ``[compaction] auto`` is on and the estimated next request exceeds ``window - reserve``
    (and no summary was thrown away for this prompt yet)."""
    setup = turn.compaction
    if setup is None or not setup.auto or setup.discarded:
        return False
    if not needs_compaction(next_estimate(turn), setup.context_window, setup.reserve_tokens):
        return False
    # No summary call on a spent budget: the turn's next model call ends it ``budget``.
    return await spent_budget(turn) is None


async def maybe_compact(turn: Turn, *, backoff: Backoff | None = None) -> CompactionOutcome | None:
    """Compact (trigger ``threshold``) when ``should_compact``; None when it did not."""
    if not await should_compact(turn):
        return None
    return await compact(turn, "threshold", backoff=backoff)


async def compact(
    turn: Turn,
    trigger: CompactionTrigger,
    *,
    compaction_id: str | None = None,
    instructions: str | None = None,
    pending: int = 0,
    backoff: Backoff | None = None,
) -> CompactionOutcome:
    """One compaction, bracketed by ``compaction_start`` and exactly one ``compaction_end``.

    ``pending``: how many messages at the end of the history are the input not yet answered (a
    prompt about to be sent): the record's ``seq`` is the last message before them. ``backoff``
    (attempt, retry_after) -> seconds: the turn's, to retry the summarizer (None: no retry).
    Cancelling reports ``cancelled`` and re-raises.
    """
    setup = turn.compaction
    assert setup is not None
    compaction_id = compaction_id or new_id("cmp")
    # Counted like tokens_after (the request from scratch, characters / 4), so that before and
    # after compare: the trigger's estimate (next_estimate) starts from provider-reported tokens.
    tokens_before = full_estimate(turn)
    # pre_compact hooks: they only watch, and cannot stop it
    await turn.toolkit.observe("pre_compact", {"trigger": trigger, "compaction_id": compaction_id})
    await turn.emit(
        ev.CompactionStart, {"compaction_id": compaction_id, "trigger": trigger, "tokens_before": tokens_before}
    )
    end: dict[str, object] = {"compaction_id": compaction_id, "status": "failed"}
    try:
        outcome = await _run(turn, setup, compaction_id, trigger, tokens_before, instructions, pending, end, backoff)
    except anyio.get_cancelled_exc_class():
        with turn.finishing():
            await turn.emit(ev.CompactionEnd, {**end, "status": "cancelled"})
        raise
    except PonderError as exc:
        error = error_info(exc)
        log.info("compaction %s failed: %s", compaction_id, exc.message)
        await turn.emit(ev.CompactionEnd, {**end, "status": "failed", "error": error})
        return CompactionOutcome("failed", error)
    await turn.emit(ev.CompactionEnd, {**end, "status": outcome.status})
    return outcome


async def _run(
    turn: Turn,
    setup: CompactionSetup,
    compaction_id: str,
    trigger: CompactionTrigger,
    tokens_before: int,
    instructions: str | None,
    pending: int,
    end: dict[str, object],
    backoff: Backoff | None,
) -> CompactionOutcome:
    previous = latest(turn)
    history = repair_history(turn.history)
    live = [m for m in history if previous is None or m.seq >= previous.first_kept_seq]
    keep = effective_keep_recent(setup.context_window, setup.keep_recent_tokens)
    cut = choose_cut(live, keep)
    # No user message to cut at: one turn holds it all. When the next request does not fit (an
    # overflow, or beyond ``window - reserve``), the cut falls inside that turn.
    pressed = trigger == "overflow" or needs_compaction(tokens_before, setup.context_window, setup.reserve_tokens)
    first_kept_seq = cut.seq if cut is not None else choose_cut_in_turn(live, keep) if pressed else None
    folded = [m for m in live if first_kept_seq is not None and m.seq < first_kept_seq]
    if first_kept_seq is None or not folded:
        return CompactionOutcome("skipped")
    summarizer = setup.summarizer
    before_messages = turn.history[: len(turn.history) - pending] if pending else turn.history
    candidate = Compaction(
        compaction_id=compaction_id,
        seq=before_messages[-1].seq if before_messages else 0,
        trigger=trigger,
        summary="",
        first_kept_seq=first_kept_seq,
        tokens_before=tokens_before,
        tokens_after=0,
        model_id=summarizer.model_id,
        created_at="",
    )
    in_progress = _request_in_progress(history, live, first_kept_seq, setup.context_window)
    measured_before = full_estimate(turn)
    # Before paying for a summary: folding must leave room for one of a useful size (a longer one that
    # does not shrink the request after all is thrown away, and counted in ``discarded``).
    room = min(summarizer.output_room, SUMMARY_FLOOR_TOKENS) + text_tokens(in_progress)
    floor = _after(turn, history, candidate, setup) + _scaled(turn, room)
    if not compaction_shrinks(measured_before, floor):
        log.info("compaction %s skipped: %d tokens now, at least %d after", compaction_id, measured_before, floor)
        return CompactionOutcome("skipped")
    request = summary_request(
        folded,
        previous_summary=_without_in_progress(previous.summary) if previous is not None else None,
        instructions=instructions,
        context_window=summarizer.context_window,
        max_output_tokens=summarizer.output_room,
    )
    summary, reported = await _summarize(turn, summarizer, request, backoff)
    usage = await _account_summary_call(turn, setup, reported, request, summary)
    end["usage"] = usage
    if not summary.strip():
        raise ProviderError(
            f"{summarizer.provider_name} returned an empty summary; nothing was compacted.",
            provider=summarizer.provider_name,
        )
    candidate.summary = summary.strip() + in_progress
    tokens_after = _after(turn, history, candidate, setup)
    if not compaction_shrinks(measured_before, tokens_after):
        setup.discarded += 1  # paid for and thrown away: no more automatic compaction for this prompt
        log.info("compaction %s discarded: %d tokens before, %d after", compaction_id, measured_before, tokens_after)
        return CompactionOutcome("skipped")
    candidate.tokens_after = tokens_after
    with anyio.CancelScope(shield=True):  # stored and in memory, or neither
        stored = await setup.save(candidate, usage)
        setup.records.append(stored)
    end.update(summary=candidate.summary, tokens_after=tokens_after)
    return CompactionOutcome("completed")


def _after(turn: Turn, history: list[ChatMessage], candidate: Compaction, setup: CompactionSetup) -> int:
    """The request's estimate once folded at ``candidate`` (with its summary as it stands)."""
    folded = history_for_request(history, candidate, strip_thinking=setup.strip_thinking)
    return _scaled(turn, request_estimate(turn.system_prompt, turn.tools, folded))


def _request_in_progress(
    history: list[ChatMessage], live: list[ChatMessage], first_kept_seq: int, context_window: int | None
) -> str:
    """When the cut falls inside a turn, the user's request that turn is working on, verbatim (within
    a share of the window), for the end of the summary: the model goes on with what was asked, not
    with a paraphrase. Empty when the kept messages start with a user message."""
    kept = [m for m in live if m.seq >= first_kept_seq]
    if kept and kept[0].role == "user":
        return ""
    asked = [m for m in history if m.role == "user" and m.seq < first_kept_seq]
    if not asked:
        return ""
    text = "\n".join(part.text for part in asked[-1].parts if part.type == "text" and part.text).strip()
    if not text:
        return ""
    room = max(FLOOR_TOKENS, (context_window or 0) // VERBATIM_REQUEST_SHARE) if context_window else 2000
    return IN_PROGRESS_HEADING + shortened(text, room)


def _without_in_progress(summary: str) -> str:
    """A summary without the verbatim request a mid-turn compaction added (the next one adds it anew)."""
    return summary.split(IN_PROGRESS_HEADING, 1)[0]


async def _summarize(
    turn: Turn, summarizer: Summarizer, request: SummaryRequest, backoff: Backoff | None
) -> tuple[str, Usage | None]:
    """The summarizer's answer, retried like a reply (``retry`` events, ``backoff`` between attempts, up to
    ``TurnSettings.max_attempts``) when the provider fails in a way worth retrying. Nothing of a failed
    attempt reached the client, so a failure mid-stream is retried too. A thinking level the provider
    refuses is learned for the summarizer's model (as for a reply) and the summary asked for once more
    at the level it now decides."""
    attempt = 1
    level_retried = False
    while True:
        try:
            return await _summarize_once(turn, summarizer, request)
        except ThinkingLevelRejected as exc:
            refused = exc.rejected or summarizer.thinking.effective
            turn.levels.learn(summarizer.model_id, allowed=exc.allowed, refused=refused)
            if level_retried or summarizer.rethink is None:
                raise
            retried = summarizer.rethink()
            if retried.effective == summarizer.thinking.effective:
                raise
            level_retried = True
            log.info("the summarizer refused %r; retrying with %r", refused, retried.effective)
            summarizer.thinking = retried
        except ProviderError as exc:
            if backoff is None or not exc.retryable or attempt >= turn.settings.max_attempts:
                raise
            delay = backoff(attempt, exc.retry_after)
            attempt += 1
            log.info("retrying the summary in %.1fs (attempt %d): %s", delay, attempt, exc.message)
            await wait_to_retry(turn, attempt, delay, exc)


async def _summarize_once(turn: Turn, summarizer: Summarizer, request: SummaryRequest) -> tuple[str, Usage | None]:
    """The summarizer's answer (its text parts) and usage; no tools, its own thinking level. Watched like
    a reply: silence for ``stall_timeout_s`` (or only keep-alives for ``no_progress_timeout_s``) aborts it."""
    provider_request = ProviderRequest(
        provider=summarizer.provider_name,
        model=summarizer.model_name,
        thinking=summarizer.thinking,
        messages=request.messages,
        system_prompt=request.system_prompt,
        max_output_tokens=summarizer.output_room,
        limits=turn.settings.limits,
    )
    texts: list[str] = []
    usage: Usage | None = None
    with turn.watchdogs.watching(turn.settings) as watchdog:
        async with summarizer.provider.stream(provider_request) as events:
            async for event in events:
                watchdog.last_life = time.monotonic()
                if isinstance(event, KeepAlive):
                    continue
                watchdog.last_progress = watchdog.last_life
                if isinstance(event, BlockEnd) and event.part.type == "text":
                    texts.append(event.part.text)
                elif isinstance(event, UsageUpdate):
                    usage = event.usage
    if watchdog.verdict is not None:
        seconds = turn.settings.stall_timeout_s if watchdog.verdict == "stall" else turn.settings.no_progress_timeout_s
        what = "nothing" if watchdog.verdict == "stall" else "only keep-alives"
        raise ProviderError(
            f"{summarizer.provider_name} sent {what} for {seconds:g} s while writing the summary; "
            "nothing was compacted.",
            provider=summarizer.provider_name,
            retryable=True,
            kind=watchdog.verdict,
        )
    return "".join(texts), usage


async def _account_summary_call(turn: Turn, setup: CompactionSetup, usage: Usage | None, request: SummaryRequest,
                                summary: str) -> Usage:  # fmt: skip
    """THE one place a summarizer call's usage is accounted for; the usage counted (ponder's estimate of the
    request and the summary when the provider reported none that reads as counts).

    It counts in the turn's usage (``turn_end.usage``), is reported in ``compaction_end.usage``, and
    reaches the session's totals and budget (and a ``usage`` event) through ``on_summary_usage``.
    """
    estimated = usage is None or (usage.input_tokens is None and usage.output_tokens is None)
    if estimated:
        usage = Usage(input_tokens=_scaled(turn, request.estimate), output_tokens=text_tokens(summary))
    assert usage is not None
    turn.usage = add_usage(turn.usage, usage)
    if setup.on_summary_usage is not None:
        await setup.on_summary_usage(usage, estimated)
    return usage
