"""The turn's messages as the store and the providers see them.

Saving a finished message and closing its ``message_start``/``message_end`` bracket,
"cancelled" results for tool calls a turn could not finish, and ``repair_history``, which
gives every unanswered call of the history a synthetic result before a provider sees it.
"""

import msgspec

from daemon.agent.context import Turn
from daemon.conversation import ChatMessage, Part
from daemon.errors import PonderError
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339
from protocol import events as ev

CANCELLED_RESULT = "Cancelled: the turn was cancelled before this tool call finished."
# ``provider_data`` of a tool call whose arguments were still streaming when its reply stopped
# (a cancel, an error, a crash): it is kept in the store but never sent to a provider.
UNFINISHED_CALL: dict[str, object] = {"unfinished_arguments": True}


async def save_and_end(turn: Turn, message: ChatMessage) -> None:
    """Save a finished message and close its bracket with ``message_end``.

    When the store refuses it, the bracket still closes (the message is what will be saved
    once the store takes it) and the error then ends the turn with one ``turn_end``.
    """
    try:
        await turn.messages.save(message)
    except PonderError:
        await turn.emit(ev.MessageEnd, {"message": message.to_wire()})
        raise
    await turn.emit(ev.MessageEnd, {"message": message.to_wire()})


def with_cancelled(calls: list[Part], results: list[Part | None]) -> list[Part]:
    """The results of ``calls`` in order: each one's own, or a "cancelled" error where it has none."""
    return [
        r
        if r is not None
        else Part(type="tool_result", call_id=c.call_id, name=c.name, text=CANCELLED_RESULT, is_error=True)
        for c, r in zip(calls, results, strict=True)
    ]


async def record_cancelled_results(turn: Turn, reply: ChatMessage | None) -> None:
    """A reply cut off after asking for tools gets "cancelled" results, so history stays valid."""
    if reply is None:
        return
    calls = [p for p in reply.parts if p.type == "tool_call"]
    if not calls:
        return
    message = ChatMessage(
        message_id=new_id("msg"),
        session_id=turn.session_id,
        seq=turn.messages.next_seq(),
        role="tool",
        parts=with_cancelled(calls, [None] * len(calls)),
        status="interrupted",
        created_at=now_rfc3339(),
    )
    turn.history.append(message)
    await turn.messages.save(message)


def is_unfinished_call(part: Part) -> bool:
    return part.type == "tool_call" and bool((part.provider_data or {}).get("unfinished_arguments"))


def without_unfinished_calls(history: list[ChatMessage]) -> list[ChatMessage]:
    """The history without tool calls whose arguments never finished streaming, nor their
    results (a provider would take half-written arguments as what the model meant); a message
    left empty goes too."""
    unfinished = {p.call_id for m in history if m.role == "assistant" for p in m.parts if is_unfinished_call(p)}
    if not unfinished:
        return history
    kept: list[ChatMessage] = []
    for message in history:
        if message.role in ("assistant", "tool"):
            parts = [
                p for p in message.parts if not (p.type in ("tool_call", "tool_result") and p.call_id in unfinished)
            ]
            if len(parts) != len(message.parts):
                if not parts:
                    continue
                message = msgspec.structs.replace(message, parts=parts)
        kept.append(message)
    return kept


def repair_history(history: list[ChatMessage]) -> list[ChatMessage]:
    """The history as providers must see it: every tool call answered by a result, and no call
    whose arguments never finished (``without_unfinished_calls``).

    A crash between a reply that asked for tools and its tool message leaves calls without
    results; each gets a synthetic "cancelled" result (in memory only; the store keeps
    what really happened).
    """
    history = without_unfinished_calls(history)
    answered = {p.call_id for m in history if m.role == "tool" for p in m.parts if p.type == "tool_result"}
    calls = [p for m in history if m.role == "assistant" for p in m.parts if p.type == "tool_call"]
    if all(p.call_id in answered for p in calls):
        return history
    repaired: list[ChatMessage] = []
    pending: list[Part] = []
    for message in history:
        if pending and message.role == "tool":
            message = msgspec.structs.replace(
                message, parts=[*message.parts, *with_cancelled(pending, [None] * len(pending))]
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
        parts=with_cancelled(calls, [None] * len(calls)),
        status="interrupted",
    )
