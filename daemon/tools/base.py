"""The shape every built-in tool has: its arguments, context, result and error.

A tool declares ``name``, a one-line ``description`` for the model, whether it is
``mutating`` (which decides approval), and an ``Args`` struct. The JSON Schema sent to
providers is generated from ``Args`` so the schema and the validation can never drift.
Tools raise ``ToolError`` for anything the model can correct; ``execute_tool`` (in
``daemon.tools``) turns that, bad arguments and unexpected failures into error results.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import msgspec

from protocol.events import ToolSandbox

if TYPE_CHECKING:
    from daemon.sandbox.command import CommandSandbox
    from daemon.tools.client_files import ClientFiles
    from daemon.tools.plan_keeper import PlanKeeper

__all__ = ["MCP_TOOL_PREFIX", "Tool", "ToolArgs", "ToolContext", "ToolError", "ToolResult", "inline_schema"]

# The tool namespace reserves this prefix for MCP servers' tools (``mcp__{server}__{tool}``,
# made by ``daemon.mcp.tools``); no built-in tool's name starts so.
MCP_TOOL_PREFIX = "mcp__"


class ToolError(Exception):
    """A failure the model can read and act on; its message becomes the tool result."""


class ToolResult(msgspec.Struct, frozen=True):
    text: str
    is_error: bool = False
    sandbox: ToolSandbox | None = None  # run_command: how it was confined (tool_execution_end.sandbox)
    # Images the tool returned (an MCP tool's image content): (mime_type, bytes) as received;
    # the session checks and scales them before a vision model sees them.
    images: tuple[tuple[str, bytes], ...] = ()


class ToolContext(msgspec.Struct, frozen=True):
    cwd: Path
    # Streams chunks of output as they arrive (run_command); None when nobody listens.
    emit_output: Callable[[str], Awaitable[None]] | None = None
    # Credentials to mask in output before it is cut to size (a key cut in half would
    # no longer match); the caller masks the final result too.
    secrets: tuple[str, ...] = ()
    # Credential variables a command's children get anyway ([tools] pass_env; see config.child_env).
    pass_env: tuple[str, ...] = ()
    # Real paths no file tool reads or writes (the ponder home), and those they do not write
    # (the cwd's .git while the sandbox is on): PROTOCOL.md "Sandbox".
    hidden: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    # How run_command confines its command (daemon.sandbox); None: no sandbox is involved at all.
    sandbox: CommandSandbox | None = None
    # The editor's view of the files (ACP fs), which the file tools use instead of the disk
    # where it offers reads or writes; None: the disk.
    files: ClientFiles | None = None
    # Where update_plan keeps the session's plan; None: no plan can be kept.
    plan: PlanKeeper | None = None

    def hidden_strs(self) -> tuple[str, ...]:
        """``hidden`` for a scan child's JSON request."""
        return tuple(str(path) for path in self.hidden)


class ToolArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base for tool arguments: unknown fields are an error the model gets to see."""


ArgsT = TypeVar("ArgsT", bound=ToolArgs)


class Tool(Generic[ArgsT]):
    name: ClassVar[str]
    description: ClassVar[str]
    mutating: ClassVar[bool] = False
    # A tool that changes nothing outside the session (update_plan): no rule, hook or policy
    # applies to it and it never asks.
    permission_free: ClassVar[bool] = False
    Args: ClassVar[type[ToolArgs]]

    @property
    def input_schema(self) -> dict[str, Any]:
        # A copy, so a caller adjusting it for one provider cannot change it for all (decoded
        # from the schema's JSON: every request's tool list makes one, and a deep copy costs more).
        return msgspec.json.decode(_schema_json(self.Args))

    def summary(self, args: ArgsT) -> str:
        """A short human line for a permission prompt, e.g. ``Run: make test``."""
        return self.name

    async def run(self, args: ArgsT, ctx: ToolContext) -> ToolResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<tool {self.name}>"


def schema_key(args_type: type[ToolArgs]) -> str:
    """How ``daemon.tools.builtin_schemas`` names an ``Args`` type."""
    return f"{args_type.__module__}.{args_type.__qualname__}"


def derived_schema_json(args_type: type[ToolArgs]) -> bytes:
    """The input schema of a tool taking ``args_type``, derived from it, as JSON."""
    return msgspec.json.encode(inline_schema(msgspec.json.schema(args_type)))


@functools.cache
def _schema_json(args_type: type[ToolArgs]) -> bytes:
    # The built-in tools' schemas are read from daemon.tools.builtin_schemas, made ahead by
    # scripts/gen_tool_schemas.py: deriving them (msgspec.inspect, in Python) costs ~15 M
    # instructions at every daemon's first turn. tests/tools/test_builtin_schemas.py keeps that
    # module equal to what ``derived_schema_json`` gives; any other Args is derived here.
    from daemon.tools.builtin_schemas import SCHEMAS

    made_ahead = SCHEMAS.get(schema_key(args_type))
    return made_ahead if made_ahead is not None else derived_schema_json(args_type)


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Make msgspec's schema self-contained and plain enough for every provider.

    Providers differ in what JSON Schema they accept (Gemini rejects ``$ref``, several
    choke on ``anyOf`` with ``null``), so ``$ref`` is inlined, ``X | None`` on an
    optional field becomes plain ``X`` (omitting it means None), and msgspec's struct
    ``title`` is dropped.
    """
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, list):
            return [resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return resolve(merged)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("$defs", "title"):
                continue
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                # A name -> schema mapping: its keys are field names, kept as they are.
                out[key] = {name: resolve(sub) for name, sub in value.items()}
            else:
                out[key] = resolve(value)
        variants = out.get("anyOf")
        if isinstance(variants, list) and {"type": "null"} in variants:
            rest = [v for v in variants if v != {"type": "null"}]
            if len(rest) == 1:
                del out["anyOf"]
                if out.get("default", ...) is None:
                    del out["default"]
                out = {**rest[0], **out}
        if out.get("required") == []:
            del out["required"]  # an empty list is noise some validators reject
        return out

    return resolve(schema)
