"""The built-in tools, their registry, and the one place a tool call is executed.

``execute_tool`` never raises for anything a tool or its arguments do wrong: unknown
tools, invalid arguments, ``ToolError`` and unexpected exceptions all become error
results the model can read and act on, and every result is valid UTF-8 (a file name's
stray bytes must not end the turn when the result is encoded for the wire). Cancellation
is not an error and propagates.
Approval is decided before this, by ``daemon.tools.approval``.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from daemon.conversation import ToolSpec
from daemon.tools.base import Tool, ToolContext, ToolError, ToolResult
from daemon.tools.child import SCAN_TIME_LIMIT_S
from daemon.tools.text import escape_surrogates

__all__ = [
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "builtin_tools",
    "execute_tool",
    "parse_arguments",
    "tool_specs",
]

log = logging.getLogger(__name__)


def builtin_tools(scan_time_limit_s: float = SCAN_TIME_LIMIT_S) -> dict[str, Tool[Any]]:
    """A fresh registry of the built-in tools, by name, in the order the model sees them.

    ``scan_time_limit_s`` bounds one ``list_files`` or ``search`` (see ``daemon.tools.child``).
    """
    # Imported here, not with the package: the daemon's start-up path imports the package
    # (for the tool base and the process groups) but needs the tools only at the first turn.
    from daemon.tools.edit_file import EditFile
    from daemon.tools.list_files import ListFiles
    from daemon.tools.read_file import ReadFile
    from daemon.tools.run_command import RunCommand
    from daemon.tools.search import Search
    from daemon.tools.update_plan import UpdatePlan
    from daemon.tools.write_file import WriteFile

    tools: list[Tool[Any]] = [
        ReadFile(),
        ListFiles(scan_time_limit_s),
        Search(scan_time_limit_s),
        WriteFile(),
        EditFile(),
        RunCommand(),
        UpdatePlan(),
    ]
    return {tool.name: tool for tool in tools}


def tool_specs(tools: dict[str, Tool[Any]]) -> list[ToolSpec]:
    """What providers are told about ``tools``."""
    return [ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema) for t in tools.values()]


def parse_arguments(tool: Tool[Any], arguments: Any) -> Any:
    """``arguments`` validated into ``tool.Args``; raises ``ToolError`` saying what is wrong.

    Exposed so approval can summarise a call (``tool.summary(args)``) before running it.
    """
    try:
        return msgspec.convert(arguments, tool.Args)
    except msgspec.ValidationError as exc:
        raise ToolError(f"invalid arguments for {tool.name}: {exc}. Expected arguments: {_signature(tool)}.") from None


async def execute_tool(tools: dict[str, Tool[Any]], name: str, arguments: Any, ctx: ToolContext) -> ToolResult:
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        return ToolResult(f"unknown tool {name!r}; available tools: {available}.", is_error=True)
    try:
        args = parse_arguments(tool, arguments)
        result = await tool.run(args, ctx)
    except ToolError as exc:
        result = ToolResult(str(exc), is_error=True)
    except Exception as exc:
        # A tool bug must not end the turn. Cancellation is a BaseException (asyncio.CancelledError, trio.Cancelled) and
        # passes through untouched.
        log.exception("tool %s failed", name)
        result = ToolResult(f"internal error in tool {name}: {type(exc).__name__}: {exc}", is_error=True)
    return _valid_utf8(result)


def _valid_utf8(result: ToolResult) -> ToolResult:
    """``result`` with any lone surrogate (a non-UTF-8 byte of a file name, kept by ``os.fsdecode``) escaped."""
    text = escape_surrogates(result.text)
    return result if text is result.text else msgspec.structs.replace(result, text=text)


def _signature(tool: Tool[Any]) -> str:
    schema = tool.input_schema
    required = set(schema.get("required", ()))
    fields = []
    for field, spec in schema.get("properties", {}).items():
        kind = spec.get("type", "any")
        fields.append(f"{field}: {kind}" + ("" if field in required else " (optional)"))
    return "{" + ", ".join(fields) + "}"
