"""What the person's terminal gets: whether a stream is a terminal, colour (only on a terminal,
never under ``NO_COLOR`` or ``TERM=dumb``), a progress line for long operations, and times
said relative to now.

``PONDER_FORCE_TTY=1`` makes stderr count as a terminal (for tests, and wrappers that relay it
to one); colour still needs the stream itself to be one.
"""

import itertools
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TextIO

DIM, RESET = "\x1b[2m", "\x1b[0m"
BOLD, RED, GREEN, YELLOW, CYAN = "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[36m"
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_CLEAR_LINE = "\r\x1b[K"


def stderr_is_terminal() -> bool:
    return os.environ.get("PONDER_FORCE_TTY") == "1" or sys.stderr.isatty()


def colour_on(stream: TextIO) -> bool:
    """Colour for ``stream``: a terminal, and the person has not asked for none (no-color.org)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except ValueError:  # a closed stream
        return False


class Style:
    """Wraps text in one ANSI style when colour is on for its stream, else leaves it as it is."""

    def __init__(self, stream: TextIO) -> None:
        self.on = colour_on(stream)

    def __call__(self, code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if self.on and text else text


def terminal_width(stream: TextIO, default: int = 100) -> int | None:
    """The terminal's columns for ``stream``, or None when it is not a terminal (no wrapping then)."""
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns or default
    except (OSError, ValueError):
        return None


def ago(stamp: str, now: datetime | None = None) -> str:
    """``just now``, ``5 min ago``, ``3 h ago``, ``yesterday``, ``4 days ago``, then the date."""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - when).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    if days == 1:
        return "yesterday"
    if days < 14:
        return f"{days} days ago"
    return when.date().isoformat()


class Progress:
    """A one-line spinner on stderr while a long operation runs; ``update`` changes its text.
    Nothing at all when stderr is not a terminal."""

    def __init__(self, text: str, *, active: bool) -> None:
        self.text = text
        self.active = active
        self.started = time.monotonic()
        self.frame = _SPINNER[0]

    def update(self, text: str) -> None:
        self.text = text
        if self.active:
            self._draw(self.frame)

    def _draw(self, frame: str) -> None:
        elapsed = int(time.monotonic() - self.started)
        shown = f"{frame} {self.text} ({elapsed}s)" if elapsed else f"{frame} {self.text}"
        sys.stderr.write(_CLEAR_LINE + shown)
        sys.stderr.flush()

    async def spin(self) -> None:
        import anyio  # here: the table of ``ponder sessions`` is printed without an event loop

        for frame in itertools.cycle(_SPINNER):
            self.frame = frame
            self._draw(frame)
            await anyio.sleep(0.1)

    def clear(self) -> None:
        sys.stderr.write(_CLEAR_LINE)
        sys.stderr.flush()


@asynccontextmanager
async def progress(text: str) -> AsyncIterator[Progress]:
    """``async with progress("Starting MCP servers…") as shown: ...``: spins until the block ends."""
    shown = Progress(text, active=stderr_is_terminal())
    if not shown.active:
        yield shown
        return
    import anyio

    async with anyio.create_task_group() as tg:
        tg.start_soon(shown.spin)
        try:
            yield shown
        finally:
            tg.cancel_scope.cancel()
            shown.clear()
