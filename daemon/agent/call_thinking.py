"""The thinking one model call really sends, computed once per request, and telling the client
when it differs from what the turn last reported (PROTOCOL.md "Thinking controls").

Three things can make a call's thinking differ from the turn's decision, and all of them are
applied here, in this order, once for each request:

1. a refused level retried at the nearest one the provider takes (``level_retry`` replaces
   ``Turn.thinking`` before the next attempt);
2. a budget-mode model's budget shrunk so that budget and answer fit near the window
   (``compaction.fitted_thinking``);
3. the adapter's own rules for this history (``Provider.adjust_thinking``: Anthropic's budget
   mode goes without thinking for a tool-loop step whose assistant message has no signed
   thinking block).

Adapters send ``ProviderRequest.thinking`` as given; they never adjust it again. Before the
call, a ``thinking_update`` goes to the client when the result differs (level, budget or the
fragment sent) from the last thinking the turn reported (``turn_start``'s, or the last update).
Summary requests never come here: they send the summarizer's own thinking.
"""

import msgspec

from daemon.agent.compaction import fitted_thinking
from daemon.agent.context import Turn
from daemon.providers.base import ProviderRequest
from protocol import events as ev
from protocol.objects import Thinking

__all__ = ["announce", "for_request", "same_thinking"]


def for_request(turn: Turn, request: ProviderRequest) -> ProviderRequest:
    """``request`` (built with any thinking) with the thinking this call sends."""
    fitted = msgspec.structs.replace(request, thinking=fitted_thinking(turn))
    adjusted = turn.provider.adjust_thinking(fitted)
    return fitted if adjusted is None else msgspec.structs.replace(fitted, thinking=adjusted)


def same_thinking(a: Thinking, b: Thinking) -> bool:
    """Whether two calls send the same thinking (level, budget and fragment; the wording of ``reason`` aside)."""
    return a.effective == b.effective and a.budget_tokens == b.budget_tokens and a.request_params == b.request_params


async def announce(turn: Turn, thinking: Thinking) -> None:
    """A ``thinking_update`` when ``thinking`` differs from what the turn last reported."""
    if turn.reported is not None and same_thinking(turn.reported, thinking):
        return
    turn.reported = thinking
    await turn.emit(ev.ThinkingUpdate, {"thinking": thinking})
