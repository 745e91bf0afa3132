"""Running a turn's tool calls: approval (policy, asking the person, tools allowed for the
session) and execution with credentials masked in everything a tool prints."""

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from daemon.agent import Turn
from daemon.config.settings import Config
from daemon.conversation import Part
from daemon.jsonrpc.connection import ClientRequestError
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.live import LiveSession
from daemon.sessions.prompt_content import tool_images
from daemon.tools import Tool, ToolError, execute_tool, parse_arguments, tool_specs
from daemon.tools.approval import decide, denial_message
from daemon.tools.base import ToolContext
from daemon.tools.source import ToolSource
from daemon.util.redact import SecretMask
from daemon.util.redact import known as known_secrets
from protocol.methods import PermissionRequestParams


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
    ) -> None:
        self.config = config
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

    async def run(
        self, name: str, arguments: dict[str, Any], output: Callable[[str], Awaitable[None]] | None
    ) -> tuple[str, bool, list[Part]]:
        """(text, is_error, images) of one call; ``output`` gets what the tool prints as it runs.
        Images a tool returned are checked and scaled as a prompt's are (``tool_images``)."""
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
        if not result.images:
            return text, result.is_error, []
        images, problems = await tool_images(result.images)
        return "\n".join([text, *problems]), result.is_error, images
