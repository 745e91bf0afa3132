"""Telling text files from binary ones, and finding and escaping what is not valid UTF-8: shared by
the file tools, and by the agent's check of a provider's text (``has_surrogates``)."""

from __future__ import annotations

import functools
import re

__all__ = ["SNIFF_BYTES", "decode_text", "escape_char", "escape_surrogates", "has_surrogates", "looks_binary"]

SNIFF_BYTES = 8192


def looks_binary(head: bytes) -> bool:
    """NUL bytes in the first few KiB: what git and grep use to call a file binary."""
    return b"\0" in head[:SNIFF_BYTES]


def decode_text(data: bytes) -> str | None:
    """The UTF-8 text of ``data``, or None when it is binary or not UTF-8."""
    if looks_binary(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def escape_char(char: str) -> str:
    """A visible stand-in for one unprintable character: ``\\xNN`` for a byte that was not
    UTF-8 (``os.fsdecode`` keeps it as a surrogate U+DC80..U+DCFF), else its ``repr`` escape."""
    if "\udc80" <= char <= "\udcff":
        return f"\\x{ord(char) - 0xDC00:02x}"
    return repr(char)[1:-1]  # '\\n', '\\x07', '\\u2028', '\\ud800'


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (U+D800..U+DFFF): the only characters the
    strict UTF-8 codec refuses. Not a regex search: a class over that range costs ~2 M
    instructions to compile, which every daemon would pay with its first turn."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@functools.cache
def _surrogate() -> re.Pattern[str]:
    """The pattern that finds them, compiled once there is one to escape (see ``has_surrogates``)."""
    return re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """``text`` with its lone surrogates escaped, so it encodes as UTF-8; ``text`` itself when it has none."""
    if not has_surrogates(text):
        return text
    return _surrogate().sub(lambda match: escape_char(match.group()), text)
