"""Permission rules: what one rule says, whether it matches a call, and checking one as read
from a file (its shape, its tool, its ``match``/``not_match`` examples).

A rule names a ``tool`` (a built-in tool, ``mcp__S__T``, ``mcp__S__*`` or ``*``) and a
``decision`` (``allow | ask | deny``, no default). ``pattern`` (``run_command`` only) is a
command prefix as a list of words, where a word may be a list of alternatives; ``path``
(file tools only) is a glob relative to the ``cwd`` (``**`` spans directories) matched
against the call's real path. A deny or ask rule matches a command line when it matches any
of its commands (a command word that is a path matches by its basename; a word known only
when the line runs matches anything); an allow rule, only when it matches every command
exactly. Whether the line may be allowed at all is the line's business
(``shell.CommandLine.not_allowable``); ``decide`` puts the two together.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from protocol.objects import Rule as WireRule

if TYPE_CHECKING:  # the shell parser (~2 M instructions) loads with the first command line parsed
    from daemon.permissions.shell import Command, CommandLine

__all__ = [
    "BUILTIN_TOOLS",
    "FILE_TOOLS",
    "STRICTNESS",
    "Decision",
    "PatternWord",
    "Rule",
    "RuleError",
    "RuleSource",
    "check_rule",
    "glob_regex",
]

Decision = Literal["allow", "ask", "deny"]
RuleSource = Literal["config", "always", "session", "policy"]
PatternWord = str | tuple[str, ...]
STRICTNESS: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}

# The built-in tools by name (the tools themselves load only at the first turn; a test
# checks this list against ``daemon.tools.builtin_tools``). File tools take a ``path``.
FILE_TOOLS = ("read_file", "list_files", "search", "write_file", "edit_file")
BUILTIN_TOOLS = (*FILE_TOOLS, "run_command")
_MCP_TOOL = re.compile(r"^mcp__[A-Za-z0-9_-]+__(\*|[A-Za-z0-9_.-]+)$")
_KEYS = {"tool", "decision", "pattern", "path", "justification", "match", "not_match"}
EXAMPLE_CWD = Path("/ponder-rule-example")  # the cwd an example line is judged in


class RuleError(Exception):
    """A rule that cannot be used, and why (one clause)."""


class Rule(msgspec.Struct, frozen=True):
    tool: str
    decision: Decision
    pattern: tuple[PatternWord, ...] | None = None
    path: str | None = None
    justification: str | None = None
    source: RuleSource = "config"
    project: str | None = None  # the real directory an ``always`` rule applies in (and below)
    file: str | None = None
    line: int | None = None

    # --- where it applies ---------------------------------------------------------------

    def covers_tool(self, name: str) -> bool:
        if self.tool == "*" or self.tool == name:
            return True
        return self.tool.endswith("__*") and name.startswith(self.tool[:-1])

    def in_project(self, real_cwd: Path) -> bool:
        if self.project is None:
            return True
        root = Path(self.project)
        return real_cwd == root or real_cwd.is_relative_to(root)

    # --- what it matches ----------------------------------------------------------------

    def matches_command(self, command: Command, *, exact: bool) -> bool:
        """Whether ``command`` starts with the pattern. ``exact`` (allow rules): every word
        known and equal; else a path matches by its basename and an unknown word matches."""
        if self.pattern is None:
            return True
        if len(command.words) < len(self.pattern):
            return False
        for i, (want, word) in enumerate(zip(self.pattern, command.words, strict=False)):
            if word is None:
                if exact:
                    return False
                continue
            if i == 0 and not exact:
                word = os.path.basename(word) or word
            if word != want if isinstance(want, str) else word not in want:
                return False
        return True

    def matches_line(self, line: CommandLine) -> bool:
        """Whether this rule, alone, decides ``line``: any command for deny and ask, every
        command (and a line a rule may allow) for allow."""
        if self.decision != "allow":
            return self.pattern is None or any(self.matches_command(c, exact=False) for c in line.commands)
        if line.not_allowable is not None:
            return False
        needed = [c for c in line.commands if not c.guessed]
        return bool(needed) and all(self.matches_command(c, exact=True) for c in needed)

    def matches_path(self, relative: str | None) -> bool:
        """``relative``: the call's real path relative to the real cwd (None: outside it or
        unresolvable, which only a rule without ``path`` matches)."""
        if self.path is None:
            return True
        return relative is not None and glob_regex(self.path).fullmatch(relative) is not None

    def to_wire(self) -> WireRule:
        return WireRule(
            tool=self.tool,
            decision=self.decision,
            pattern=[list(w) if isinstance(w, tuple) else w for w in self.pattern] if self.pattern else None,
            path=self.path,
            justification=self.justification,
            source=self.source,
            project=self.project,
            file=self.file,
            line=self.line,
        )

    def describe(self) -> str:
        """How a problem or a note names the rule."""
        what = f"tool {self.tool}"
        if self.pattern is not None:
            what += f", pattern {_show_pattern(self.pattern)}"
        if self.path is not None:
            what += f", path {self.path!r}"
        return what


def _show_pattern(pattern: tuple[PatternWord, ...]) -> str:
    return "[" + ", ".join(repr(w) if isinstance(w, str) else repr(list(w)) for w in pattern) + "]"


def glob_regex(glob: str) -> re.Pattern[str]:
    """A path glob as a regex: ``**`` any number of directories, ``*``/``?``/``[…]`` within one."""
    out = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.endswith("/**") and i == len(glob) - 3:
            out.append("(?:/.*)?")  # "dir/**": the directory and everything below it
            break
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        end = glob.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif end != -1:
            out.append(fnmatch.translate(glob[i : end + 1])[4:-3])  # fnmatch's class, without (?s:…)\Z
            i = end + 1
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out), re.DOTALL)


# --- checking a rule as read from a file ------------------------------------------------------


def check_rule(raw: Any, *, source: RuleSource, file: str | None, line: int | None, project: str | None) -> Rule:
    """A usable rule from one table of a file, or ``RuleError`` saying what is wrong."""
    if not isinstance(raw, dict):
        raise RuleError("a rule must be a table with tool and decision")
    unknown = sorted(set(raw) - _KEYS - ({"project"} if source == "always" else set()))
    if unknown:
        raise RuleError(f"unknown key {unknown[0]!r} (a rule takes {', '.join(sorted(_KEYS))})")
    tool = raw.get("tool")
    if not isinstance(tool, str) or not tool:
        raise RuleError("it has no tool (a tool name, mcp__SERVER__TOOL, mcp__SERVER__* or *)")
    if tool not in BUILTIN_TOOLS and tool != "*" and not _MCP_TOOL.match(tool):
        raise RuleError(f"unknown tool {tool!r} (one of {', '.join(BUILTIN_TOOLS)}, mcp__SERVER__TOOL or *)")
    decision = raw.get("decision")
    if decision not in STRICTNESS:
        raise RuleError(f"decision must be allow, ask or deny, not {decision!r} (there is no default)")
    pattern = _check_pattern(raw["pattern"]) if "pattern" in raw else None
    path = _check_path(raw["path"]) if "path" in raw else None
    if pattern is not None and tool != "run_command":
        raise RuleError("a pattern applies to run_command only")
    if path is not None and tool not in FILE_TOOLS:
        raise RuleError(f"a path applies to file tools only ({', '.join(FILE_TOOLS)})")
    justification = raw.get("justification")
    if justification is not None and not isinstance(justification, str):
        raise RuleError("justification must be a string")
    rule = Rule(
        tool=tool,
        decision=decision,
        pattern=pattern,
        path=path,
        justification=justification,
        source=source,
        project=project,
        file=file,
        line=line,
    )
    _check_examples(rule, raw.get("match", []), raw.get("not_match", []))
    return rule


def _check_pattern(raw: Any) -> tuple[PatternWord, ...]:
    if not isinstance(raw, list) or not raw:
        raise RuleError("pattern must be a non-empty list of words (leave it out to match every command)")
    words: list[PatternWord] = []
    for word in raw:
        if isinstance(word, str) and word:
            words.append(word)
        elif isinstance(word, list) and word and all(isinstance(w, str) and w for w in word):
            words.append(tuple(word))
        else:
            raise RuleError(f"pattern word {word!r} is neither a word nor a non-empty list of alternative words")
    return tuple(words)


def _check_path(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise RuleError("path must be a non-empty glob relative to the working directory")
    if raw.startswith("/") or raw.startswith("~"):
        raise RuleError(f"path {raw!r} can never match: paths are matched relative to the working directory")
    if ".." in Path(raw).parts:
        raise RuleError(f"path {raw!r} can never match: real paths inside the working directory have no '..'")
    try:
        glob_regex(raw)
    except re.error as exc:
        raise RuleError(f"path {raw!r} is not a glob ({exc})") from None
    return raw.rstrip("/") or raw


def _check_examples(rule: Rule, match: Any, not_match: Any) -> None:
    for name, examples in (("match", match), ("not_match", not_match)):
        if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
            raise RuleError(f"{name} must be a list of strings")
    if (match or not_match) and rule.pattern is None and rule.path is None:
        raise RuleError("match and not_match examples need a pattern or a path to test")
    for expected, examples in ((True, match), (False, not_match)):
        for example in examples:
            if example_matches(rule, example) != expected:
                verb = "does not match" if expected else "matches"
                raise RuleError(f"its {'match' if expected else 'not_match'} example {example!r} {verb} the rule")


def example_matches(rule: Rule, example: str) -> bool:
    """Whether ``rule`` alone decides the command line (or relative path) ``example``."""
    if rule.path is not None:
        return rule.matches_path(example.strip("/"))
    from daemon.permissions.shell import parse_command_line  # see the imports

    return rule.matches_line(parse_command_line(example, EXAMPLE_CWD))
