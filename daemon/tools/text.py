"""Telling text files from binary ones, shared by the file tools."""

from __future__ import annotations

__all__ = ["SNIFF_BYTES", "decode_text", "looks_binary"]

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
