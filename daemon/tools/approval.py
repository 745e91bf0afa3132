"""The approval policy, as pure functions: what a session's policy does with a tool call no
rule or hook decided, and the tool error a denied call gets.

Per PROTOCOL "Approval policies": ``ask`` runs read-only tools and asks the client for
mutating ones (denied when the client cannot be asked); ``auto`` runs everything;
``read_only`` always denies mutating tools, whatever a rule or hook allows. The rules and
hooks that come first are ``daemon.permissions`` and ``daemon.sessions.permission_gate``.

An MCP tool is read-only only when its server says so (``readOnlyHint``) and config.toml
marks the server ``trusted`` (``daemon.mcp.tools``); a denial under ``read_only`` says so.
"""

from __future__ import annotations

from typing import Literal

from daemon.tools.base import MCP_TOOL_PREFIX
from protocol.objects import ApprovalPolicy

__all__ = ["Decision", "DenialReason", "denial_message", "policy_decision"]

Decision = Literal["run", "ask", "deny"]
# read_only: the policy forbids it; cannot_ask: 'ask' with a client that cannot answer;
# user_denied: the person answered deny (or the request was withdrawn).
DenialReason = Literal["read_only", "cannot_ask", "user_denied"]


def policy_decision(policy: ApprovalPolicy, tool_mutating: bool) -> Decision:
    """What the policy alone does with a call (whether the client can be asked is the asker's business)."""
    if not tool_mutating or policy == "auto":
        return "run"
    if policy == "ask":
        return "ask"
    # read_only, and any policy this code does not know: fail closed.
    return "deny"


def denial_message(policy: ApprovalPolicy, tool_name: str, reason: str | None = None) -> str:
    """The tool error for a denied call: why, and how a person could allow it.

    ``reason`` is a ``DenialReason``; None derives it from ``policy`` (what ``decide``
    denied for). Any other text is taken as the reason, verbatim.
    """
    if reason is None:
        reason = "cannot_ask" if policy == "ask" else "read_only"
    if reason == "read_only" and tool_name.startswith(MCP_TOOL_PREFIX):
        return (
            f"{tool_name} was not run: the session's approval policy is {policy!r}, which runs an MCP tool only when "
            "its server declares it read-only (readOnlyHint) and config.toml marks that server trusted "
            "(trusted = true in its [mcp_servers.NAME] table); a server's own claim is not enough. Continue with "
            "the read-only tools, or ask the user to trust the server or switch the session to approval_policy "
            "'ask' or 'auto'."
        )
    if reason == "read_only":
        return (
            f"{tool_name} was not run: the session's approval policy is {policy!r}, which never runs tools "
            "that change files or run commands. Continue with the read-only tools, or ask the user to "
            "switch the session to approval_policy 'ask' or 'auto'."
        )
    if reason == "cannot_ask":
        return (
            f"{tool_name} was not run: the session's approval policy is {policy!r} and this client cannot "
            "answer permission requests. To allow it, start the session with approval_policy 'auto' or "
            "use a client that answers permission requests."
        )
    if reason == "user_denied":
        return (
            f"{tool_name} was not run: the user denied permission. Do not retry the same call; "
            "ask the user how they want to proceed."
        )
    return f"{tool_name} was not run: {reason}"
