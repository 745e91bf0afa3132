"""An image as ponder keeps it: its format read from its bytes (PNG, JPEG, GIF, WebP), its
size decoded, and scaled down to at most ``MAX_IMAGE_EDGE_PX`` on the long edge and
``MAX_IMAGE_BYTES`` before it is stored, so no image in a history can make a later request
fail. Pillow does the decoding: hand-written decoders are where hostile files win.

Pillow's decompression-bomb guard is on, tighter than its default (``MAX_IMAGE_PIXELS``):
the pixel count is checked from the header before anything is decoded, and a file that
claims more is refused. A JPEG is decoded at a reduced scale when it will be scaled down
anyway (``Image.draft``), which keeps the memory of a large photo small. Truncated files
fail to decode (``LOAD_TRUNCATED_IMAGES`` stays off) and are refused, never stored.

CPU-bound and synchronous: callers run it in a worker thread.
"""

from __future__ import annotations

import io
import warnings

import msgspec
from PIL import Image, ImageFile, UnidentifiedImageError

from daemon.errors import UnusableContent
from daemon.media.limits import MAX_IMAGE_BYTES, MAX_IMAGE_EDGE_PX, MAX_IMAGE_PIXELS

# The decompression-bomb limit for every image this process opens (Pillow raises past twice
# this; the check below refuses past it). Truncated images are errors, not half pictures.
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
ImageFile.LOAD_TRUNCATED_IMAGES = False

_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
# Magic numbers, checked before Pillow is asked: Pillow opens many more formats (BMP, TIFF,
# ICO, PSD, ...) that no provider takes, and some of those have had decoder bugs.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class NormalizedImage(msgspec.Struct, frozen=True):
    """The bytes to store and what they are; ``original_*`` describe what was given."""

    data: bytes
    mime_type: str
    width: int
    height: int
    original_bytes: int
    original_mime_type: str
    scaled: bool


def sniff_mime_type(data: bytes) -> str | None:
    """The image type ``data`` starts with (PNG, JPEG, GIF, WebP), or None."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def normalize(data: bytes) -> NormalizedImage:
    """``data`` as it will be stored; ``UnusableContent`` (reason ``format``, ``undecodable``
    or ``too_large``) when it is not an image ponder can keep."""
    mime = sniff_mime_type(data)
    if mime is None:
        raise UnusableContent(
            "it is not a PNG, JPEG, GIF or WebP image (its bytes say so, whatever its name or mime_type); "
            "convert it to one of those",
            reason="format",
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=list(_FORMATS))
            width, height = image.size
            if width <= 0 or height <= 0 or width * height > MAX_IMAGE_PIXELS:
                raise UnusableContent(
                    f"it claims {width}×{height} pixels, more than the {MAX_IMAGE_PIXELS:,} ponder decodes; "
                    "send a smaller image",
                    reason="too_large",
                    limit=MAX_IMAGE_PIXELS,
                )
            if _FORMATS.get(image.format or "") != mime:
                raise UnusableContent(f"its bytes start like {mime} but do not decode as one", reason="undecodable")
            fits = max(width, height) <= MAX_IMAGE_EDGE_PX and len(data) <= MAX_IMAGE_BYTES
            if fits:
                image.load()  # every pixel decodes: a truncated file is refused now, not by a provider later
                return NormalizedImage(data, mime, width, height, len(data), mime, scaled=False)
            return _scaled(image, mime, len(data))
        except UnusableContent:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise UnusableContent(
                f"it decodes to more than {MAX_IMAGE_PIXELS:,} pixels (a decompression bomb?); send a smaller image",
                reason="too_large",
                limit=MAX_IMAGE_PIXELS,
            ) from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError, MemoryError) as exc:
            # Pillow reports broken files as any of these (SyntaxError for a bad header).
            raise UnusableContent(
                f"it does not decode as {mime} ({_short(exc)}); the file may be truncated or damaged",
                reason="undecodable",
            ) from None


def _scaled(image: Image.Image, mime: str, original_bytes: int) -> NormalizedImage:
    """``image`` scaled to fit ``MAX_IMAGE_EDGE_PX`` and re-encoded under ``MAX_IMAGE_BYTES``:
    in its own format when that fits, else as JPEG at falling quality, then smaller still."""
    width, height = image.size
    scale = min(1.0, MAX_IMAGE_EDGE_PX / max(width, height))
    target = (max(1, round(width * scale)), max(1, round(height * scale)))
    if mime == "image/jpeg":
        image.draft("RGB", target)  # decode at 1/2, 1/4 or 1/8 scale when that is still large enough
    image.load()
    frame = image.convert("RGBA" if _has_alpha(image) else "RGB")
    image.close()
    # The image's own format is worth trying only when its bytes per pixel promise a fit: a
    # photo or a noisy screenshot as PNG never fits, and encoding it to find out costs seconds.
    own_fits = original_bytes * (target[0] * target[1]) / (width * height) <= MAX_IMAGE_BYTES
    for attempt in range(8):
        if frame.size != target:
            frame = frame.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
        for out_mime, encoded in _encodings(frame, mime, first=attempt == 0 and own_fits):
            if len(encoded) <= MAX_IMAGE_BYTES:
                return NormalizedImage(encoded, out_mime, *frame.size, original_bytes, mime, scaled=True)
        target = (max(1, round(target[0] * 0.75)), max(1, round(target[1] * 0.75)))
    raise UnusableContent(
        f"it cannot be made smaller than {MAX_IMAGE_BYTES:,} bytes; send a smaller image", reason="too_large"
    )


def _encodings(frame: Image.Image, mime: str, *, first: bool) -> list[tuple[str, bytes]]:
    """Encodings to try, smallest effort first: the image's own format, then JPEG (flattened)."""
    tries: list[tuple[str, bytes]] = []
    if first and mime in ("image/png", "image/webp"):
        fmt = "PNG" if mime == "image/png" else "WEBP"
        options = {"compress_level": 6} if fmt == "PNG" else {"quality": 90}
        tries.append((mime, _encode(frame, fmt, **options)))
        if len(tries[-1][1]) <= MAX_IMAGE_BYTES:
            return tries
    rgb = _flattened(frame)
    for quality in (85, 70):
        tries.append(("image/jpeg", _encode(rgb, "JPEG", quality=quality)))
        if len(tries[-1][1]) <= MAX_IMAGE_BYTES:
            break
    return tries


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _flattened(frame: Image.Image) -> Image.Image:
    """``frame`` on white, for JPEG (which has no alpha): transparent screenshots stay legible."""
    if frame.mode != "RGBA":
        return frame.convert("RGB")
    background = Image.new("RGB", frame.size, (255, 255, 255))
    background.paste(frame, mask=frame.getchannel("A"))
    return background


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 120 else text[:119] + "…"
