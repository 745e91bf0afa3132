"""Assembling a streamed reply into numbered blocks: ``BlockAssembler``, shared by the adapters
whose wire format has no block boundaries of its own (Gemini parts, Ollama chunks, Chat
Completions deltas).

It numbers every block, text, thinking and tool calls alike. Thinking and text arrive as
runs: a change of kind closes the open block and opens the next, so clients see one block
per contiguous run of one kind, however the provider cut it into parts. Tool calls are
blocks of their own: whole (``call``) or streamed (``start`` / ``delta`` / ``end``), and
starting one closes the open run. Adapters of wire formats that do say where blocks begin
and end (Responses items) use ``start`` / ``delta`` / ``catch_up`` / ``end`` for all of them.

Where the parts themselves must go back as they came (Gemini's thought signatures
ride on particular parts), the block remembers how it was cut: a signature ends the piece
it rides on, and an *empty* signed part is a piece of its own, kept without opening a
block for it. A block cut into one piece keeps its signature in ``Part.signature``; one
cut into several keeps them in ``provider_data["parts"]``, a list of pieces
``{"chars": n, "signature"?: s, "type"?: kind}`` in order (``chars`` counts characters of
the block text; ``type`` only where a piece's kind differs from its block's).
"""

import logging
from typing import Any

from daemon.conversation import Part
from daemon.providers.base import BlockDelta, BlockEnd, BlockKind, BlockStart, ProviderEvent

log = logging.getLogger("ponder.providers.blocks")


