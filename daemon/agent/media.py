"""The images a turn's requests carry: planned per request (``daemon.media.budget``), their
bytes read from the store once per turn, and an image a provider refuses marked so it is
never sent again.

A turn holds a ``TurnMedia`` when its session stores attachments. ``ready`` is awaited before
each model call (the history grows within a turn); ``render`` is then synchronous, as the
request is built. ``rejected`` handles a provider's 400 that names an image: the images of the
newest message that carried any (the one that changed since the last request that worked,
in the usual case) are marked in the store and in the history, and the request is made
once more with notes in their place.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import msgspec

from daemon.conversation import ChatMessage
from daemon.errors import ProviderError
from daemon.media import budget

LoadAttachments = Callable[[list[str]], Awaitable[dict[str, bytes]]]
MarkOmitted = Callable[[str, int, str], Awaitable[None]]

# A provider's words for "this image is the problem" (Anthropic "messages.3.content.1.source:
# image exceeds ...", OpenAI "Invalid image", Gemini "Unable to process input image", Ollama
# "failed to process image"); a 400 without them is not retried without images.
# A pattern, compiled (and cached) by ``re`` with the first refusal it is checked against, not at import.
_IMAGE_ERROR = r"(?i)\bimages?\b|image_url|input_image|inline_?data|media_type"


# A Struct, not a dataclass: a session/start imports this module, and a dataclass compiles its
# generated methods at import (tests/server/test_start_path.py).
class TurnMedia(msgspec.Struct):
    model_id: str
    takes_images: bool
    load: LoadAttachments
    mark: MarkOmitted
    cache: dict[str, bytes] = msgspec.field(default_factory=dict)
    plan: budget.MediaPlan = msgspec.field(default_factory=budget.MediaPlan)

    async def ready(self, messages: list[ChatMessage]) -> budget.MediaPlan:
        """Plan the next request of ``messages`` and have the bytes of the images it sends."""
        self.plan = budget.plan(messages, takes_images=self.takes_images, model_id=self.model_id)
        wanted = set(self.plan.send.values())
        in_memory = {p.attachment_id for m in messages for p in m.parts if p.type == "image" and p.data is not None}
        missing = [a for a in wanted if a not in self.cache and a not in in_memory]
        if missing:
            self.cache.update(await self.load(missing))
        for stale in set(self.cache) - wanted:  # only what this request sends stays in memory
            del self.cache[stale]
        return self.plan

    def render(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        return budget.render(messages, self.plan, self.cache)

    async def rejected(self, exc: ProviderError, history: list[ChatMessage]) -> int:
        """Mark the images a provider's 400 refused; how many were marked (0: not an image refusal)."""
        if exc.status != 400 or not self.plan.send or not re.search(_IMAGE_ERROR, exc.message):
            return 0
        sent = set(self.plan.send)
        for message in reversed(history):
            keys = [(message.message_id, i) for i, p in enumerate(message.parts) if p.type == "image"]
            keys = [key for key in keys if key in sent]
            if not keys:
                continue
            for _, position in keys:
                message.parts[position].omitted = budget.REJECTED
                await self.mark(message.message_id, position, budget.REJECTED)
            return len(keys)
        return 0
