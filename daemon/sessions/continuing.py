"""What ``session/continue`` adds to a session's stored tail so the last prompt turn can go on
without a new prompt (PROTOCOL.md "Steering, the queue and continuing"), pure: no I/O.

- tool calls of the last reply without a result get an honest "interrupted" result (the call
  may have run: a crash, a cancel or a kill can come at any point of it);
- trailing tool results, or a user message nobody answered, are sent as they are;
- a reply without tool calls that was cut off (``interrupted``, ``error``, ``max_tokens``) is
  followed by a user message with ``origin: "continue"``;
- anything else (a complete reply, no history) has nothing to continue.

Partial thinking without its signature and unfinished tool-call arguments stay in the store
but are not sent: the adapters send only signed thinking, and ``agent.history`` leaves
unfinished calls out of every request.
"""

import msgspec

from daemon.agent.history import is_unfinished_call
from daemon.conversation import ChatMessage, Part
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339

INTERRUPTED_RESULT = (
    "Interrupted before it finished; it may have run fully, partly or not at all: check before relying on it."
)
CONTINUE_TEXT = "Continue from where you stopped."


class ContinuePlan(msgspec.Struct):
    continued_from: str | None  # the turn that wrote the tail (null for messages stored before ponder kept it)
    new_messages: list[ChatMessage]  # to store at the end of the history, in order (seqs not set yet)
    user_message: ChatMessage | None  # the ``continue`` message, when one is added


def plan_continue(history: list[ChatMessage], session_id: str) -> ContinuePlan | None:
    """What continuing the tail of ``history`` takes; None when there is nothing to continue."""
    if not history:
        return None
    last = history[-1]
    if last.role in ("user", "tool"):
        missing = _unanswered_calls(history)
        return ContinuePlan(last.turn_id, [_results(session_id, missing)] if missing else [], None)
    calls = [p for p in last.parts if p.type == "tool_call" and not is_unfinished_call(p)]
    if calls:
        return ContinuePlan(last.turn_id, [_results(session_id, calls)], None)
    if last.status in ("interrupted", "error") or last.stop_reason == "max_tokens":
        message = ChatMessage(
            message_id=new_id("msg"),
            session_id=session_id,
            seq=0,
            role="user",
            parts=[Part(type="text", text=CONTINUE_TEXT)],
            status="complete",
            created_at=now_rfc3339(),
            origin="continue",
        )
        return ContinuePlan(last.turn_id, [message], message)
    return None


def _unanswered_calls(history: list[ChatMessage]) -> list[Part]:
    """The finished calls of the last reply that asked for tools, when the messages after it
    hold no result for them (a tool message written only in part)."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.role == "user":
            return []
        if message.role == "assistant":
            answered = {p.call_id for m in history[index + 1 :] for p in m.parts if p.type == "tool_result"}
            return [
                p
                for p in message.parts
                if p.type == "tool_call" and not is_unfinished_call(p) and p.call_id not in answered
            ]
    return []


def _results(session_id: str, calls: list[Part]) -> ChatMessage:
    return ChatMessage(
        message_id=new_id("msg"),
        session_id=session_id,
        seq=0,
        role="tool",
        parts=[
            Part(type="tool_result", call_id=c.call_id, name=c.name, text=INTERRUPTED_RESULT, is_error=True)
            for c in calls
        ],
        status="complete",
        created_at=now_rfc3339(),
    )
