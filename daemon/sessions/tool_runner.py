"""Running a turn's tool calls: approval (``permission_gate``: rules, hooks, the policy, asking
the person), execution with credentials masked in everything a tool prints, and the turn's
hooks (``user_prompt_submit`` when it starts, ``post_tool_use`` after each call)."""

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from daemon import agent
from daemon.agent import Turn
from daemon.config.settings import Config
from daemon.conversation import Part
from daemon.errors import HookDenied
from daemon.permissions.book import PermissionBook
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.hook_runner import HookRunner
from daemon.sessions.live import LiveSession
from daemon.sessions.permission_gate import PermissionGate
from daemon.sessions.prompt_content import tool_images
from daemon.tools import Tool, ToolError, execute_tool, parse_arguments, tool_specs
from daemon.tools.base import ToolContext
from daemon.tools.source import ToolSource
from daemon.util.redact import SecretMask
from daemon.util.redact import known as known_secrets


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
    ) -> None:
        self.config = config
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
        self.gate = PermissionGate(permissions, bridge, live, turn_id, self.hooks)

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
        try:
            title = tool.summary(parse_arguments(tool, call.arguments or {}))
        except ToolError:
            return agent.Approval(True)  # invalid arguments: execute_tool reports them without running anything
        return await self.gate.decide(call, tool, title)

    async def observe(self, event: str, fields: dict[str, Any]) -> None:
        """The watching hooks (``stop``, ``pre_compact``): ``Turn.observe``."""
        await self.hooks.observe(event, fields)

    async def run(self, call: Part, output: Callable[[str], Awaitable[None]] | None) -> tuple[str, bool, list[Part]]:
        """(text, is_error, images) of one call; ``output`` gets what the tool prints as it runs;
        then the ``post_tool_use`` hooks see the result. Images a tool returned are checked and
        scaled as a prompt's are (``tool_images``)."""
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
        )
        result = await execute_tool(self.tools, name, arguments, context)
        if (rest := mask.flush()) and output is not None:
            await output(rest)
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
            return text, result.is_error, []
        images, problems = await tool_images(result.images)
        return "\n".join([text, *problems]), result.is_error, images
