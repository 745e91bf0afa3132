"""What the rules say about one tool call, strictest first (deny > ask > allow), the rule a
permission request suggests keeping, and the check of a rule a client sends back.

``judge`` sees the rules already chosen for the session (config, ``permissions.toml`` for its
project, its own); it knows nothing of policies or hooks (``daemon.sessions.permission_gate``
puts the steps together).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from daemon.permissions.rules import FILE_TOOLS, Decision, Rule, RuleError, check_rule
from daemon.tools.base import ToolError
from daemon.tools.paths import resolve_in_cwd

if TYPE_CHECKING:  # the shell parser (~2 M instructions) loads with the first run_command call
    from daemon.permissions.shell import CommandLine

__all__ = ["CallFacts", "RuleVerdict", "accept_answer_rule", "call_facts", "judge", "suggest_rule"]


class RuleVerdict(msgspec.Struct, frozen=True):
    decision: Decision | None  # None: no rule decides the call
    rule: Rule | None = None
    note: str | None = None  # why no rule could allow it, or why an unparsed line was denied


class CallFacts(msgspec.Struct, frozen=True):
    """What rules look at in a call: its tool, its command line or its real relative path."""

    tool: str
    line: CommandLine | None = None  # run_command
    path: str | None = None  # file tools: the real path relative to the real cwd; None outside it


def call_facts(tool: str, arguments: dict[str, Any], cwd: Path) -> CallFacts:
    if tool == "run_command":
        from daemon.permissions.shell import parse_command_line  # see the imports

        command = arguments.get("command")
        return CallFacts(tool, line=parse_command_line(command if isinstance(command, str) else "", cwd))
    if tool in FILE_TOOLS:
        raw = arguments.get("path", ".")
        return CallFacts(tool, path=_relative_real_path(cwd, raw) if isinstance(raw, str) else None)
    return CallFacts(tool)


def _relative_real_path(cwd: Path, path: str) -> str | None:
    """Through the file tools' own confinement (``resolve_in_cwd``): ``..`` and symlinks resolved."""
    try:
        real = resolve_in_cwd(cwd, path)
        root = resolve_in_cwd(cwd, ".")
    except ToolError:
        return None  # outside the cwd: the tool refuses it anyway; only rules without a path match
    return "." if real == root else real.relative_to(root).as_posix()


def _matches(rule: Rule, facts: CallFacts) -> bool:
    """Whether a deny or ask rule applies to the call."""
    if not rule.covers_tool(facts.tool):
        return False
    if facts.line is not None:
        return rule.pattern is None or any(rule.matches_command(c, exact=False) for c in facts.line.commands)
    if facts.tool in FILE_TOOLS:
        return rule.matches_path(facts.path)
    return rule.pattern is None and rule.path is None


def judge(rules: list[Rule], facts: CallFacts) -> RuleVerdict:
    """The strictest decision of the rules that match the call."""
    applicable = [r for r in rules if r.covers_tool(facts.tool)]
    decision: Decision
    for decision in ("deny", "ask"):
        hit = next((r for r in applicable if r.decision == decision and _matches(r, facts)), None)
        if hit is not None:
            return RuleVerdict(decision, hit)
    line = facts.line
    if line is not None and not line.parsed:
        deny = next((r for r in applicable if r.decision == "deny"), None)
        if deny is not None:
            return RuleVerdict("deny", deny, "the command line does not parse, and deny rules exist for run_command")
    allows = [r for r in applicable if r.decision == "allow"]
    if not allows:
        return RuleVerdict(None)
    if line is None:
        hit = next((r for r in allows if _allow_matches(r, facts)), None)
        return RuleVerdict("allow", hit) if hit is not None else RuleVerdict(None)
    needed = [c for c in line.commands if not c.guessed]
    covering = [next((r for r in allows if r.matches_command(c, exact=True)), None) for c in needed]
    if not needed or any(r is None for r in covering):
        return RuleVerdict(None)
    if (why := line.not_allowable) is not None:
        return RuleVerdict(None, note=f"allow rules match every command, but no rule can allow this line: {why}")
    return RuleVerdict("allow", covering[0])


def _allow_matches(rule: Rule, facts: CallFacts) -> bool:
    if facts.tool in FILE_TOOLS:
        return rule.matches_path(facts.path)
    return rule.pattern is None and rule.path is None


# --- the rule a request suggests, and the one an answer brings back ---------------------------

_GLOB_CHARS = re.compile(r"([*?\[])")


def suggest_rule(facts: CallFacts, decision: Decision) -> Rule | None:
    """For run_command the words of the first command (wrappers removed), never the whole
    line; for a file tool its real relative path; else the tool. None when nothing safe can
    be suggested (the first command's name is known only when it runs; a path outside the cwd)."""
    if facts.line is not None:
        first = facts.line.first
        if first is None:
            return None
        known: list[str] = []
        for word in first.words:
            if word is None:
                break
            known.append(word)
        return Rule(tool=facts.tool, decision=decision, pattern=tuple(known), source="session") if known else None
    if facts.tool in FILE_TOOLS:
        if facts.path is None:
            return None
        # A file named "a*b" must not become a glob that matches more than it.
        return Rule(tool=facts.tool, decision=decision, path=_GLOB_CHARS.sub(r"[\1]", facts.path), source="session")
    return Rule(tool=facts.tool, decision=decision, source="session")


def accept_answer_rule(raw: Any, facts: CallFacts, decision: Decision) -> Rule | str:
    """The rule an answer edited, or why it is not kept: it must check like a config rule,
    name a tool (not ``*``), carry the answer's decision and match the call it answers."""
    try:
        rule = check_rule(raw, source="session", file=None, line=None, project=None)
    except RuleError as exc:
        return f"the answer's rule is not kept: {exc}"
    if rule.tool == "*":
        return "the answer's rule is not kept: it must name a tool, not *"
    if rule.decision != decision:
        return f"the answer's rule is not kept: its decision is {rule.decision}, the answer's {decision}"
    if not rule.covers_tool(facts.tool) or not _rule_matches_call(rule, facts):
        return "the answer's rule is not kept: it does not match the call it answers"
    return rule


def _rule_matches_call(rule: Rule, facts: CallFacts) -> bool:
    if facts.line is not None:
        exact = rule.decision == "allow"
        return rule.pattern is None or any(
            rule.matches_command(c, exact=exact) for c in facts.line.commands if not c.guessed
        )
    if facts.tool in FILE_TOOLS:
        return rule.matches_path(facts.path)
    return True
