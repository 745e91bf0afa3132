"""The built-in tools' input schemas made ahead (``daemon.tools.builtin_schemas``, written by
``scripts/gen_tool_schemas.py``) are exactly what ``daemon.tools.base`` derives from their
``Args``; any other ``Args`` is derived."""

import subprocess
import sys
from pathlib import Path

import msgspec

from daemon.tools import builtin_tools, tool_specs
from daemon.tools.base import ToolArgs, _schema_json, derived_schema_json, inline_schema, schema_key
from daemon.tools.builtin_schemas import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]


def test_the_schemas_made_ahead_are_the_derived_ones_byte_for_byte() -> None:
    tools = builtin_tools()
    assert set(SCHEMAS) == {schema_key(tool.Args) for tool in tools.values()}
    for tool in tools.values():
        derived = msgspec.json.encode(inline_schema(msgspec.json.schema(tool.Args)))
        assert SCHEMAS[schema_key(tool.Args)] == derived, f"{tool.name}: run scripts/gen_tool_schemas.py"
        assert _schema_json(tool.Args) is SCHEMAS[schema_key(tool.Args)]  # read, not derived
    # What a provider is told: the same dicts, in the same key order.
    for spec, tool in zip(tool_specs(tools), tools.values(), strict=True):
        assert msgspec.json.encode(spec.input_schema) == derived_schema_json(tool.Args)


def test_the_generator_writes_what_the_module_holds_and_checks_it() -> None:
    from scripts.gen_tool_schemas import derived, render

    assert SCHEMAS == derived()
    scope: dict[str, object] = {}
    exec(render(), scope)
    assert scope["SCHEMAS"] == SCHEMAS
    script = ROOT / "scripts" / "gen_tool_schemas.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


class OtherArgs(ToolArgs):
    """Not a built-in tool's."""

    name: str
    count: int = 1


def test_an_args_type_not_made_ahead_is_derived() -> None:
    assert schema_key(OtherArgs) not in SCHEMAS
    schema = msgspec.json.decode(_schema_json(OtherArgs))
    assert schema == inline_schema(msgspec.json.schema(OtherArgs))
    assert schema["properties"]["name"] == {"type": "string"} and schema["required"] == ["name"]
