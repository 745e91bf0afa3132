"""Admission of a prompt's content (PROTOCOL.md "Prompt content"): every block checked, read
and normalised before the prompt is answered, into the parts of the user message.

Everything is decided here, before anything is stored: an image's format comes from its
bytes and it is scaled down to what every provider takes (``daemon.media.images``); a path
or a ``file://`` link is read under the same confinement as the file tools (inside the
session's cwd, no symlink out of it, only regular files: never a FIFO); sizes are checked
before bytes are read or decoded, so a 100 MB base64 string or a huge file costs nothing.
Any refusal is a ``ContentNotSupported`` naming the block, why, and what to do.

Images are returned with their bytes in ``Part.data`` and their content hash as
``attachment_id``: the store writes each distinct image once, and the parts keep only the id.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import anyio
import msgspec

from daemon.conversation import Part
from daemon.errors import ContentNotSupported, InvalidParams, UnusableContent
from daemon.media.limits import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_PROMPT,
    MAX_INPUT_IMAGE_BYTES,
    MAX_RESOURCE_TEXT_BYTES,
)
from daemon.tools.base import ToolError
from daemon.tools.paths import confined_parent, open_regular, resolve_in_cwd
from protocol.methods import ImageInput, InputBlock, ResourceInput, ResourceLinkInput, TextInput

if TYPE_CHECKING:
    from daemon.media.images import NormalizedImage  # Pillow loads on the first image only

# Enough of a file to tell an image (magic numbers) from text.
_SNIFF_BYTES = 16


class ContentRules(msgspec.Struct, frozen=True):
    """What admission needs to know of the session: where it works, what its model takes."""

    cwd: Path
    model_id: str
    takes_images: bool
    vision_models: Sequence[str] = ()  # models of the same provider that take images, for the sentence
    links_outside_cwd: bool = False  # ACP: a link outside the cwd is kept as a link, not refused


async def admit_content(blocks: Sequence[InputBlock], rules: ContentRules) -> list[Part]:
    """The user message's parts for ``blocks``; ``ContentNotSupported`` / ``InvalidParams`` when refused."""
    _check_shape(blocks, rules)
    if not any(isinstance(b, (ImageInput, ResourceInput, ResourceLinkInput)) for b in blocks):
        return [Part(type="text", text=b.text) for b in blocks if isinstance(b, TextInput)]
    # Reading files and decoding images is blocking work: one worker thread, blocks in order,
    # so at most one image is decoded at a time and memory stays bounded.
    return await anyio.to_thread.run_sync(_admit_all, list(blocks), rules)


def _check_shape(blocks: Sequence[InputBlock], rules: ContentRules) -> None:
    """The refusals that need no reading: malformed blocks, too many images, a model without vision."""
    if not blocks:
        raise InvalidParams("content is empty; send at least one block.", argument="content")
    images = 0
    for index, block in enumerate(blocks):
        argument = f"content[{index}]"
        if isinstance(block, ImageInput):
            if (block.data is None) == (block.path is None):
                raise InvalidParams(f"Block {index} (image) needs exactly one of data and path.", argument=argument)
            images += 1
            if not rules.takes_images:
                raise _no_vision(index, rules)
            if images > MAX_IMAGES_PER_PROMPT:
                raise _too_many(index)
        elif isinstance(block, ResourceInput) and (block.text is None) == (block.blob is None):
            raise InvalidParams(f"Block {index} (resource) needs exactly one of text and blob.", argument=argument)


def _admit_all(blocks: list[InputBlock], rules: ContentRules) -> list[Part]:
    parts: list[Part] = []
    images = 0
    for index, block in enumerate(blocks):
        part = _admit_one(index, block, rules)
        if part.type == "image":
            images += 1
            if not rules.takes_images:
                raise _no_vision(index, rules)
            if images > MAX_IMAGES_PER_PROMPT:
                raise _too_many(index)
        parts.append(part)
    return parts


def _admit_one(index: int, block: InputBlock, rules: ContentRules) -> Part:
    if isinstance(block, TextInput):
        return Part(type="text", text=block.text)
    if isinstance(block, ImageInput):
        if block.data is not None:
            data = _base64(index, "image", block.data, "data")
            return _image(index, "image", data, block.name)
        assert block.path is not None
        resolved = _inside_cwd(index, "image", block.path, rules)
        if resolved is None:
            raise _refused(index, "image", f"path {block.path!r} is outside the session's cwd", "outside_cwd")
        data = _read_file(index, "image", resolved, rules.cwd, MAX_INPUT_IMAGE_BYTES, whole=True)[0]
        return _image(index, "image", data, block.name or resolved.name)
    if isinstance(block, ResourceInput):
        if block.text is not None:
            text, truncated = _cut_text(block.text)
            return Part(type="resource", uri=block.uri, mime_type=block.mime_type, text=text, truncated=truncated)
        assert block.blob is not None
        data = _base64(index, "resource", block.blob, "blob")
        if _sniff(data) is None:
            raise _refused(
                index,
                "resource",
                "its blob is not an image (PNG, JPEG, GIF or WebP); send a text file's content as text",
                "format",
            )
        return _image(index, "resource", data, _name_of(block.uri))
    return _link(index, block, rules)


