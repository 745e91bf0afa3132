"""Compaction inside the agent: the history a request sends, when to compact, and one compaction.

The pure rules are ``daemon.context``'s (estimate, window, cut, summary, history); this module
runs them against a ``Turn``: it sends the latest compaction's summary plus the messages from
its ``first_kept_seq`` on (``request_messages``), checks the estimated next request against
``window - reserve`` (``maybe_compact``), and runs one compaction (``compact``): the
``compaction_start``/``compaction_end`` events, the summarizer's call, and the record, stored
in one write only when it shrinks the estimate. Messages are never changed.
"""

import logging
from collections.abc import Callable
from typing import Literal

import anyio
import msgspec

from daemon.agent.context import CompactionSetup, Summarizer, Turn, error_info, wait_to_retry
from daemon.agent.history import repair_history
from daemon.context.budget import add_usage
from daemon.context.cut import choose_cut
from daemon.context.estimate import next_request_estimate, request_estimate
from daemon.context.history import compaction_shrinks, history_for_request
from daemon.context.summary import SummaryRequest, summary_request
from daemon.context.window import effective_keep_recent, fit_thinking_budget, needs_compaction
from daemon.conversation import ChatMessage
from daemon.errors import PonderError, ProviderError
from daemon.models.budgets import ANSWER_ROOM
from daemon.providers.base import BlockEnd, ProviderRequest, UsageUpdate
from daemon.util.clock import new_id
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


def full_estimate(turn: Turn, history: list[ChatMessage] | None = None) -> int:
    """The next request counted from scratch (characters / 4)."""
    return request_estimate(turn.system_prompt, turn.tools, request_messages(turn, history))


def next_estimate(turn: Turn) -> int:
    """The next request: from the provider-reported tokens of the last reply made since the latest
    compaction plus what was appended after it; counted from scratch when there is none."""
    folded_at = latest(turn)
    for index in range(len(turn.history) - 1, -1, -1):
        message = turn.history[index]
        if folded_at is not None and message.seq <= folded_at.seq:
            break
        usage = message.usage
        if message.role == "assistant" and usage is not None and usage.input_tokens:
            return next_request_estimate(usage.input_tokens, usage.output_tokens or 0, turn.history[index + 1 :])
    return full_estimate(turn)


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


def should_compact(turn: Turn) -> bool:
    """Whether ``[compaction] auto`` is on and the estimated next request exceeds ``window - reserve``."""
    setup = turn.compaction
    if setup is None or not setup.auto:
        return False
    if turn.budget_spent is not None and turn.budget_spent() is not None:
        return False  # no summary call on a spent budget: the turn's next model call ends it ``budget``
    return needs_compaction(next_estimate(turn), setup.context_window, setup.reserve_tokens)


async def maybe_compact(turn: Turn, *, backoff: Backoff | None = None) -> CompactionOutcome | None:
    """Compact (trigger ``threshold``) when ``should_compact``; None when it did not."""
    if not should_compact(turn):
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
    tokens_before = next_estimate(turn)
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
    cut = choose_cut(live, effective_keep_recent(setup.context_window, setup.keep_recent_tokens))
    if cut is None:
        return CompactionOutcome("skipped")
    folded = [m for m in live if m.seq < cut.seq]
    summarizer = setup.summarizer
    request = summary_request(
        folded,
        previous_summary=previous.summary if previous is not None else None,
        instructions=instructions,
        context_window=summarizer.context_window,
        max_output_tokens=summarizer.output_room,
    )
    summary, usage = await _summarize(turn, summarizer, request, backoff)
    end["usage"] = usage
    await _account_summary_call(turn, setup, usage)
    if not summary.strip():
        raise ProviderError(
            f"{summarizer.provider_name} returned an empty summary; nothing was compacted.",
            provider=summarizer.provider_name,
        )
    before_messages = turn.history[: len(turn.history) - pending] if pending else turn.history
    candidate = Compaction(
        compaction_id=compaction_id,
        seq=before_messages[-1].seq if before_messages else 0,
        trigger=trigger,
        summary=summary,
        first_kept_seq=cut.seq,
        tokens_before=tokens_before,
        tokens_after=0,
        model_id=summarizer.model_id,
        created_at="",
    )
    measured_before = full_estimate(turn)
    tokens_after = request_estimate(
        turn.system_prompt,
        turn.tools,
        history_for_request(history, candidate, strip_thinking=setup.strip_thinking),
    )
    if not compaction_shrinks(measured_before, tokens_after):
        log.info("compaction %s skipped: %d tokens before, %d after", compaction_id, measured_before, tokens_after)
        return CompactionOutcome("skipped")
    candidate.tokens_after = tokens_after
    with anyio.CancelScope(shield=True):  # stored and in memory, or neither
        stored = await setup.save(candidate, usage)
        setup.records.append(stored)
    end.update(summary=summary, tokens_after=tokens_after)
    return CompactionOutcome("completed")


async def _summarize(
    turn: Turn, summarizer: Summarizer, request: SummaryRequest, backoff: Backoff | None
) -> tuple[str, Usage | None]:
    """The summarizer's answer, retried like a reply (``retry`` events, ``backoff`` between attempts, up to
    ``TurnSettings.max_attempts``) when the provider fails in a way worth retrying. Nothing of a failed
    attempt reached the client, so a failure mid-stream is retried too."""
    attempt = 1
    while True:
        try:
            return await _summarize_once(turn, summarizer, request)
        except ProviderError as exc:
            if backoff is None or not exc.retryable or attempt >= turn.settings.max_attempts:
                raise
            delay = backoff(attempt, exc.retry_after)
            attempt += 1
            log.info("retrying the summary in %.1fs (attempt %d): %s", delay, attempt, exc.message)
            await wait_to_retry(turn, attempt, delay, exc)


async def _summarize_once(turn: Turn, summarizer: Summarizer, request: SummaryRequest) -> tuple[str, Usage | None]:
    """The summarizer's answer (its text parts) and usage; no tools, its own thinking level."""
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
    try:
        with anyio.fail_after(turn.settings.no_progress_timeout_s):
            async with summarizer.provider.stream(provider_request) as events:
                async for event in events:
                    if isinstance(event, BlockEnd) and event.part.type == "text":
                        texts.append(event.part.text)
                    elif isinstance(event, UsageUpdate):
                        usage = event.usage
    except TimeoutError:
        raise ProviderError(
            f"{summarizer.provider_name} did not finish the summary within "
            f"{turn.settings.no_progress_timeout_s:g} s; nothing was compacted.",
            provider=summarizer.provider_name,
        ) from None
    return "".join(texts), usage


async def _account_summary_call(turn: Turn, setup: CompactionSetup, usage: Usage | None) -> None:
    """THE one place a summarizer call's usage is accounted for.

    It counts in the turn's usage (``turn_end.usage``), is reported in ``compaction_end.usage``, and
    reaches the session's totals and budget (and a ``usage`` event) through ``on_summary_usage``.
    """
    if usage is None:
        return
    turn.usage = add_usage(turn.usage, usage)
    if setup.on_summary_usage is not None:
        await setup.on_summary_usage(usage)
