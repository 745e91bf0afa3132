"""Running a turn's tool calls: approval (``permission_gate``: rules, hooks, an enforced sandbox
standing in for ``ask`` on ``run_command``, the policy, asking the person), execution with
credentials masked in everything a tool prints (``run_command`` in the OS sandbox; a command the
sandbox stopped is offered, under ``ask``, to run once unconfined: PROTOCOL.md "Sandbox"), and
the turn's hooks (``user_prompt_submit`` when it starts, ``post_tool_use`` after each call)."""

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon import agent
from daemon.agent import ToolOutcome, Turn
from daemon.config.settings import Config
from daemon.conversation import Part
from daemon.errors import HookDenied
from daemon.permissions.book import PermissionBook
from daemon.permissions.decide import CallFacts
from daemon.sandbox.confinement import Override
from daemon.sandbox.service import Sandbox
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.hook_runner import HookRunner
from daemon.sessions.live import LiveSession
from daemon.sessions.permission_gate import PermissionGate, ask_and_tell
from daemon.sessions.prompt_content import tool_images
from daemon.store import SessionRow
from daemon.tools import Tool, ToolError, execute_tool, parse_arguments, tool_specs
from daemon.tools.base import ToolContext
from daemon.tools.source import ToolSource
from daemon.tools.update_plan import PlanKeeper
from daemon.util.redact import SecretMask
from daemon.util.redact import known as known_secrets
from protocol import events as ev
from protocol.methods import PermissionRequestParams

# Loaded with the first run_command (``Sandbox.for_command``): the mechanisms' command lines
# and the denial guess, which a session that runs no command never needs.
if TYPE_CHECKING:
    from daemon.sandbox.command import CommandSandbox

# The one tool the OS sandbox confines (file tools are confined by their own path checks).
SANDBOXED_TOOL = "run_command"


