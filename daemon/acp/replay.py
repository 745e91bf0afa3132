"""A stored history as the ``session/update`` notifications ``session/load`` replays.

User messages become ``user_message_chunk``; an assistant message's blocks become, in
order, ``agent_thought_chunk`` (the thinking's original text, whole), ``agent_message_chunk``
and ``tool_call`` with the call's final status and result. Each block keeps the
``messageId`` it had when it was streamed live. Tool messages are folded into the calls
they answer; a call without any result (the daemon stopped mid-turn) is ``failed``.
"""

from typing import Any

from daemon.acp import toolcalls
from daemon.acp import types as t
from daemon.agent import CANCELLED_RESULT
from daemon.conversation import ChatMessage, Part
from daemon.tools import Tool


def replay_updates(history: list[ChatMessage], tools: dict[str, Tool[Any]], cwd: str) -> list[t.SessionUpdate]:
    results: dict[str, Part] = {
        part.call_id: part
        for message in history
        if message.role == "tool"
        for part in message.parts
        if part.type == "tool_result" and part.call_id
    }
    updates: list[t.SessionUpdate] = []
    for message in history:
        if message.role == "user":
            text = "".join(part.text for part in message.parts if part.type == "text")
            if text:
                updates.append(
                    t.UserMessageChunk(
                        content=t.TextContent(text=text), message_id=toolcalls.user_message_id(message.message_id)
                    )
                )
        elif message.role == "assistant":
            for index, part in enumerate(message.parts):
                updates.extend(_part_updates(message, index, part, results, tools, cwd))
    return updates


def _part_updates(
    message: ChatMessage, index: int, part: Part, results: dict[str, Part], tools: dict[str, Tool[Any]], cwd: str
) -> list[t.SessionUpdate]:
    if part.type in ("thinking", "text"):
        if not part.text:
            return []  # redacted thinking: nothing was streamed either
        content = t.TextContent(text=part.text)
        message_id = toolcalls.block_message_id(message.message_id, index)
        if part.type == "thinking":
            return [t.AgentThoughtChunk(content=content, message_id=message_id)]
        return [t.AgentMessageChunk(content=content, message_id=message_id)]
    if part.type != "tool_call" or not part.call_id:
        return []
    result = results.get(part.call_id)
    call = toolcalls.tool_call(tools, part.call_id, part.name or "", part.arguments or {}, cwd, "failed")
    if result is None:
        call.content = toolcalls.text_content(CANCELLED_RESULT)
    else:
        call.status = "failed" if result.is_error else "completed"
        call.content = toolcalls.text_content(result.text)
    return [call]