def _link(index: int, block: ResourceLinkInput, rules: ContentRules) -> Part:
    """A ``file://`` link inside the cwd, read now (a replay sends the same bytes); others kept as links."""
    keep = Part(type="resource_link", uri=block.uri, name=block.name, mime_type=block.mime_type)
    parsed = urlparse(block.uri)
    if parsed.scheme != "file":
        return keep
    if parsed.netloc not in ("", "localhost"):
        raise _refused(index, "resource_link", f"{block.uri!r} names another host; link a local file", "unreadable")
    resolved = _inside_cwd(index, "resource_link", unquote(parsed.path), rules)
    if resolved is None:
        if rules.links_outside_cwd:
            return keep
        raise _refused(
            index,
            "resource_link",
            f"{block.uri!r} is outside the session's cwd {rules.cwd}; ponder reads only files inside it",
            "outside_cwd",
        )
    if resolved.is_dir():
        return keep
    head, size = _read_file(index, "resource_link", resolved, rules.cwd, _SNIFF_BYTES, whole=False)
    if _sniff(head) is not None:
        if not rules.takes_images:
            raise _no_vision(index, rules)
        data = _read_file(index, "resource_link", resolved, rules.cwd, MAX_INPUT_IMAGE_BYTES, whole=True)[0]
        return _image(index, "resource_link", data, block.name)
    raw, size = _read_file(index, "resource_link", resolved, rules.cwd, MAX_RESOURCE_TEXT_BYTES, whole=False)
    text = _utf8_prefix(raw, cut=size > len(raw))
    if text is None:
        raise _refused(
            index,
            "resource_link",
            f"{block.name!r} is neither an image nor UTF-8 text; ponder cannot show it to a model",
            "format",
        )
    return Part(type="resource", uri=block.uri, mime_type=block.mime_type, text=text, truncated=size > len(raw))


# --- images -----------------------------------------------------------------------------

# Images one tool result passes on to the model; more are named in the text only.
MAX_TOOL_IMAGES = 8


async def tool_images(images: Sequence[tuple[str, bytes]]) -> tuple[list[Part], list[str]]:
    """Image parts for what a tool returned (checked and scaled like a prompt's), and a line
    for each one that could not be kept, for the tool's text (the model reads why)."""

    def admit() -> tuple[list[Part], list[str]]:
        from daemon.media.images import normalize

        parts: list[Part] = []
        problems: list[str] = []
        for n, (declared, data) in enumerate(images, start=1):
            if n > MAX_TOOL_IMAGES:
                problems.append(f"[image {n}: not shown, a tool result passes on at most {MAX_TOOL_IMAGES} images]")
                continue
            try:
                image = normalize(data)
            except UnusableContent as exc:
                problems.append(f"[image {n} ({declared}): not shown, {exc.why}]")
                continue
            parts.append(_image_part(image, f"tool image {n}"))
        return parts, problems

    return await anyio.to_thread.run_sync(admit)


def _image(index: int, what: str, data: bytes, name: str | None) -> Part:
    from daemon.media.images import normalize  # Pillow is imported on the first image only

    try:
        image = normalize(data)
    except UnusableContent as exc:
        raise _refused(index, what, exc.why, exc.reason, limit=exc.limit) from None
    return _image_part(image, name)


def _image_part(image: NormalizedImage, name: str | None) -> Part:
    return Part(
        type="image",
        attachment_id="att_" + _sha256(image.data),
        mime_type=image.mime_type,
        size=len(image.data),
        width=image.width,
        height=image.height,
        name=name,
        data=image.data,
    )


def _sniff(data: bytes) -> str | None:
    from daemon.media.images import sniff_mime_type

    return sniff_mime_type(data)


