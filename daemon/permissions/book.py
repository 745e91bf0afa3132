"""The daemon's permission rules and hooks (``PermissionBook``): config.toml's rules, the
home's ``permissions.toml`` and each session's, which of them apply to a session, keeping a
rule an answer asked for, the list ``permissions/list`` returns; and config.toml's hooks.

Read once when the daemon starts; a rule that does not check (``rules.check_rule``) is a
problem (reported at ``initialize``) and not used. Session rules live until the daemon exits.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from msgspec.structs import replace

from daemon.config.settings import Config
from daemon.permissions.always import AlwaysFile, append_rule, load_always
from daemon.permissions.hooks import load_hooks
from daemon.permissions.rules import Rule, RuleError, check_rule
from protocol.objects import ApprovalPolicy
from protocol.objects import Rule as WireRule

__all__ = ["PermissionBook"]

log = logging.getLogger("ponder.permissions")

_POLICY_DECISION = {"ask": "ask", "auto": "allow", "read_only": "deny"}


class PermissionBook:
    def __init__(self, config: Config) -> None:
        self.problems: list[str] = []
        self.config_rules: list[Rule] = []
        config_file = str(config.home / "config.toml")
        for i, raw in enumerate(config.permission_rules):
            line = config.rule_lines[i] if i < len(config.rule_lines) else None
            try:
                self.config_rules.append(check_rule(raw, source="config", file=config_file, line=line, project=None))
            except RuleError as exc:
                where = f"config.toml line {line}" if line is not None else "config.toml"
                self.problems.append(f"{where}: a [[permissions.rules]] rule ({_named(raw)}) is not used: {exc}.")
        self.always: AlwaysFile = load_always(config.home)
        self.problems.extend(self.always.problems)
        self.session_rules: dict[str, list[Rule]] = {}
        self.hooks, hook_problems = load_hooks(config.hooks)
        self.problems.extend(hook_problems)

    def rules_for(self, session_id: str, cwd: Path) -> list[Rule]:
        """Every rule in force for a session in ``cwd``: config's, ``always`` ones for its real
        cwd's project (or a parent), its own."""
        real = Path(os.path.realpath(cwd))
        always = [r for r in self.always.rules if r.in_project(real)]
        return [*self.config_rules, *always, *self.session_rules.get(session_id, [])]

    def keep(self, rule: Rule, session_id: str, cwd: Path, *, always: bool) -> tuple[Rule, str | None]:
        """Keep ``rule`` for the session, or in ``permissions.toml`` for the session's project:
        (the rule as kept, a note when it could not be saved and is kept for the session instead)."""
        if always:
            project = os.path.realpath(cwd)
            try:
                return append_rule(self.always, replace(rule, project=project)), None
            except (OSError, ValueError) as exc:
                log.warning("cannot save a rule to %s: %s", self.always.path, exc)
                note = f"the rule could not be saved to {self.always.path} ({exc}); it is kept for this session only"
                kept = replace(rule, source="session", project=None, file=None, line=None)
                self.session_rules.setdefault(session_id, []).append(kept)
                return kept, note
        kept = replace(rule, source="session", project=None, file=None, line=None)
        self.session_rules.setdefault(session_id, []).append(kept)
        return kept, None

    def listing(self, session: tuple[str, Path, ApprovalPolicy] | None) -> list[WireRule]:
        """``permissions/list``: every rule in force (for a session: those that apply to it,
        then the policy's read-only rule)."""
        if session is None:
            rules = [*self.config_rules, *self.always.rules, *(r for rs in self.session_rules.values() for r in rs)]
            return [r.to_wire() for r in rules]
        session_id, cwd, policy = session
        wire = [r.to_wire() for r in self.rules_for(session_id, cwd)]
        wire.append(WireRule(tool="*", decision=_POLICY_DECISION[policy], source="policy"))  # type: ignore[arg-type]
        return wire


def _named(raw: object) -> str:
    if not isinstance(raw, dict):
        return "not a table"
    parts = [f"tool {raw.get('tool')!r}"]
    for key in ("pattern", "path"):
        if key in raw:
            parts.append(f"{key} {raw[key]!r}")
    return ", ".join(parts)