class BlockAssembler:
    """The blocks of one reply. Every method returns the events to emit, in order.

    ``tag_text``: whether text parts record the provider and model that wrote them (as
    thinking parts always do); adapters that replay text as plain text leave it off.
    """

    def __init__(self, provider: str, model: str, *, tag_text: bool = True) -> None:
        self.provider = provider
        self.model = model
        self.tag_text = tag_text
        self.next_index = 0
        self.open_index: int | None = None
        self.open_kind: BlockKind | None = None
        self.open_text: list[str] = []
        self._pieces: list[dict[str, Any]] = []  # finished pieces of the open block
        self._piece_chars = 0  # characters of the open block's current, unfinished piece
        # Empty signed parts that came with no block open: they lead the next block.
        self._waiting: list[dict[str, Any]] = []

    def take_index(self) -> int:
        """The index of the next block."""
        index, self.next_index = self.next_index, self.next_index + 1
        return index

    # -- tool calls ---------------------------------------------------------------------

    def call(self, part: Part, arguments_json: str) -> list[ProviderEvent]:
        """A whole tool call at once: close the open run; start, one delta of its arguments, end."""
        index = self.take_index()
        return [
            *self.close(),
            BlockStart(index=index, kind="tool_call", call_id=part.call_id, name=part.name),
            BlockDelta(index=index, delta=arguments_json),
            BlockEnd(index=index, part=part),
        ]

    def start(
        self, call_id: str | None, name: str | None, kind: BlockKind = "tool_call"
    ) -> tuple[int, list[ProviderEvent]]:
        """Start a block the adapter keeps itself (closing the open run): a streamed tool call,
        or any block of a wire format that says where blocks begin and end. Its index and the events."""
        events = self.close()
        index = self.take_index()
        return index, [*events, BlockStart(index=index, kind=kind, call_id=call_id, name=name)]

    @staticmethod
    def delta(index: int, text: str) -> list[ProviderEvent]:
        """A piece of a started block (text, or a tool call's arguments)."""
        return [BlockDelta(index=index, delta=text)] if text else []

    @staticmethod
    def catch_up(index: int, streamed: str, final: str) -> list[ProviderEvent]:
        """What the deltas of a block did not spell yet of its ``final`` text, so that a client
        adding up deltas ends with it (nothing when ``final`` does not continue ``streamed``)."""
        if final != streamed and final.startswith(streamed):
            return [BlockDelta(index=index, delta=final[len(streamed) :])]
        return []

    @staticmethod
    def end(index: int, part: Part) -> list[ProviderEvent]:
        """End a started block with its finished part."""
        return [BlockEnd(index=index, part=part)]

    # -- thinking and text runs -----------------------------------------------------------

    def ensure_open(self, kind: BlockKind) -> list[ProviderEvent]:
        """Make a block of ``kind`` the open one (possibly empty, e.g. for opaque reasoning state)."""
        return [*self.close(), *self.open(kind)] if self.open_kind != kind else []

    def open(self, kind: BlockKind) -> list[ProviderEvent]:
        self.open_index, self.open_kind, self.open_text = self.take_index(), kind, []
        self._pieces = [_typed(p, kind) for p in self._waiting]
        self._piece_chars, self._waiting = 0, []
        return [BlockStart(index=self.open_index, kind=kind)]

    def append(self, kind: BlockKind, text: str, signature: str | None = None) -> list[ProviderEvent]:
        """One part of ``kind``; ``signature`` is the one riding on it (Gemini), if any."""
        if not text:
            if signature is not None:
                self._empty_signed_part(kind, signature)
            return []
        events = self.ensure_open(kind)
        assert self.open_index is not None
        self.open_text.append(text)
        self._piece_chars += len(text)
        events.append(BlockDelta(index=self.open_index, delta=text))
        if signature is not None:
            self._pieces.append({"chars": self._piece_chars, "signature": signature})
            self._piece_chars = 0
        return events

    def close(self, provider_data: dict[str, Any] | None = None) -> list[ProviderEvent]:
        """End the open block, if any; ``provider_data`` joins its part's (opaque reasoning state)."""
        if self.open_index is None or self.open_kind is None:
            return []
        pieces = self._pieces + ([{"chars": self._piece_chars}] if self._piece_chars or not self._pieces else [])
        signature, data = None, None
        if len(pieces) == 1:
            signature = pieces[0].get("signature")
        else:
            data = {"parts": pieces}
        if provider_data:
            data = {**(data or {}), **provider_data}
        tagged = self.tag_text or self.open_kind != "text"
        part = Part(
            type=self.open_kind,
            text="".join(self.open_text),
            provider=self.provider if tagged else None,
            model=self.model if tagged else None,
            signature=signature,
            provider_data=data,
        )
        event = BlockEnd(index=self.open_index, part=part)
        self.open_index, self.open_kind, self.open_text, self._pieces, self._piece_chars = None, None, [], [], 0
        return [event]

    def finish(self) -> list[ProviderEvent]:
        """Close the open block at the end of the response."""
        if self._waiting:
            # Only possible when a response ends in an empty signed part after a tool call:
            # no block is left to carry it (Gemini signs the function call instead).
            log.debug("dropping %d signed empty part(s) that followed no text", len(self._waiting))
            self._waiting = []
        return self.close()

    def _empty_signed_part(self, kind: BlockKind, signature: str) -> None:
        piece: dict[str, Any] = {"chars": 0, "signature": signature, "type": kind}
        if self.open_kind is None:
            self._waiting.append(piece)
            return
        if self._piece_chars:
            self._pieces.append({"chars": self._piece_chars})
            self._piece_chars = 0
        self._pieces.append(_typed(piece, self.open_kind))


def _typed(piece: dict[str, Any], block_kind: BlockKind) -> dict[str, Any]:
    """``piece`` with its ``type`` kept only where it differs from its block's kind."""
    return {k: v for k, v in piece.items() if not (k == "type" and v == block_kind)}


def pieces_of(part: Part) -> list[tuple[str, BlockKind, str | None]] | None:
    """(text, kind, signature) of each piece a stored block was cut into, or None when it
    was not cut (or the record does not fit its text, so it cannot be trusted)."""
    raw = (part.provider_data or {}).get("parts")
    if not isinstance(raw, list) or part.type not in ("text", "thinking"):
        return None
    pieces: list[tuple[str, BlockKind, str | None]] = []
    position = 0
    for piece in raw:
        chars = piece.get("chars") if isinstance(piece, dict) else None
        if not isinstance(chars, int) or isinstance(chars, bool) or chars < 0:
            return None
        kind = piece.get("type", part.type)
        signature = piece.get("signature")
        if kind not in ("text", "thinking") or not (signature is None or isinstance(signature, str)):
            return None
        pieces.append((part.text[position : position + chars], kind, signature))
        position += chars
    return pieces if position == len(part.text) else None