def _base64(index: int, what: str, text: str, field: str) -> bytes:
    if text[:5].lower() == "data:":
        raise _refused(
            index,
            what,
            f"its {field} is a data URL; send only the base64 after the comma (and the type as mime_type)",
            "format",
        )
    # Refused before decoding: 4 base64 characters carry 3 bytes.
    if len(text) > (MAX_INPUT_IMAGE_BYTES + 2) // 3 * 4:
        raise _refused(
            index,
            what,
            f"its {field} is {len(text):,} base64 characters, more than the {MAX_INPUT_IMAGE_BYTES:,} bytes "
            f"ponder reads of one image; send a smaller image (it is stored at most {MAX_IMAGE_BYTES:,} bytes anyway)",
            "too_large",
            limit=MAX_INPUT_IMAGE_BYTES,
        )
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _refused(index, what, f"its {field} is not valid base64", "undecodable") from None


# --- files ------------------------------------------------------------------------------


def _inside_cwd(index: int, what: str, path: str, rules: ContentRules) -> Path | None:
    """The real path of ``path`` when it is inside the cwd, None when it is outside."""
    try:
        return resolve_in_cwd(rules.cwd, path)
    except ToolError as exc:
        if "outside the session's working directory" in str(exc):
            return None
        raise _refused(index, what, str(exc).rstrip("."), "unreadable") from None


def _read_file(index: int, what: str, path: Path, cwd: Path, limit: int, *, whole: bool) -> tuple[bytes, int]:
    """(up to ``limit`` bytes of the regular file at ``path``, its size), opened without following
    a symlink nor blocking on a FIFO; with ``whole``, a larger file is refused instead of cut."""
    root = Path(os.path.realpath(cwd))
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    try:
        with confined_parent(root, path) as (dir_fd, name):
            fd, info = open_regular(name, dir_fd, shown)
            with os.fdopen(fd, "rb") as file:
                if whole and info.st_size > limit:
                    raise _refused(
                        index,
                        what,
                        f"'{shown}' is {info.st_size:,} bytes, more than the {limit:,} ponder reads of one image; "
                        "send a smaller image",
                        "too_large",
                        limit=limit,
                    )
                data = file.read(limit + 1 if whole else limit)
                if whole and len(data) > limit:  # it grew since fstat
                    raise _refused(index, what, f"'{shown}' is larger than {limit:,} bytes", "too_large", limit=limit)
                return data, max(info.st_size, len(data))
    except ToolError as exc:
        raise _refused(index, what, str(exc).rstrip("."), "unreadable") from None
    except OSError as exc:
        cause = "it does not exist" if exc.errno == errno.ENOENT else (exc.strerror or str(exc)).lower()
        raise _refused(index, what, f"'{shown}' cannot be read: {cause}", "unreadable") from None


def _cut_text(text: str) -> tuple[str, bool]:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_RESOURCE_TEXT_BYTES:
        return text, False
    return raw[:MAX_RESOURCE_TEXT_BYTES].decode("utf-8", "ignore"), True


def _utf8_prefix(raw: bytes, *, cut: bool) -> str | None:
    """``raw`` as text, None when it is not UTF-8 text; a character split by the cut is dropped."""
    if b"\0" in raw:
        return None
    for drop in range(4 if cut else 1):
        try:
            return raw[: len(raw) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def _name_of(uri: str) -> str:
    path = urlparse(uri).path
    return unquote(path.rstrip("/").rsplit("/", 1)[-1]) if path else uri


# --- refusals ---------------------------------------------------------------------------


def _refused(index: int, what: str, why: str, reason: str, *, limit: int | None = None) -> ContentNotSupported:
    return ContentNotSupported(f"Block {index} ({what}) was refused: {why}.", index=index, reason=reason, limit=limit)


def _no_vision(index: int, rules: ContentRules) -> ContentNotSupported:
    others = list(rules.vision_models[:4])
    hint = (
        f"switch to a model that takes images, such as {', '.join(others)} (model/set)"
        if others
        else "switch to a model that takes images (models/list shows input_modalities)"
    )
    return ContentNotSupported(
        f"Block {index} (image) was refused: {rules.model_id} takes no images; {hint}, or send the prompt without it.",
        index=index,
        reason="model_lacks_image_input",
        model_id=rules.model_id,
    )


def _too_many(index: int) -> ContentNotSupported:
    return ContentNotSupported(
        f"Block {index} (image) was refused: a prompt takes at most {MAX_IMAGES_PER_PROMPT} images; "
        "send the rest in another prompt.",
        index=index,
        reason="too_many",
        limit=MAX_IMAGES_PER_PROMPT,
    )


def _sha256(data: bytes) -> str:
    import hashlib  # only a prompt or a tool result with an image needs it (every session loads this module)

    return hashlib.sha256(data).hexdigest()
