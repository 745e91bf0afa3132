"""Tool-call ids that are unique within a session, whatever the provider sends.

Clients key a tool call's card by its id (ACP: a second ``tool_call`` with a known id
updates the old card) and results are paired with calls by id, so every call a session
shows must have its own. A provider that repeats an id it already used in the session,
or sends none, has a bug that ponder survives: the call gets a fresh id on the wire and
in the store, and the provider's own id is kept in the part's ``provider_data`` under
``PROVIDER_CALL_ID``. ``for_provider`` puts that id back (on the call and on its result)
in the messages of a request to the same provider, so it sees the conversation it
produced; other providers get the unique ids.
"""

import msgspec

from daemon.conversation import ChatMessage, Part
from daemon.util.clock import new_id

__all__ = ["PROVIDER_CALL_ID", "ReplyCallIds", "for_provider"]

PROVIDER_CALL_ID = "provider_call_id"


class ReplyCallIds:
    """The ids of the calls in one streamed reply, decided as each call starts."""

    def __init__(self, history: list[ChatMessage]) -> None:
        self._history = history
        self._used: set[str] | None = None  # every call id of the session; read at the first call
        self._by_block: dict[int, str] = {}  # provider block index -> the call's id

    def start(self, block: int, provider_id: str | None) -> str:
        """The id the call starting at provider block ``block`` goes by."""
        if self._used is None:
            self._used = {p.call_id for m in self._history for p in m.parts if p.type == "tool_call" and p.call_id}
        call_id = provider_id if provider_id and provider_id not in self._used else new_id("call")
        self._used.add(call_id)
        self._by_block[block] = call_id
        return call_id

    def finish(self, block: int, part: Part) -> Part:
        """The finished call ``part`` under the id it started with, the provider's own id kept."""
        call_id = self._by_block.get(block)
        if call_id is None or part.call_id == call_id:
            return part
        data = dict(part.provider_data or {})
        if part.call_id:
            data[PROVIDER_CALL_ID] = part.call_id
        return msgspec.structs.replace(part, call_id=call_id, provider_data=data or None)


def for_provider(messages: list[ChatMessage], provider: str) -> list[ChatMessage]:
    """``messages`` with the ids ``provider`` gave its own calls (and their results) restored."""
    own: dict[str, str] = {}
    for message in messages:
        if message.role != "assistant" or (message.model_id or "").split("/", 1)[0] != provider:
            continue
        for part in message.parts:
            provider_id = (part.provider_data or {}).get(PROVIDER_CALL_ID)
            if part.type == "tool_call" and part.call_id and isinstance(provider_id, str):
                own[part.call_id] = provider_id
    if not own:
        return messages
    restored: list[ChatMessage] = []
    for message in messages:
        if any(p.call_id in own for p in message.parts):
            parts = [
                msgspec.structs.replace(p, call_id=own[p.call_id]) if p.call_id and p.call_id in own else p
                for p in message.parts
            ]
            message = msgspec.structs.replace(message, parts=parts)
        restored.append(message)
    return restored
