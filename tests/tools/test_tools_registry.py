"""The registry, execute_tool's error handling, the generated schemas, and approval."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import jsonschema
import msgspec
import pytest

from daemon.tools import ToolContext, ToolError, ToolResult, builtin_tools, execute_tool, parse_arguments, tool_specs
from daemon.tools.approval import denial_message, policy_decision
from daemon.tools.base import Tool, ToolArgs, inline_schema


class Boom(Tool[ToolArgs]):
    name = "boom"
    description = "Always fails."
    Args = ToolArgs

    async def run(self, args: ToolArgs, ctx: ToolContext) -> ToolResult:
        raise KeyError("oops")


class Sleepy(Tool[ToolArgs]):
    name = "sleepy"
    description = "Sleeps."
    Args = ToolArgs

    async def run(self, args: ToolArgs, ctx: ToolContext) -> ToolResult:
        await anyio.sleep(30)
        return ToolResult("woke")


def test_builtin_tools() -> None:
    tools = builtin_tools()
    assert list(tools) == ["read_file", "list_files", "search", "write_file", "edit_file", "run_command", "update_plan"]
    assert {name for name, tool in tools.items() if tool.mutating} == {"write_file", "edit_file", "run_command"}
    assert {name for name, tool in tools.items() if tool.permission_free} == {"update_plan"}
    for name, tool in tools.items():
        assert tool.name == name
        assert tool.description and "\n" not in tool.description


def test_schemas_are_self_contained_and_validate_what_msgspec_accepts() -> None:
    for spec in tool_specs(builtin_tools()):
        schema = spec.input_schema
        text = json.dumps(schema)
        assert "$ref" not in text and "$defs" not in text and "anyOf" not in text
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        jsonschema.Draft202012Validator.check_schema(schema)
    read = builtin_tools()["read_file"].input_schema
    assert read["required"] == ["path"]
    assert read["properties"]["offset"] == {
        "description": "First line to read (1-based); default 1.",
        "type": "integer",
        "minimum": 1,
    }
    validator = jsonschema.Draft202012Validator(read)
    assert validator.is_valid({"path": "a", "offset": 2})
    assert not validator.is_valid({"path": "a", "extra": 1})
    assert not validator.is_valid({"offset": 2})


def test_inline_schema_keeps_fields_named_like_keywords() -> None:
    class Args(ToolArgs):
        title: str
        required: int | None = None

    schema = inline_schema(msgspec.json.schema(Args))
    assert schema == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "required": {"type": "integer"}},
        "required": ["title"],
        "additionalProperties": False,
    }


def test_input_schema_is_a_copy() -> None:
    tool = builtin_tools()["read_file"]
    tool.input_schema["properties"].clear()
    assert tool.input_schema["properties"]


def test_parse_arguments_and_summary() -> None:
    tool = builtin_tools()["run_command"]
    args = parse_arguments(tool, {"command": "make test"})
    assert args.timeout_s == 120
    assert tool.summary(args) == "Run: make test"
    with pytest.raises(ToolError, match=r"Object contains unknown field `cmd`"):
        parse_arguments(tool, {"cmd": "ls"})


@pytest.mark.anyio
async def test_unknown_tool_lists_the_available_ones(tmp_path: Path) -> None:
    result = await execute_tool(builtin_tools(), "delete_everything", {}, ToolContext(cwd=tmp_path))
    assert result.is_error
    assert result.text == (
        "unknown tool 'delete_everything'; available tools: "
        "edit_file, list_files, read_file, run_command, search, update_plan, write_file."
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"path": 3}, "Expected `str`, got `int` - at `$.path`"),
        ({}, "Object missing required field `path`"),
        ({"path": "a", "lines": 3}, "Object contains unknown field `lines`"),
        ({"path": "a", "limit": -1}, "Expected `int` >= 1 - at `$.limit`"),
        ("not an object", "Expected `object`, got `str`"),
    ],
)
async def test_bad_arguments_say_what_and_where(tmp_path: Path, arguments: object, expected: str) -> None:
    result = await execute_tool(builtin_tools(), "read_file", arguments, ToolContext(cwd=tmp_path))  # type: ignore[arg-type]
    assert result.is_error
    assert result.text.startswith(f"invalid arguments for read_file: {expected}")
    assert "Expected arguments: {path: string, offset: integer (optional), limit: integer (optional)}" in result.text


@pytest.mark.anyio
async def test_unexpected_exceptions_become_internal_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    result = await execute_tool({"boom": Boom()}, "boom", {}, ToolContext(cwd=tmp_path))
    assert result == ToolResult("internal error in tool boom: KeyError: 'oops'", is_error=True)
    assert "tool boom failed" in caplog.text


@pytest.mark.anyio
async def test_cancellation_propagates_through_execute_tool(tmp_path: Path) -> None:
    finished = False
    with anyio.move_on_after(0.05) as scope:
        await execute_tool({"sleepy": Sleepy()}, "sleepy", {}, ToolContext(cwd=tmp_path))
        finished = True
    assert scope.cancelled_caught and not finished


# --- approval --------------------------------------------------------------------

# (policy, mutating) -> what the policy alone does (rules and hooks come first: tests/permissions)
DECISIONS = [
    ("ask", False, "run"),
    ("ask", True, "ask"),
    ("auto", False, "run"),
    ("auto", True, "run"),
    ("read_only", False, "run"),
    ("read_only", True, "deny"),
    ("bogus", True, "deny"),  # unknown policy: fail closed
    ("bogus", False, "run"),
]


@pytest.mark.parametrize(("policy", "mutating", "expected"), DECISIONS)
def test_policy_decision(policy: str, mutating: bool, expected: str) -> None:
    assert policy_decision(policy, mutating) == expected  # type: ignore[arg-type]


def test_denial_messages_say_why_and_how() -> None:
    cannot_ask = denial_message("ask", "run_command", "cannot_ask")
    assert cannot_ask.startswith("run_command was not run")
    assert "start the session with approval_policy 'auto' or use a client that answers permission requests" in (
        cannot_ask
    )
    assert denial_message("ask", "run_command") == cannot_ask
    read_only = denial_message("read_only", "edit_file")
    assert "'read_only'" in read_only and "approval_policy 'ask' or 'auto'" in read_only
    assert denial_message("read_only", "edit_file", "read_only") == read_only
    assert "the user denied permission" in denial_message("ask", "write_file", "user_denied")
    assert denial_message("ask", "write_file", "the request timed out") == (
        "write_file was not run: the request timed out"
    )
