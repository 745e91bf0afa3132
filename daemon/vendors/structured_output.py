"""Which output schemas each API's native structured output takes, as data and pure functions.

PROTOCOL.md "Structured output and headless runs": native mode is used only when the API's
strict mode takes the schema changed by nothing but ``additionalProperties: false`` on its
objects; anything else goes through the ``final_output`` tool, whose schema is the user's as
given. An optional property is never made required: a schema that strict mode would need
changed that way is simply not sent natively.

- OpenAI (Responses ``text.format``, Chat ``response_format``, ``strict: true``): an object
  root; every object closed and every property listed in ``required``; each node typed (or an
  ``anyOf``/``$ref``/``enum``/``const``); only the keywords and string formats of its subset;
  nesting within ``OPENAI_MAX_DEPTH`` and ``OPENAI_MAX_PROPERTIES`` properties.
- Anthropic (``output_config.format``): every object closed; no numeric or string-length
  constraints, no recursion; optional properties allowed.
- Gemini (``generationConfig.responseJsonSchema``): the schema as given, when it uses only the
  keywords Gemini documents; no closing needed.

``native_refusal`` says whether a provider's 400 is about the structured-output request, so the
agent can fall back to the tool for that model.

Pure: no I/O.
"""

import copy
from collections.abc import Iterator
from typing import Any

# The name a native structured-output request gives its schema (OpenAI requires one).
OUTPUT_NAME = "final_output"
# Keywords that describe, name or declare and constrain nothing a strict decoder must know.
_ANNOTATIONS = frozenset({"title", "description", "$schema", "$comment"})
OPENAI_KEYWORDS = _ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "$ref",
    "$defs", "definitions", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minItems", "maxItems",
}  # fmt: skip
OPENAI_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
OPENAI_MAX_DEPTH = 10
OPENAI_MAX_PROPERTIES = 5000
ANTHROPIC_KEYWORDS = _ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "allOf", "$ref",
    "$defs", "definitions", "default", "format", "pattern", "minItems",
}  # fmt: skip
GEMINI_KEYWORDS = _ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "enum", "anyOf", "oneOf",
    "$ref", "$defs", "$anchor", "format", "minimum", "maximum", "minItems", "maxItems", "propertyOrdering",
}  # fmt: skip
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
# Words of a provider's 400 that say the structured-output part of the request was refused.
_REFUSAL_WORDS = (
    "json_schema", "response_format", "text.format", "output_config", "output_format", "responsejsonschema",
    "response_json_schema", "responseschema", "response_schema", "responsemimetype", "response_mime_type",
    "response mime type", "structured output", "invalid schema", "schema",
)  # fmt: skip


def closed(schema: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of ``schema`` with ``additionalProperties: false`` on every object that lacks it;
    None when an object says something else (open objects cannot be sent strictly)."""
    out = copy.deepcopy(schema)
    for node in _nodes(out):
        if _is_object(node):
            if "additionalProperties" not in node:
                node["additionalProperties"] = False
            elif node["additionalProperties"] is not False:
                return None
    return out


def openai_strict(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema as OpenAI's strict mode is sent it, or None when strict mode cannot take it as is."""
    if schema.get("type") != "object":
        return None
    sent = closed(schema)
    if sent is None:
        return None
    properties = 0
    for node, depth in _nodes_with_depth(sent):
        if not node.keys() <= OPENAI_KEYWORDS or depth > OPENAI_MAX_DEPTH:
            return None
        if not ({"type", "anyOf", "$ref", "enum", "const"} & node.keys()):
            return None
        if "format" in node and node["format"] not in OPENAI_FORMATS:
            return None
        if _is_object(node):
            names = set(node.get("properties") or {})
            properties += len(names)
            if set(node.get("required") or []) != names:
                return None  # an optional property: strict mode would make it required
    return sent if properties <= OPENAI_MAX_PROPERTIES else None


def anthropic_format(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema as Anthropic's ``output_config.format`` is sent it, or None."""
    sent = closed(schema)
    if sent is None or _recursive(sent):
        return None
    for node in _nodes(sent):
        if not node.keys() <= ANTHROPIC_KEYWORDS:
            return None
        if node.get("minItems", 0) not in (0, 1):
            return None
    return sent


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema as Gemini's ``responseJsonSchema`` is sent it (unchanged but for ``$schema``), or None."""
    for node in _nodes(schema):
        if not node.keys() <= GEMINI_KEYWORDS:
            return None
    return {k: v for k, v in schema.items() if k != "$schema"}


def native_refusal(message: str, status: int | None) -> bool:
    """Whether a provider's error refuses the structured-output part of a request (HTTP 400/422
    naming it), so the request is worth sending again with the ``final_output`` tool instead."""
    if status not in (400, 422):
        return False
    lowered = message.lower()
    return any(word in lowered for word in _REFUSAL_WORDS)


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _children(node: dict[str, Any]) -> Iterator[Any]:
    for key in _SUBSCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            yield from node[key].values()
    for key in _SUBSCHEMA_LISTS:
        if isinstance(node.get(key), list):
            yield from node[key]
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        if isinstance(node.get(key), dict):
            yield node[key]


def _nodes(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for node, _ in _nodes_with_depth(schema):
        yield node


def _nodes_with_depth(schema: dict[str, Any]) -> Iterator[tuple[dict[str, Any], int]]:
    """Every subschema with its object nesting depth (the root object is 1)."""
    stack = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        here = depth + 1 if _is_object(node) else depth
        yield node, here
        stack.extend((child, here) for child in _children(node) if isinstance(child, dict))


def _recursive(schema: dict[str, Any]) -> bool:
    """Whether a ``$ref`` leads back to a schema it is inside of."""
    defs = {
        f"#/{key}/{name}": value for key in ("$defs", "definitions") for name, value in (schema.get(key) or {}).items()
    }
    defs["#"] = schema

    def refs(node: dict[str, Any]) -> set[str]:
        return {n["$ref"] for n in _nodes(node) if isinstance(n.get("$ref"), str)}

    def reaches(start: str) -> bool:
        seen: set[str] = set()
        stack = [start]
        while stack:
            target = defs.get(stack.pop())
            if target is None:
                continue
            for ref in (
                refs(target)
                if target is not schema
                else refs({k: v for k, v in schema.items() if k not in ("$defs", "definitions")})
            ):
                if ref == start:
                    return True
                if ref not in seen:
                    seen.add(ref)
                    stack.append(ref)
        return False

    return any(reaches(name) for name in defs)
