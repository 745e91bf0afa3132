"""Tables for a person: a header, columns aligned to their widest cell (numbers to the right),
the header bold and the cells in their column's style when colour is on, and one column that
gives way (cut with ``…``) when a row would not fit the terminal."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from daemon.cli.terminal import BOLD, Style, terminal_width

GAP = "  "


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = False  # numbers: aligned to the right
    style: str = ""  # an ANSI code for its cells, when colour is on
    style_of: Callable[[str], str] | None = None  # or the code for one cell's text
    shrinks: bool = False  # the column cut first to fit the terminal (one per table)


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], stream: TextIO) -> list[str]:
    """The table's lines for ``stream`` (its colour and width)."""
    style = Style(stream)
    widths = [max([len(column.header), *(len(row[i]) for row in rows)]) for i, column in enumerate(columns)]
    width = terminal_width(stream)
    if width is not None:
        over = sum(widths) + len(GAP) * (len(columns) - 1) - width
        for i, column in enumerate(columns):
            if column.shrinks and over > 0:
                widths[i] = max(len(column.header), widths[i] - over, 8)
    lines = [_line([c.header for c in columns], columns, widths, lambda i, text: style(BOLD, text))]
    for row in rows:
        lines.append(_line(row, columns, widths, lambda i, text: style(_code(columns[i], text), text)))
    return lines


def _code(column: Column, text: str) -> str:
    return column.style_of(text) if column.style_of is not None else column.style


def _line(cells: Sequence[str], columns: Sequence[Column], widths: list[int], paint: Callable[[int, str], str]) -> str:
    out = []
    for i, (cell, column, width) in enumerate(zip(cells, columns, widths, strict=True)):
        text = cell if len(cell) <= width else cell[: width - 1] + "…"
        padded = text.rjust(width) if column.right else text.ljust(width)
        last = i == len(columns) - 1
        if last and not column.right:
            padded = text  # no trailing spaces
        # Style the text only, not the padding, so alignment never depends on escape codes.
        out.append(padded.replace(text, paint(i, text), 1) if text else padded)
    return GAP.join(out).rstrip()
