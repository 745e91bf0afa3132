"""Running a turn's tool calls: approval (policy, asking the person, tools allowed for the
session, an enforced sandbox standing in for ``ask`` on ``run_command``) and execution with
credentials masked in everything a tool prints; a command the sandbox stopped is offered,
under ``ask``, to run once unconfined (PROTOCOL.md "Sandbox")."""

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from daemon.agent import ToolOutcome, Turn
from daemon.config.settings import Config
from daemon.conversation import Part
from daemon.jsonrpc.connection import ClientRequestError
from daemon.sandbox.command import CommandSandbox
from daemon.sandbox.service import Sandbox
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.live import LiveSession
from daemon.tools import Tool, ToolError, execute_tool, parse_arguments, tool_specs
from daemon.tools.approval import decide, denial_message
from daemon.tools.base import ToolContext
from daemon.tools.source import ToolSource
from daemon.util.redact import SecretMask
from daemon.util.redact import known as known_secrets
from protocol.methods import PermissionRequestParams

# The one tool the OS sandbox confines (file tools are confined by their own path checks).
SANDBOXED_TOOL = "run_command"


class ToolRunner:
    """The tools of one turn: the built-in ones, plus the tool sources' once ``prepare`` ran."""

    def __init__(
        self,
        config: Config,
        bridge: ClientBridge,
        live: LiveSession,
        turn_id: str,
        tools: dict[str, Tool[Any]],
        sources: list[ToolSource],
        offer_tools: bool,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.config = config
        self.sandbox = sandbox
        self.bridge = bridge
        self.live = live
        self.turn_id = turn_id
        self.tools = dict(tools)
        self.sources = sources
        self.offer_tools = offer_tools  # the model supports tools
        self.cwd = Path(live.row.cwd)

    async def prepare(self, turn: Turn) -> None:
        """Add the tool sources' tools (MCP servers), as they are for this session now, and
        offer the model every tool (``Turn.prepare``: runs inside the turn, after ``turn_start``)."""
        for source in self.sources:
            self.tools.update(await source.tools_for(self.live.row))
        turn.tools = tool_specs(self.tools) if self.offer_tools else []

    async def approve(self, call: Part) -> tuple[bool, str]:
        """(allowed, the message the model gets when not) for one tool call."""
        name = call.name or ""
        tool = self.tools.get(name)
        if tool is None:
            return True, ""  # unknown tools fail in execute_tool with a message the model can use
        live = self.live
        policy = live.row.approval_policy
        # Step 5 of "Permissions": under ask, a command the sandbox confines fully runs unasked.
        # (Rules, the permissions issue's steps 1-4, come before this once they exist.)
        if name == SANDBOXED_TOOL and policy == "ask" and self._sandbox_approves():
            return True, ""
        verdict = decide(policy, tool.mutating, name, live.allowed_tools, self.bridge.can_ask)
        if verdict == "run":
            return True, ""
        if verdict == "deny":
            return False, denial_message(policy, name)
        try:
            title = tool.summary(parse_arguments(tool, call.arguments or {}))
        except ToolError:
            return True, ""  # invalid arguments: execute_tool reports them without running anything
        params = PermissionRequestParams(
            session_id=live.row.id,
            turn_id=self.turn_id,
            call_id=call.call_id or "",
            tool=name,
            arguments=call.arguments or {},
            title=title,
            options=["allow_once", "allow_session", "deny"],
        )
        try:
            decision = await self.bridge.ask_permission(params)
        except ClientRequestError:
            return False, denial_message(policy, name, "cannot_ask")
        if decision == "allow_session":
            live.allowed_tools.add(name)
        if decision == "deny":
            return False, denial_message(policy, name, "user_denied")
        return True, ""

    def _hidden(self) -> tuple[Path, ...]:
        """The ponder home, which file tools never touch (unless the session works inside it)."""
        home, cwd = Path(os.path.realpath(self.config.home)), Path(os.path.realpath(self.cwd))
        return () if cwd == home or cwd.is_relative_to(home) else (home,)

    def _read_only(self) -> tuple[Path, ...]:
        """The cwd's .git while the session's sandbox is on (file tools must not get round it)."""
        if self.sandbox is None or self.sandbox.confinement(self.live.row.id, self.cwd).mode == "off":
            return ()
        return (Path(os.path.realpath(self.cwd / ".git")),)

    def _sandbox_approves(self) -> bool:
        return self.sandbox is not None and self.sandbox.approves(self.live.row.id, self.cwd)

    async def run(
        self, call_id: str, name: str, arguments: dict[str, Any], output: Callable[[str], Awaitable[None]] | None
    ) -> ToolOutcome:
        """The outcome of one call; ``output`` gets what the tool prints as it runs."""
        sandbox = None
        if name == SANDBOXED_TOOL and self.sandbox is not None:
            sandbox = self.sandbox.for_command(self.live.row.id, self.cwd)
        outcome = await self._run(name, arguments, output, sandbox)
        if sandbox is not None and outcome.sandbox is not None and outcome.sandbox.denied:
            if await self._allowed_unconfined(call_id, arguments):
                outcome = await self._run(name, arguments, output, sandbox.unconfined())
        return outcome

    async def _allowed_unconfined(self, call_id: str, arguments: dict[str, Any]) -> bool:
        """Under ``ask``, whether the person lets a command the sandbox stopped run once unconfined."""
        if self.live.row.approval_policy != "ask" or not self.bridge.can_ask:
            return False  # auto runs nothing again; with nobody to ask the sandboxed result stands
        command = arguments.get("command")
        params = PermissionRequestParams(
            session_id=self.live.row.id,
            turn_id=self.turn_id,
            call_id=call_id,
            tool=SANDBOXED_TOOL,
            arguments=arguments,
            title=f"The sandbox stopped it; run once outside the sandbox: {command}",
            options=["allow_once", "deny"],
            reason="sandbox",
        )
        try:
            return await self.bridge.ask_permission(params) == "allow_once"
        except ClientRequestError:
            return False

    async def _run(
        self,
        name: str,
        arguments: dict[str, Any],
        output: Callable[[str], Awaitable[None]] | None,
        sandbox: CommandSandbox | None,
    ) -> ToolOutcome:
        # Files may hold keys (``.env``) and MCP servers may echo theirs: what a tool prints
        # reaches events, the store and the model, so credentials are masked on the way
        # out. Known now, not at turn start: a short-lived provider token may be new since.
        secrets = known_secrets()  # each ``Secret``, MCP ``env`` values
        mask = SecretMask(secrets)

        async def masked_output(chunk: str) -> None:
            if output is not None and (text := mask.feed(chunk)):
                await output(text)

        context = ToolContext(
            cwd=self.cwd,
            emit_output=masked_output if output is not None else None,
            secrets=secrets,
            pass_env=self.config.pass_env,
            hidden=self._hidden(),
            read_only=self._read_only(),
            sandbox=sandbox,
        )
        result = await execute_tool(self.tools, name, arguments, context)
        if (rest := mask.flush()) and output is not None:
            await output(rest)
        report = result.sandbox
        if report is None and sandbox is not None:  # refused or failed before it ran: still say how
            report = sandbox.report(None, "")
        return ToolOutcome(mask.scrub(result.text), result.is_error, report)
