"""Glob patterns and the common subset of ``.gitignore`` rules.

Supported: ``*``, ``?``, ``[...]`` (``[!...]`` negated), ``**`` as a whole path
component (``**/x``, ``x/**``, ``a/**/b``), ``\\`` escapes, comments, negation ``!``,
directory-only ``dir/`` patterns, and anchoring (a pattern with a ``/`` other than a
trailing one is relative to its ``.gitignore``'s directory; one without matches a name
at any depth). The last matching rule wins, and rules of deeper ``.gitignore`` files
come after those of their ancestors. Not supported: global excludes and
``.git/info/exclude``, which a model's view of a project rarely needs.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["GitIgnore", "compile_glob", "glob_to_regex"]


def glob_to_regex(pattern: str) -> str:
    """A regex (for ``fullmatch``) over ``/``-separated paths matching the glob."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole_component = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if j - i >= 2 and whole_component:
                if j == n:
                    out.append(".*")  # trailing '**': everything below
                else:
                    out.append("(?:.*/)?")  # '**/': zero or more directories
                    j += 1
            else:
                out.append("[^/]*")
            i = j
            continue
        if char == "?":
            out.append("[^/]")
        elif char == "[":
            end = _bracket_end(pattern, i)
            if end < 0:
                out.append(re.escape(char))
            else:
                out.append(_bracket_to_regex(pattern[i + 1 : end]))
                i = end + 1
                continue
        elif char == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _bracket_end(pattern: str, start: int) -> int:
    j = start + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ']' is a literal member
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    return j if j < len(pattern) else -1


def _bracket_to_regex(body: str) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    # Escape every member but '-' (ranges): this also keeps Python's re from warning
    # about nested sets or set operations, which the test suite turns into errors.
    members = "".join(char if char == "-" else re.escape(char) for char in body)
    # A class never matches '/', as in git's wildmatch with FNM_PATHNAME.
    return f"[^/{members}]" if negate else f"(?!/)[{members}]"


def compile_glob(pattern: str) -> re.Pattern[str]:
    return re.compile(glob_to_regex(pattern), re.DOTALL)


class _Rule(msgspec.Struct, frozen=True):
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    anchored: bool

    def matches(self, rel_path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        subject = rel_path if self.anchored else rel_path.rsplit("/", 1)[-1]
        return self.regex.fullmatch(subject) is not None


def parse_gitignore(text: str) -> list[_Rule]:
    rules: list[_Rule] = []
    for raw in text.splitlines():
        line = _strip_trailing_spaces(raw)
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated or line.startswith(("\\!", "\\#")):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        rules.append(_Rule(compile_glob(line.lstrip("/")), negated, dir_only, anchored))
    return rules


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "  # an escaped trailing space is kept
    return stripped


class GitIgnore:
    """The ignore rules in effect for one directory: its own plus its ancestors'."""

    __slots__ = ("_layers",)

    def __init__(self, layers: tuple[tuple[str, tuple[_Rule, ...]], ...] = ()) -> None:
        self._layers = layers  # (directory relative to the root, its rules), outermost first

    def with_file(self, base: str, text: str) -> GitIgnore:
        """These rules plus those of a ``.gitignore`` in ``base`` (relative to the root)."""
        rules = tuple(parse_gitignore(text))
        return GitIgnore((*self._layers, (base, rules))) if rules else self

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """Whether ``rel_path`` (``/``-separated, relative to the root) is ignored."""
        ignored = False
        for base, rules in self._layers:
            if base:
                if not rel_path.startswith(base + "/"):
                    continue
                subject = rel_path[len(base) + 1 :]
            else:
                subject = rel_path
            for rule in rules:
                if rule.matches(subject, is_dir):
                    ignored = not rule.negated
        return ignored
