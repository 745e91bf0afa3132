"""A stored history as the ``session/update`` notifications ``session/load`` replays.

User messages become ``user_message_chunk``; an assistant message's blocks become, in
order, ``agent_thought_chunk`` (the thinking's original text, whole), ``agent_message_chunk``
and ``tool_call`` with the call's final status and result. Each block keeps the
``messageId`` it had when it was streamed live. Tool results are folded into the calls
they answer, paired within their turn (a prompt and what answered it); a call without
any result (the daemon stopped mid-turn) is ``failed``. ``update_plan`` calls are left out: the
session's latest plan follows the history as one ``plan`` update (``daemon.acp.server``).
"""

import base64
from typing import Any

from daemon.acp import toolcalls
from daemon.acp import types as t
from daemon.acp.plans import PLAN_TOOL
from daemon.agent import CANCELLED_RESULT
from daemon.conversation import ChatMessage, Part
from daemon.tools import Tool


def replay_updates(
    history: list[ChatMessage], tools: dict[str, Tool[Any]], cwd: str, images: dict[str, bytes] | None = None
) -> list[t.SessionUpdate]:
    """``images``: the stored bytes of the user messages' images, by attachment id."""
    updates: list[t.SessionUpdate] = []
    shown: set[str] = set()  # tool call ids replayed so far
    for turn in _turns(history):
        results = _results(turn)
        for message in turn:
            if message.role == "user":
                message_id = toolcalls.user_message_id(message.message_id)
                for block in user_blocks(message, images or {}):
                    updates.append(t.UserMessageChunk(content=block, message_id=message_id))
            elif message.role == "assistant":
                for index, part in enumerate(message.parts):
                    updates.extend(_part_updates(message, index, part, results, tools, cwd, shown))
    return updates


def user_blocks(message: ChatMessage, images: dict[str, bytes]) -> list[t.UserBlock]:
    """A user message's blocks as ACP content, in order: adjacent text joined, images with their bytes."""
    blocks: list[t.UserBlock] = []
    text: list[str] = []
    for part in message.parts:
        if part.type == "text":
            text.append(part.text)
            continue
        if "".join(text):
            blocks.append(t.TextContent(text="".join(text)))
        text = []
        if part.type == "image":
            data = images.get(part.attachment_id or "")
            if data is None:
                blocks.append(t.TextContent(text=f"[image: {part.name or part.attachment_id} ({part.mime_type})]"))
            else:
                encoded = base64.b64encode(data).decode("ascii")
                blocks.append(t.ImageOut(data=encoded, mime_type=part.mime_type or "image/png"))
        elif part.type == "resource":
            resource = t.TextResourceOut(uri=part.uri or "", text=part.text, mime_type=part.mime_type)
            blocks.append(t.EmbeddedResourceOut(resource=resource))
        elif part.type == "resource_link":
            blocks.append(t.ResourceLinkOut(uri=part.uri or "", name=part.name or "", mime_type=part.mime_type))
    if "".join(text):
        blocks.append(t.TextContent(text="".join(text)))
    return blocks


def _turns(history: list[ChatMessage]) -> list[list[ChatMessage]]:
    """The history cut before each user message: one prompt and what answered it."""
    turns: list[list[ChatMessage]] = [[]]
    for message in history:
        if message.role == "user" and turns[-1]:
            turns.append([])
        turns[-1].append(message)
    return turns


def _results(turn: list[ChatMessage]) -> dict[str, list[Part]]:
    """The turn's tool results by the id of the call they answer, in the order they came."""
    results: dict[str, list[Part]] = {}
    for message in turn:
        if message.role == "tool":
            for part in message.parts:
                if part.type == "tool_result" and part.call_id:
                    results.setdefault(part.call_id, []).append(part)
    return results


def _part_updates(
    message: ChatMessage,
    index: int,
    part: Part,
    results: dict[str, list[Part]],
    tools: dict[str, Tool[Any]],
    cwd: str,
    shown: set[str],
) -> list[t.SessionUpdate]:
    if part.type in ("thinking", "text"):
        if not part.text:
            return []  # redacted thinking: nothing was streamed either
        content = t.TextContent(text=part.text)
        message_id = toolcalls.block_message_id(message.message_id, index)
        if part.type == "thinking":
            return [t.AgentThoughtChunk(content=content, message_id=message_id)]
        return [t.AgentMessageChunk(content=content, message_id=message_id)]
    if part.type != "tool_call" or not part.call_id or part.name == PLAN_TOOL:
        return []  # an update_plan call is shown as the plan (sent after the history), not as a card
    pending = results.get(part.call_id)
    result = pending.pop(0) if pending else None
    # Histories stored before ids were made unique may repeat one: each call still gets its own card.
    call_id, n = part.call_id, 1
    while call_id in shown:
        n += 1
        call_id = f"{part.call_id}-{n}"
    shown.add(call_id)
    call = toolcalls.tool_call(tools, call_id, part.name or "", part.arguments or {}, cwd, "failed")
    if result is None:
        call.content = toolcalls.text_content(CANCELLED_RESULT)
    else:
        call.status = "failed" if result.is_error else "completed"
        call.content = toolcalls.text_content(result.text)
    return [call]
