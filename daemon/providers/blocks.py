"""Assembling streamed thinking and text into numbered blocks, for adapters whose wire format
has no block boundaries of its own (Gemini parts, Ollama chunks): a change of kind closes
the open block and opens the next."""

from daemon.conversation import Part
from daemon.providers.base import BlockDelta, BlockEnd, BlockKind, BlockStart, ProviderEvent


class TextBlocks:
    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.next_index = 0
        self.open_index: int | None = None
        self.open_kind: BlockKind | None = None
        self.open_text: list[str] = []

    def take_index(self) -> int:
        """The index of the next block (also for tool calls, which the adapter builds itself)."""
        index, self.next_index = self.next_index, self.next_index + 1
        return index

    def open(self, kind: BlockKind) -> list[ProviderEvent]:
        self.open_index, self.open_kind, self.open_text = self.take_index(), kind, []
        return [BlockStart(index=self.open_index, kind=kind)]

    def append(self, kind: BlockKind, text: str) -> list[ProviderEvent]:
        events = [*self.close(), *self.open(kind)] if self.open_kind != kind else []
        assert self.open_index is not None
        self.open_text.append(text)
        events.append(BlockDelta(index=self.open_index, delta=text))
        return events

    def close(self, signature: str | None = None) -> list[ProviderEvent]:
        if self.open_index is None or self.open_kind is None:
            return []
        part = Part(
            type=self.open_kind, text="".join(self.open_text), provider=self.provider, model=self.model, signature=signature
        )
        event = BlockEnd(index=self.open_index, part=part)
        self.open_index, self.open_kind, self.open_text = None, None, []
        return [event]
