"""Masking credentials in text that leaves the daemon: tool output (into events, the store
and the model), log lines, MCP servers' stderr and providers' error bodies, also when a
streamed chunk boundary splits one.

Owns the process-wide set of credentials the daemon knows of (``remember``, ``known``):
every ``daemon.config.Secret`` (provider keys and their aliases, the GitHub sign-in, the
Copilot token) adds itself, and MCP servers' configured ``env`` values are added when
their specs are parsed. Values shorter than ``MIN_SECRET_CHARS`` are never masked: a
"secret" like ``1234`` or ``true`` would shred ordinary output and protects nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import overload

__all__ = ["MIN_SECRET_CHARS", "MaskingFormatter", "SecretMask", "known", "maskable", "remember", "scrub"]

MIN_SECRET_CHARS = 8

_lock = threading.Lock()
_known: set[str] = set()
_snapshot: tuple[str, ...] = ()  # longest first, so a secret containing another is masked whole


def remember(value: str) -> None:
    """Add a credential to those masked everywhere (ignored when shorter than ``MIN_SECRET_CHARS``)."""
    global _snapshot
    if len(value) < MIN_SECRET_CHARS or value in _known:
        return
    with _lock:
        _known.add(value)
        _snapshot = tuple(sorted(_known, key=len, reverse=True))


def known() -> tuple[str, ...]:
    """Every credential the daemon knows of, longest first."""
    return _snapshot


@overload
def scrub(text: str, secrets: Iterable[str] | None = None) -> str: ...
@overload
def scrub(text: bytes, secrets: Iterable[str] | None = None) -> bytes: ...
def scrub(text: str | bytes, secrets: Iterable[str] | None = None) -> str | bytes:
    """``text`` (or a raw body) with each of ``secrets`` (default: every known one) replaced by ``***``.

    The one scrubber: log lines, tool output, MCP servers' words and providers' error bodies all
    pass through it. Values shorter than ``MIN_SECRET_CHARS`` are left alone, and longer ones go
    first, so a secret containing another is masked whole.
    """
    chosen = known() if secrets is None else maskable(secrets)
    if isinstance(text, bytes):
        for secret in chosen:
            encoded = secret.encode()
            if encoded in text:
                text = text.replace(encoded, b"***")
        return text
    return _replace(text, chosen)


def _replace(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def maskable(secrets: Iterable[str]) -> tuple[str, ...]:
    """Those of ``secrets`` worth masking (``MIN_SECRET_CHARS`` or longer), longest first, once each."""
    return tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True))


class MaskingFormatter(logging.Formatter):
    """A log formatter whose lines never carry a known credential (message, arguments, traceback).

    One can serve several handlers (the daemon's stderr and its file): the record each of them
    is handed in turn is formatted once, by the first (every turn writes a record, and 200
    turns start at once in a burst)."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._last: tuple[logging.LogRecord, str] | None = None  # the last record formatted, its line

    def format(self, record: logging.LogRecord) -> str:
        last = self._last  # one read: handlers on other threads may replace it meanwhile
        if last is not None and last[0] is record:
            return last[1]
        line = scrub(super().format(record))
        self._last = (record, line)
        return line


class SecretMask:
    """Replaces credentials with ``***`` in streamed text, also when a chunk boundary splits one.

    Only a tail that could be the start of a credential is held back, so ordinary output
    streams as it comes. Values shorter than ``MIN_SECRET_CHARS`` are left alone, as ``scrub``
    does.
    """

    def __init__(self, secrets: list[str] | tuple[str, ...]) -> None:
        self.secrets = maskable(secrets)
        self.pending = ""

    def scrub(self, text: str) -> str:
        return _replace(text, self.secrets)

    def feed(self, chunk: str) -> str:
        if not self.secrets:
            return chunk
        text = self.scrub(self.pending + chunk)
        held = 0
        for secret in self.secrets:
            held = max(held, _overlap(text, secret))
        self.pending = text[len(text) - held :] if held else ""
        return text[: len(text) - held]

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


def _overlap(text: str, secret: str) -> int:
    """The length of the longest end of ``text`` that is a (proper) start of ``secret``."""
    tail = text[-(len(secret) - 1) :]
    start = tail.find(secret[0])
    while start != -1:
        if secret.startswith(tail[start:]):
            return len(tail) - start
        start = tail.find(secret[0], start + 1)
    return 0
