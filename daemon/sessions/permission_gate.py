"""Whether one tool call runs: the steps of PROTOCOL.md "Permissions", in order, and asking the
person (``permission/request``) with the rule an "always" or "session" answer keeps.

(1) a deny rule, or ``read_only`` for a mutating tool: denied; (2) ``pre_tool_use`` hooks; a
hook deny: denied; (3) an ask rule or a hook ask: asked; (4) an allow rule or a hook allow:
runs; (5) the sandbox's approval (``sandbox_approves``: ``ToolRunner`` passes whether ``run_command``
runs fully confined); (6) the policy. Asked with
nobody able to answer: denied. A hook never runs for a call a rule or ``read_only`` denied,
so it can never override one.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from daemon import agent
from daemon.conversation import Part
from daemon.jsonrpc.connection import ClientRequestError
from daemon.permissions.book import PermissionBook
from daemon.permissions.decide import CallFacts, RuleVerdict, accept_answer_rule, call_facts, judge, suggest_rule
from daemon.permissions.rules import Decision, Rule
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.hook_runner import HookRunner
from daemon.sessions.live import LiveSession
from daemon.tools import Tool
from daemon.tools.approval import denial_message, policy_decision
from protocol import events as ev
from protocol.events import PermissionSource
from protocol.methods import PermissionDecision, PermissionRequestParams, PermissionRequestResult
from protocol.objects import ProposedRule

__all__ = ["PermissionGate"]

_ALL_OPTIONS: list[PermissionDecision] = ["allow_once", "allow_session", "allow_always", "deny", "deny_always"]


class PermissionGate:
    def __init__(
        self,
        book: PermissionBook,
        bridge: ClientBridge,
        live: LiveSession,
        turn_id: str,
        hooks: HookRunner,
        sandbox_approves: Callable[[CallFacts], bool] | None = None,
        emit: agent.Emit | None = None,
    ) -> None:
        self.emit = emit  # for ``permission_resolved``
        self.book = book
        self.bridge = bridge
        self.live = live
        self.turn_id = turn_id
        self.hooks = hooks
        self.sandbox_approves = sandbox_approves  # step 5, for the sandbox to fill in

    async def decide(self, call: Part, tool: Tool[Any], title: str) -> agent.Approval:
        name = call.name or ""
        arguments = call.arguments or {}
        row = self.live.row
        cwd = Path(row.cwd)
        facts = call_facts(name, arguments, cwd)
        verdict = judge(self.book.rules_for(row.id, cwd), facts)
        # (1)
        if verdict.decision == "deny":
            assert verdict.rule is not None
            return _deny("rule", _rule_denial(name, verdict), verdict.rule, verdict.note)
        policy = policy_decision(row.approval_policy, tool.mutating)
        if policy == "deny":
            return _deny("policy", denial_message(row.approval_policy, name, "read_only"), note=verdict.note)
        # (2)
        hook = await self.hooks.run(
            "pre_tool_use", {"tool_name": name, "tool_input": arguments, "call_id": call.call_id}, tool_name=name
        )
        if hook.decision == "deny":
            return _deny("hook", f"{name} was not run: {hook.reason}")
        # (3)
        if verdict.decision == "ask":
            assert verdict.rule is not None
            return await self._ask(call, facts, title, "rule", f"a rule asks ({verdict.rule.describe()})", verdict.rule)
        if hook.decision == "ask":
            return await self._ask(call, facts, title, "hook", hook.reason, None)
        # (4)
        if verdict.decision == "allow":
            return _allow("rule", verdict.rule, verdict.note)
        if hook.decision == "allow":
            return _allow("hook", None, hook.reason or None)
        # (5)
        if self.sandbox_approves is not None and row.approval_policy == "ask" and self.sandbox_approves(facts):
            return _allow("sandbox", None, verdict.note)
        # (6)
        if policy == "run":
            return _allow("policy", None, verdict.note)
        return await self._ask(call, facts, title, "policy", verdict.note, None)

    async def _ask(
        self, call: Part, facts: CallFacts, title: str, source: PermissionSource, reason: str | None, rule: Rule | None
    ) -> agent.Approval:
        name = call.name or ""
        policy = self.live.row.approval_policy
        if not self.bridge.can_ask:
            return _deny(source, denial_message(policy, name, "cannot_ask"), rule)
        suggested = suggest_rule(facts, "allow")
        params = PermissionRequestParams(
            session_id=self.live.row.id,
            turn_id=self.turn_id,
            call_id=call.call_id or "",
            tool=name,
            arguments=call.arguments or {},
            title=title,
            options=_ALL_OPTIONS if suggested is not None else ["allow_once", "deny"],
            suggested_rule=_proposed(suggested) if suggested is not None else None,
            reason=reason,
        )
        answer = await ask_and_tell(self.bridge, params, self.emit)
        if answer is None:
            return _deny(source, denial_message(policy, name, "cannot_ask"), rule)
        decision = answer.decision
        allowing = decision.startswith("allow")
        if decision in ("allow_once", "deny"):
            if allowing:
                return _allow("user", None, None)
            return _deny("user", denial_message(policy, name, "user_denied"))
        kept, note = self._keep(answer.rule, facts, "allow" if allowing else "deny", always=decision != "allow_session")
        if allowing:
            return _allow("user", kept, note)
        return _deny("user", denial_message(policy, name, "user_denied"), kept, note)

    def _keep(
        self, raw: dict[str, Any] | None, facts: CallFacts, decision: Decision, *, always: bool
    ) -> tuple[Rule | None, str | None]:
        """The rule an answer keeps (its own, checked, else the suggestion), and a note for what was not kept."""
        if raw is not None:
            accepted = accept_answer_rule(raw, facts, decision)
            if isinstance(accepted, str):
                return None, accepted + "; the answer counts for this call only"
            rule = accepted
        else:
            suggested = suggest_rule(facts, decision)
            if suggested is None:
                return None, "no rule could be made from this call; the answer counts for this call only"
            rule = suggested
        return self.book.keep(rule, self.live.row.id, Path(self.live.row.cwd), always=always)


async def ask_and_tell(
    bridge: ClientBridge, params: PermissionRequestParams, emit: agent.Emit | None
) -> PermissionRequestResult | None:
    """Ask the clients; every subscriber then hears how it was decided (``permission_resolved``:
    by whom, or by the daemon when nobody answered or the turn was cancelled). None: nobody
    could answer (the caller denies)."""
    try:
        answer = await bridge.ask_permission(params)
    except ClientRequestError:
        await _tell(emit, params.call_id, "deny", None)
        return None
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await _tell(emit, params.call_id, "deny", None)
        raise
    await _tell(emit, params.call_id, answer.result.decision, answer.resolved_by)
    return answer.result


async def _tell(emit: agent.Emit | None, call_id: str, decision: str, resolved_by: ev.ResolvedBy | None) -> None:
    if emit is not None:
        await emit(ev.PermissionResolved, {"call_id": call_id, "decision": decision, "resolved_by": resolved_by})


def _proposed(rule: Rule) -> ProposedRule:
    wire = rule.to_wire()
    return ProposedRule(tool=wire.tool, decision=wire.decision, pattern=wire.pattern, path=wire.path)


def _allow(source: PermissionSource, rule: Rule | None, note: str | None) -> agent.Approval:
    permission = ev.Permission(
        decision="allow",
        source=source,
        rule=rule.to_wire() if rule is not None else None,
        note=note,
    )
    return agent.Approval(True, "", permission)


def _deny(source: PermissionSource, message: str, rule: Rule | None = None, note: str | None = None) -> agent.Approval:
    permission = ev.Permission(
        decision="deny",
        source=source,
        rule=rule.to_wire() if rule is not None else None,
        note=note,
    )
    return agent.Approval(False, message, permission)


def _rule_denial(name: str, verdict: RuleVerdict) -> str:
    rule = verdict.rule
    assert rule is not None
    where = f" ({rule.file} line {rule.line})" if rule.file else f" ({rule.source} rule)"
    why = f": {rule.justification}" if rule.justification else ""
    extra = f"; {verdict.note}" if verdict.note else ""
    return (
        f"{name} was not run: a permission rule denies it ({rule.describe()}){where}{why}{extra}. "
        "Do not try to get around it with another command; ask the user if it is needed."
    )
