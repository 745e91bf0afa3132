"""The tool calls of one reply: approval, concurrent execution, and the one tool message
that records their results (with "cancelled" results for those a cancel cut short).
"""

import anyio
import msgspec

from daemon.agent.context import Turn
from daemon.agent.history import save_and_end, with_cancelled
from daemon.conversation import ChatMessage, Part
from daemon.providers.base import arguments_problem, invalid_arguments
from daemon.util.clock import new_id
from daemon.util.clock import now as now_rfc3339
from protocol import events as ev


async def run_tools(turn: Turn, calls: list[Part], answered: dict[str, tuple[str, bool]] | None = None) -> None:
    """Run the calls of one reply (approved ones concurrently) and record one tool message.

    ``answered`` (call id -> (text, is_error)): calls the agent answers itself (``final_output``),
    which nobody approves or runs and which have no ``tool_execution_*`` events: their result is
    only recorded, in order, in the same tool message."""
    answered = answered or {}
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
    images: dict[int, list[Part]] = {}  # the image parts a call's tool returned, after its result
    await turn.emit(ev.MessageStart, {"message_id": message.message_id, "role": "tool"})
    try:
        approved: list[tuple[int, ev.Permission | None]] = []
        for i, call in enumerate(calls):
            if call.call_id in answered:
                text, is_error = answered[call.call_id]
                results[i] = Part(
                    type="tool_result", call_id=call.call_id, name=call.name, text=text, is_error=is_error
                )
                continue
            raw = invalid_arguments(call)
            if raw is not None:  # nothing to approve or run: the model hears why and may try again
                await _emit_start(turn, call, None)
                results[i] = await _finish_call(turn, message, call, arguments_problem(raw), True)
                continue
            approval = await turn.approve(call)
            if approval.allowed:
                approved.append((i, approval.permission))
            else:
                await _emit_start(turn, call, approval.permission)
                results[i] = await _finish_call(turn, message, call, approval.message, True)
        async with anyio.create_task_group() as tg:
            for i, permission in approved:
                tg.start_soon(_execute, turn, message, calls[i], permission, results, images, i)
    except anyio.get_cancelled_exc_class():
        with turn.finishing():
            message.parts = with_cancelled(calls, results)
            message.status = "interrupted"
            await save_and_end(turn, message)
        raise
    message.parts = [p for i, r in enumerate(results) if r is not None for p in (r, *images.get(i, []))]
    await save_and_end(turn, message)


async def _emit_start(turn: Turn, call: Part, permission: ev.Permission | None) -> None:
    await turn.emit(
        ev.ToolExecutionStart,
        {"call_id": call.call_id, "name": call.name, "arguments": call.arguments or {}, "permission": permission},
    )


async def _execute(
    turn: Turn,
    message: ChatMessage,
    call: Part,
    permission: ev.Permission | None,
    results: list[Part | None],
    images: dict[int, list[Part]],
    i: int,
) -> None:
    await _emit_start(turn, call, permission)

    async def output(chunk: str) -> None:
        await turn.emit(ev.ToolExecutionOutput, {"call_id": call.call_id, "chunk": chunk})

    outcome = await turn.run_tool(call, output)
    if outcome.images:  # images a tool returned go to the model with its result (a note if it takes none)
        images[i] = [msgspec.structs.replace(p, call_id=call.call_id) for p in outcome.images]
    results[i] = await _finish_call(turn, message, call, outcome.text, outcome.is_error, outcome.sandbox)


async def _finish_call(
    turn: Turn, message: ChatMessage, call: Part, text: str, is_error: bool, sandbox: ev.ToolSandbox | None = None
) -> Part:
    fields: dict[str, object] = {
        "call_id": call.call_id,
        "name": call.name,
        "is_error": is_error,
        "result": text,
        "message_id": message.message_id,
    }
    if sandbox is not None:
        fields["sandbox"] = sandbox
    await turn.emit(ev.ToolExecutionEnd, fields)
    return Part(type="tool_result", call_id=call.call_id, name=call.name, text=text, is_error=is_error)
