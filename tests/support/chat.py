"""Build stored-shape conversations (``ChatMessage``) for tests of the pure context code."""

from collections.abc import Sequence
from typing import Any

from daemon.conversation import ChatMessage, Part


class Conversation:
    """Messages appended in order, each with the next ``seq`` (1, 2, 3, ...)."""

    def __init__(self, session_id: str = "s1") -> None:
        self.session_id = session_id
        self.messages: list[ChatMessage] = []

    def _add(self, role: Any, parts: list[Part]) -> ChatMessage:
        seq = len(self.messages) + 1
        message = ChatMessage(message_id=f"m{seq}", session_id=self.session_id, seq=seq, role=role, parts=parts)
        self.messages.append(message)
        return message

    def user(self, text: str) -> ChatMessage:
        return self._add("user", [Part(type="text", text=text)])

    def assistant(self, text: str = "", *, thinking: str = "", calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
                  signature: str | None = None) -> ChatMessage:  # fmt: skip
        parts: list[Part] = []
        if thinking:
            parts.append(Part(type="thinking", text=thinking, provider="anthropic", model="m", signature=signature))
        if text:
            parts.append(Part(type="text", text=text))
        for call_id, name, arguments in calls:
            parts.append(Part(type="tool_call", call_id=call_id, name=name, arguments=arguments))
        return self._add("assistant", parts)

    def results(self, *results: tuple[str, str], is_error: bool = False) -> ChatMessage:
        return self._add(
            "tool",
            [Part(type="tool_result", call_id=call_id, text=text, is_error=is_error) for call_id, text in results],
        )
