"""Write ``schemas/protocol.d.ts``, TypeScript declarations of the wire protocol, from ``schemas/protocol.json``.

It translates the subset of JSON Schema that ``scripts/gen_schemas.py`` writes: an object
with properties becomes an ``interface``, anything else a ``type``; ``const`` becomes a
literal type, so a tagged union such as ``AgentEvent`` narrows in ``switch (event.type)``.
The tables ``Methods``, ``Notifications`` and ``DaemonRequests`` become interfaces keyed by
method name, and helper types (``ParamsOf``, ``ResultOf``, ``NotificationMessage``, …) are
added at the end. ``scripts/gen_schemas.py`` writes both files; this script alone rewrites
the declarations from the committed schema. ``--check`` exits non-zero when they are stale.

    uv run python scripts/gen_typescript.py [--check]
"""

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "protocol.json"
OUTPUT = ROOT / "schemas" / "protocol.d.ts"
IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
SCALARS = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}

HELPERS = """\
// --- helpers over the tables ---------------------------------------------------------------

/** A client → daemon method name. */
export type MethodName = keyof Methods;
/** The params a client sends with method `M`. */
export type ParamsOf<M extends MethodName> = Methods[M]["params"];
/** The result the daemon answers method `M` with. */
export type ResultOf<M extends MethodName> = Methods[M]["result"];

/** The request a client sends for method `M`. */
export interface RequestMessage<M extends MethodName = MethodName> {
  jsonrpc: "2.0";
  id: string | number;
  method: M;
  params: ParamsOf<M>;
}

/** Any notification, discriminated by `method`: `switch (message.method)` narrows `params`. */
export type NotificationMessage = {
  [M in keyof Notifications]: { jsonrpc: "2.0"; method: M; params: Notifications[M]["params"] };
}[keyof Notifications];

/** Any daemon → client request, discriminated by `method`; answer it with `DaemonRequests[M]["result"]`. */
export type DaemonRequestMessage = {
  [M in keyof DaemonRequests]: { jsonrpc: "2.0"; id: string; method: M; params: DaemonRequests[M]["params"] };
}[keyof DaemonRequests];
"""


def literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def union(parts: list[str]) -> str:
    unique = list(dict.fromkeys(parts))
    return " | ".join(unique) if unique else "never"


def type_of(schema: dict[str, Any], indent: str) -> str:
    """The TypeScript type of ``schema`` (written at nesting ``indent``)."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[1]
    if "const" in schema:
        return literal(schema["const"])
    if "enum" in schema:
        return union([literal(v) for v in schema["enum"]])
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return union([type_of(s, indent) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return union([type_of({**schema, "type": k}, indent) for k in kind])
    if kind in SCALARS:
        return SCALARS[kind]
    if kind == "array":
        item = type_of(schema.get("items", {}), indent)
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object" and "properties" in schema:
        return "{\n" + members(schema, indent + "  ") + indent + "}"
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        value = "unknown" if extra is True or extra == {} else type_of(extra, indent)
        return f"{{ [key: string]: {value} }}"
    if not schema or set(schema) <= {"title", "description", "default"}:
        return "unknown"
    raise ValueError(f"no TypeScript for this schema: {schema!r}")


def comment(text: str | None, indent: str) -> str:
    if not text:
        return ""
    safe = text.replace("*/", "* /")
    return f"{indent}/** {safe} */\n"


def members(schema: dict[str, Any], indent: str) -> str:
    required = set(schema.get("required", []))
    lines = []
    for name, prop in schema["properties"].items():
        key = name if IDENTIFIER.match(name) else literal(name)
        optional = "" if name in required else "?"
        lines.append(comment(prop.get("description"), indent) + f"{indent}{key}{optional}: {type_of(prop, indent)};\n")
    return "".join(lines)


def declaration(name: str, schema: dict[str, Any]) -> str:
    doc = comment(schema.get("description"), "")
    if schema.get("type") == "object" and "properties" in schema:
        return f"{doc}export interface {name} {{\n{members(schema, '  ')}}}\n"
    return f"{doc}export type {name} = {type_of(schema, '')};\n"


def render(schema: dict[str, Any]) -> str:
    header = (
        f"// {schema['title']}: TypeScript declarations. {schema['description'].split('. ')[0]}.\n"
        "// Generated from schemas/protocol.json by scripts/gen_typescript.py; do not edit by hand.\n"
    )
    body = "\n".join(declaration(name, s) for name, s in schema["$defs"].items())
    return f"{header}\n{body}\n{HELPERS}"


def main() -> int:
    text = render(json.loads(SCHEMA.read_text(encoding="utf-8")))
    if "--check" in sys.argv:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run `uv run python scripts/gen_schemas.py`", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