def sandbox_override(row: SessionRow) -> Override:
    """The sandbox settings a session asked for (stored with it); None parts follow config.toml."""
    return Override.stored(row.sandbox_mode, row.sandbox_network)


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
        permissions: PermissionBook,
        emit: agent.Emit,
        sandbox: Sandbox | None = None,
        plans: PlanKeeper | None = None,
    ) -> None:
        self.config = config
        self.plans = plans  # where update_plan keeps the session's plan
        self.sandbox = sandbox
        self.bridge = bridge
        self.live = live
        self.turn_id = turn_id
        self.tools = dict(tools)
        self.sources = sources
        self.offer_tools = offer_tools  # the model supports tools
        self.cwd = Path(live.row.cwd)
        self.hooks = HookRunner(
            permissions.hooks,
            emit,
            {"session_id": live.row.id, "turn_id": turn_id, "cwd": live.row.cwd},
            self.cwd,
            config.pass_env,
        )
        self.gate = PermissionGate(permissions, bridge, live, turn_id, self.hooks, self._sandbox_approves, emit)
        self.emit = emit

    async def prepare(self, turn: Turn) -> None:
        """Run the ``user_prompt_submit`` hooks of a prompt's turn (a deny ends it ``error``), add
        the tool sources' tools (MCP servers), as they are for this session now, and offer the
        model every tool (``Turn.prepare``: runs inside the turn, after ``turn_start``)."""
        if turn.compaction_request is None and turn.user_message is not None:
            prompt = "\n".join(p.text for p in turn.user_message.parts if p.type == "text")
            verdict = await self.hooks.run("user_prompt_submit", {"prompt": prompt})
            if verdict.decision == "deny":
                raise HookDenied(verdict.reason)
        for source in self.sources:
            self.tools.update(await source.tools_for(self.live.row))
        turn.tools = tool_specs(self.tools) if self.offer_tools else []

    async def approve(self, call: Part) -> agent.Approval:
        """Whether one tool call runs (``PermissionGate``), and what ``tool_execution_start`` says."""
        tool = self.tools.get(call.name or "")
        if tool is None:
            return agent.Approval(True)  # unknown tools fail in execute_tool with a message the model can use
        if tool.permission_free:  # update_plan: no rule, hook or policy applies (PROTOCOL.md "Plans")
            return agent.Approval(True, "", ev.Permission(decision="allow", source="policy"))
        try:
            title = tool.summary(parse_arguments(tool, call.arguments or {}))
        except ToolError:
            return agent.Approval(True)  # invalid arguments: execute_tool reports them without running anything
        return await self.gate.decide(call, tool, title)

    def _hidden(self) -> tuple[Path, ...]:
        """The ponder home, which file tools never touch (unless the session works inside it)."""
        home, cwd = Path(os.path.realpath(self.config.home)), Path(os.path.realpath(self.cwd))
        return () if cwd == home or cwd.is_relative_to(home) else (home,)

    def _read_only(self) -> tuple[Path, ...]:
        """The cwd's .git while the session's sandbox is on (file tools must not get round it)."""
        if self.sandbox is None or self._confinement_mode() == "off":
            return ()
        return (Path(os.path.realpath(self.cwd / ".git")),)

    def _confinement_mode(self) -> str:
        assert self.sandbox is not None
        return self.sandbox.confinement(self.live.row.id, self.cwd, sandbox_override(self.live.row)).mode

    def _sandbox_approves(self, facts: CallFacts) -> bool:
        """Step 5 of "Permissions": a command the sandbox confines fully runs unasked under ``ask``."""
        return (
            facts.tool == SANDBOXED_TOOL
            and self.sandbox is not None
            and self.sandbox.approves(self.live.row.id, self.cwd, sandbox_override(self.live.row))
        )

    async def observe(self, event: str, fields: dict[str, Any]) -> None:
        """The watching hooks (``stop``, ``pre_compact``): ``Turn.observe``."""
        await self.hooks.observe(event, fields)

    async def run(self, call: Part, output: Callable[[str], Awaitable[None]] | None) -> ToolOutcome:
        """The outcome of one call (text, is_error, images, how the sandbox ran it); ``output`` gets
        what the tool prints as it runs; then the ``post_tool_use`` hooks see the result. Images a
        tool returned are checked and scaled as a prompt's are (``tool_images``)."""
        sandbox = None
        if call.name == SANDBOXED_TOOL and self.sandbox is not None:
            sandbox = self.sandbox.for_command(self.live.row.id, self.cwd, sandbox_override(self.live.row))
        outcome = await self._run(call, output, sandbox)
        if sandbox is not None and outcome.sandbox is not None and outcome.sandbox.denied:
            if await self._allowed_unconfined(call):
                outcome = await self._run(call, output, sandbox.unconfined())
        return outcome

    async def _allowed_unconfined(self, call: Part) -> bool:
        """Under ``ask``, whether the person lets a command the sandbox stopped run once unconfined."""
        if self.live.row.approval_policy != "ask" or not self.bridge.can_ask:
            return False  # auto runs nothing again; with nobody to ask the sandboxed result stands
        arguments = call.arguments or {}
        params = PermissionRequestParams(
            session_id=self.live.row.id,
            turn_id=self.turn_id,
            call_id=call.call_id or "",
            tool=SANDBOXED_TOOL,
            arguments=arguments,
            title=f"The sandbox stopped it; run once outside the sandbox: {arguments.get('command')}",
            options=["allow_once", "deny"],
            reason="sandbox",
        )
        answer = await ask_and_tell(self.bridge, params, self.emit)
        return answer is not None and answer.decision == "allow_once"

    async def _run(
        self, call: Part, output: Callable[[str], Awaitable[None]] | None, sandbox: "CommandSandbox | None"
    ) -> ToolOutcome:
        name, arguments = call.name or "", call.arguments or {}
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
            files=self.bridge.files_for(self.live.row.id),
            plan=self.plans,
        )
        result = await execute_tool(self.tools, name, arguments, context)
        if (rest := mask.flush()) and output is not None:
            await output(rest)
        report = result.sandbox
        if report is None and sandbox is not None:  # refused or failed before it ran: still say how
            report = sandbox.report(None, "")
        text = mask.scrub(result.text)
        if self.hooks.any_for("post_tool_use", name):
            fields = {
                "tool_name": name,
                "tool_input": arguments,
                "call_id": call.call_id,
                "tool_result": {"text": text, "is_error": result.is_error},
            }
            await self.hooks.observe("post_tool_use", fields)
        if not result.images:
            return ToolOutcome(text, result.is_error, [], report)
        images, problems = await tool_images(result.images)
        return ToolOutcome("\n".join([text, *problems]), result.is_error, images, report)
