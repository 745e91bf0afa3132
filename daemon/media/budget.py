"""Which images of a history a request carries, and what the model reads instead of the others.

History that a model cannot take is never sent as is and never silently dropped
(PROTOCOL.md "Prompt content"): to a model without image input every image is a one-line
note; otherwise the ``MAX_IMAGES_PER_REQUEST`` most recent images (and at most
``MAX_IMAGE_BYTES_PER_REQUEST`` of them as the request carries them, base64: Gemini takes 20 MB
of inline data in a request) are sent and older ones are notes; an image a
provider refused (``Part.omitted``) is always a note. ``turn_start.notes`` says so in one
sentence per cause. Resources become delimited text naming their URI, links a line naming
theirs, so adapters only ever see text and images.

Pure: the bytes are fetched by the caller for the ids ``MediaPlan.send`` names.
"""

from __future__ import annotations

import math

import msgspec

from daemon.conversation import ChatMessage, Part
from daemon.media.limits import MAX_IMAGE_BYTES_PER_REQUEST, MAX_IMAGES_PER_REQUEST

PartKey = tuple[str, int]  # (message_id, position)

NO_IMAGE_INPUT = "no_image_input"
OVER_COUNT = "over_count"
OVER_BYTES = "over_bytes"
REJECTED = "rejected_by_provider"


class MediaPlan(msgspec.Struct):
    """For one request: the images sent (by part), why each other one is a note, and the notes."""

    send: dict[PartKey, str] = msgspec.field(default_factory=dict)  # part -> attachment_id
    left_out: dict[PartKey, str] = msgspec.field(default_factory=dict)  # part -> cause
    model_id: str = ""

    def notes(self) -> list[str]:
        """One sentence per cause, for ``turn_start.notes``."""
        counts: dict[str, int] = {}
        for cause in self.left_out.values():
            counts[cause] = counts.get(cause, 0) + 1
        notes = []
        if n := counts.get(NO_IMAGE_INPUT):
            notes.append(f"{_images(n)} sent as a one-line note: {self.model_id} takes no images.")
        if n := counts.get(OVER_COUNT):
            notes.append(
                f"{_images(n)} older than the {MAX_IMAGES_PER_REQUEST} most recent "
                f"{'was' if n == 1 else 'were'} sent as a one-line note."
            )
        if n := counts.get(OVER_BYTES):
            notes.append(
                f"{_images(n)} beyond the {MAX_IMAGE_BYTES_PER_REQUEST // 1_000_000} MB of images a request "
                f"carries {'was' if n == 1 else 'were'} sent as a one-line note."
            )
        if n := counts.get(REJECTED):
            notes.append(f"{_images(n)} that a provider refused {'is' if n == 1 else 'are'} sent as a one-line note.")
        return notes


def _images(n: int) -> str:
    return "1 image" if n == 1 else f"{n} images"


def plan(messages: list[ChatMessage], *, takes_images: bool, model_id: str) -> MediaPlan:
    """What a request of ``messages`` to ``model_id`` carries: newest images first, within the limits."""
    result = MediaPlan(model_id=model_id)
    count = total = 0
    for message in reversed(messages):
        for position in range(len(message.parts) - 1, -1, -1):
            part = message.parts[position]
            if part.type != "image":
                continue
            key = (message.message_id, position)
            if part.omitted:
                result.left_out[key] = REJECTED
            elif not takes_images:
                result.left_out[key] = NO_IMAGE_INPUT
            elif count >= MAX_IMAGES_PER_REQUEST:
                result.left_out[key] = OVER_COUNT
            elif total + wire_bytes(part) > MAX_IMAGE_BYTES_PER_REQUEST:
                result.left_out[key] = OVER_BYTES
            else:
                count += 1
                total += wire_bytes(part)
                result.send[key] = part.attachment_id or ""
    return result


def wire_bytes(part: Part) -> int:
    """What an image adds to a request: its bytes as base64 (every provider's inline form)."""
    return 4 * math.ceil((part.size or 0) / 3)


def render(messages: list[ChatMessage], media: MediaPlan, data: dict[str, bytes]) -> list[ChatMessage]:
    """``messages`` as a request carries them: images to send with their bytes, the others and
    every resource as text. An image whose bytes are missing from ``data`` (and not in the part,
    as a tool's image is until its turn is over) is a note too. Parts with bytes that are not
    sent lose them, so no request carries more than the plan allows."""
    out: list[ChatMessage] = []
    for message in messages:
        if not any(p.type in ("image", "resource", "resource_link") for p in message.parts):
            out.append(message)
            continue
        parts = [_rendered(message, position, part, media, data) for position, part in enumerate(message.parts)]
        out.append(msgspec.structs.replace(message, parts=parts))
    return out


def _rendered(message: ChatMessage, position: int, part: Part, media: MediaPlan, data: dict[str, bytes]) -> Part:
    if part.type == "resource":
        cut = "\n[truncated at 256 KiB]" if part.truncated else ""
        return Part(type="text", text=f'<file uri="{part.uri}">\n{part.text}{cut}\n</file>', call_id=part.call_id)
    if part.type == "resource_link":
        return Part(type="text", text=f"[linked resource: {part.name or part.uri} <{part.uri}>]", call_id=part.call_id)
    if part.type != "image":
        return part
    key = (message.message_id, position)
    attachment = media.send.get(key)
    if attachment is not None and part.data is not None:
        return part  # a tool's image, still in memory
    if attachment is not None and attachment in data:
        return msgspec.structs.replace(part, data=data[attachment])
    cause = media.left_out.get(key, "missing")
    return Part(type="text", text=image_note(part, cause, media.model_id), call_id=part.call_id)


def image_note(part: Part, cause: str, model_id: str) -> str:
    """``[image omitted: NAME (MIME, W×H): WHY]``: the one line a model reads for an image left out."""
    why = {
        NO_IMAGE_INPUT: f"{model_id} takes no images",
        OVER_COUNT: f"only the {MAX_IMAGES_PER_REQUEST} most recent images are sent",
        OVER_BYTES: f"only {MAX_IMAGE_BYTES_PER_REQUEST // 1_000_000} MB of images are sent per request",
        REJECTED: "the provider refused it",
    }.get(cause, "its bytes are no longer stored")
    name = part.name or "image"
    return f"[image omitted: {name} ({part.mime_type}, {part.width}×{part.height}): {why}]"
