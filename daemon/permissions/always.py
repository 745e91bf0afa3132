"""``permissions.toml`` in the home: the rules "always" answers keep, one ``[[rules]]`` table
each, with the ``project`` (a real directory) it applies in and below.

Written by appending one table at a time (owner-only, under an advisory lock, one ``write``),
so comments and hand edits stay, and two daemons on one home never interleave a rule. A
file that does not parse is reported and never appended to: a rule written after a syntax
error would not be read either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
from msgspec.structs import replace

from daemon.config.home import open_private
from daemon.config.settings import table_lines
from daemon.permissions.rules import Rule, RuleError, check_rule

__all__ = ["AlwaysFile", "load_always"]

FILE_NAME = "permissions.toml"
_HEADER = '# Rules kept by ponder\'s "always" answers (allow_always, deny_always); edit freely.\n'


# A Struct, not a dataclass: a session/start reads this file, and a dataclass compiles its
# generated methods at import (tests/server/test_start_path.py).
class AlwaysFile(msgspec.Struct):
    """What the file held when read."""

    path: Path
    rules: list[Rule] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    writable: bool = True  # False when the file does not parse: nothing is appended to it


def load_always(home: Path) -> AlwaysFile:
    path = home / FILE_NAME
    found = AlwaysFile(path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return found
    except (OSError, ValueError) as exc:
        found.problems.append(f"{path}: cannot be read ({exc}); its rules are not used and none is added to it.")
        found.writable = False
        return found
    import tomllib

    try:
        raw = tomllib.loads(text)
    except ValueError as exc:
        found.problems.append(
            f'{path}: {exc}; its rules are not used, and "always" answers are kept for the session only until '
            "it is fixed."
        )
        found.writable = False
        return found
    tables = raw.get("rules", [])
    if not isinstance(tables, list):
        found.problems.append(f"{path}: rules must be an array of tables ([[rules]]); none is used.")
        return found
    lines = table_lines(text, "rules")
    for i, table in enumerate(tables):
        line = lines[i] if i < len(lines) else None
        project = table.get("project") if isinstance(table, dict) else None
        try:
            if not isinstance(project, str) or not os.path.isabs(project):
                raise RuleError("it has no project (the absolute directory it applies in)")
            found.rules.append(check_rule(table, source="always", file=str(path), line=line, project=project))
        except RuleError as exc:
            found.problems.append(f"{path} line {line}: a rule ({_named(table)}) is not used: {exc}.")
    return found


def append_rule(found: AlwaysFile, rule: Rule) -> Rule:
    """Append ``rule`` (with its ``project``) to the file; the rule as kept, with file and line.

    Raises ``OSError`` when the file cannot be written, ``ValueError`` when the rule cannot be
    written as TOML that reads back the same (a name that is not text).
    """
    if not found.writable:
        raise OSError(f"{found.path} does not parse")
    block = _toml_block(rule)
    import fcntl
    import tomllib

    if tomllib.loads(block)["rules"][0] != _table(rule):  # what is read back is what was meant
        raise ValueError("the rule does not survive being written as TOML")
    fd = open_private(found.path, os.O_RDWR | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        prefix = _HEADER if size == 0 else ""
        if size:
            os.lseek(fd, size - 1, os.SEEK_SET)
            if os.read(fd, 1) != b"\n":
                prefix = "\n"
        # The new header's line: after every line so far, the prefix's and one blank line.
        os.lseek(fd, 0, os.SEEK_SET)
        header_line = _count_lines(fd) + prefix.count("\n") + 2
        data = (prefix + "\n" + block).encode("utf-8")
        if os.write(fd, data) != len(data):
            raise OSError("short write")
        os.fsync(fd)
    finally:
        os.close(fd)
    kept = replace(rule, source="always", file=str(found.path), line=header_line)
    found.rules.append(kept)
    return kept


def _count_lines(fd: int) -> int:
    count = 0
    while chunk := os.read(fd, 65536):
        count += chunk.count(b"\n")
    return count


def _table(rule: Rule) -> dict[str, object]:
    table: dict[str, object] = {"project": rule.project, "tool": rule.tool, "decision": rule.decision}
    if rule.pattern is not None:
        table["pattern"] = [list(w) if isinstance(w, tuple) else w for w in rule.pattern]
    if rule.path is not None:
        table["path"] = rule.path
    if rule.justification is not None:
        table["justification"] = rule.justification
    return table


def _toml_block(rule: Rule) -> str:
    lines = ["[[rules]]"]
    for key, value in _table(rule).items():
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # A JSON string is a TOML basic string once DEL is escaped too (JSON leaves it raw).
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _named(table: object) -> str:
    if not isinstance(table, dict):
        return "not a table"
    parts = [f"tool {table.get('tool')!r}"]
    for key in ("pattern", "path"):
        if key in table:
            parts.append(f"{key} {table[key]!r}")
    return ", ".join(parts)
