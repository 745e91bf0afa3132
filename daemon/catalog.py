"""The model catalogue (STUB, to be completed by the thinking-levels work).

``ModelSpec`` is what the rest of the daemon knows about a model.
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str  # provider-side model name
    name: str
    api: str  # anthropic | openai-chat | openai-responses | gemini | ollama | mock
    context_window: int | None = None
    max_output_tokens: int | None = None
    supports_tools: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.model}"
