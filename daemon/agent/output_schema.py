"""A prompt's ``output_schema`` as a JSON Schema: checked when the prompt is admitted, and the
answers of its turn validated against it (the ``jsonschema`` library, imported on first use so
that a daemon that never sees a schema never loads it).

Checked at admission (``check_schema``; each problem is a ``{path, message}``, the whole an
``InvalidOutputSchema``, ``-32602``): valid against its meta-schema (the ``$schema`` it names,
else 2020-12); at most ``MAX_SCHEMA_BYTES`` as JSON; every ``$ref`` a JSON pointer inside the
schema (``#``, ``#/$defs/…``) that resolves; no ``$ref`` cycle that never reaches a value (a
``$ref`` to itself, or refs that only lead to each other through ``allOf``/``anyOf``/…): such a
schema would send a validator into endless recursion. Recursive schemas whose cycle passes
through ``properties`` or ``items`` (a tree) are fine.

A schema whose root is not an object is sent to the model wrapped (``wrap``: ``{type: object,
properties: {value: S}, required: [value]}``, its ``$defs`` lifted to the root) and the answer
unwrapped (``unwrap``): tools and the providers' native modes take object roots only.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import msgspec

from daemon.errors import InvalidOutputSchema
from protocol.methods import MAX_OUTPUT_SCHEMA_BYTES

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

MAX_SCHEMA_BYTES = MAX_OUTPUT_SCHEMA_BYTES
MAX_ERRORS = 20  # of one answer, sent back to the model and reported in turn_end.error.errors
MAX_ERROR_CHARS = 300  # of one error's message (jsonschema quotes the offending value)
WRAPPED_KEY = "value"
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_DEFS = ("$defs", "definitions")
_VALUES = frozenset({"enum", "const", "default", "examples"})  # hold JSON values, not schemas


def check_schema(schema: Any, *, path: str = "$") -> None:
    """Raise ``InvalidOutputSchema`` unless ``schema`` can be used as a turn's output schema."""
    if not isinstance(schema, dict):
        raise InvalidOutputSchema(
            "output_schema must be a JSON object (a JSON Schema).", [_error(path, "not an object")]
        )
    size = len(msgspec.json.encode(schema))
    if size > MAX_SCHEMA_BYTES:
        said = f"output_schema is {size:,} bytes as JSON; at most {MAX_SCHEMA_BYTES:,} are taken."
        raise InvalidOutputSchema(said, [_error(path, said)])
    errors = _meta_errors(schema, path)
    if errors:
        raise InvalidOutputSchema(f"output_schema is not a valid JSON Schema: {errors[0]['message']}", errors)
    errors = _ref_errors(schema, path)
    if errors:
        raise InvalidOutputSchema(f"output_schema cannot be used: {errors[0]['message']}", errors)


def validate(schema: dict[str, Any], value: Any) -> list[dict[str, str]]:
    """What is wrong with ``value`` against ``schema`` (checked by ``check_schema``): ``[]`` when valid."""
    validator = _validator(msgspec.json.encode(schema))
    try:
        found = sorted(validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    except RecursionError:
        return [_error("$", "The answer is nested too deeply to be checked.")]
    return [_error(str(e.json_path), e.message) for e in found[:MAX_ERRORS]]


def parse_answer(text: str) -> tuple[Any, list[dict[str, str]]]:
    """The JSON value of a final reply's text (one surrounding Markdown code fence allowed), or the
    error that it is not JSON."""
    stripped = text.strip()
    fenced = re.fullmatch(r"```[A-Za-z0-9_-]*\s*\n(.*?)\n?```", stripped, re.DOTALL)
    if fenced is not None:
        stripped = fenced.group(1).strip()
    if not stripped:
        return None, [_error("$", "The answer is empty; it must be JSON valid against the output schema.")]
    try:
        return msgspec.json.decode(stripped), []
    except (msgspec.DecodeError, RecursionError) as exc:
        return None, [_error("$", f"The answer is not JSON ({exc}); it must be JSON valid against the output schema.")]


def is_object_schema(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and kind == ["object"])


def wrap(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the model is asked for it: itself when its root is an object, else inside
    ``{value: …}``, with its ``$defs`` lifted to the new root so that ``#/$defs/…`` still resolves
    and its other local refs re-pointed below ``value``."""
    if is_object_schema(schema):
        return schema
    inner = copy.deepcopy(schema)
    lifted = {key: inner.pop(key) for key in _DEFS if key in inner}
    inner.pop("$schema", None)
    inner.pop("$id", None)

    def repoint(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: repoint(v) for k, v in node.items()}
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and not ref.startswith(("#/$defs/", "#/definitions/")):
                out["$ref"] = f"#/properties/{WRAPPED_KEY}" + ref[1:]
            return out
        if isinstance(node, list):
            return [repoint(v) for v in node]
        return node

    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {WRAPPED_KEY: repoint(inner)},
        "required": [WRAPPED_KEY],
    }
    wrapped.update({key: repoint(defs) for key, defs in lifted.items()})
    return wrapped


def unwrap(schema: dict[str, Any], value: Any) -> tuple[Any, list[dict[str, str]]]:
    """The answer inside a wrapped answer (``{value: X}`` → ``X``), or the error that it has no such shape."""
    if is_object_schema(schema):
        return value, []
    if isinstance(value, dict) and set(value) == {WRAPPED_KEY}:
        return value[WRAPPED_KEY], []
    return None, [_error("$", f'The answer must be an object {{"{WRAPPED_KEY}": …}} holding the value.')]


# -- checks -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _validator(encoded: bytes) -> Validator:
    from jsonschema.validators import Draft202012Validator, validator_for

    schema = msgspec.json.decode(encoded)
    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema)


def _meta_errors(schema: dict[str, Any], path: str) -> list[dict[str, str]]:
    from jsonschema.validators import Draft202012Validator, validator_for

    cls = validator_for(schema, default=Draft202012Validator)
    meta = cls(cls.META_SCHEMA)
    try:
        found = sorted(meta.iter_errors(schema), key=lambda e: list(map(str, e.absolute_path)))
    except RecursionError:
        return [_error(path, "the schema is nested too deeply")]
    return [_error(path + str(e.json_path)[1:], e.message) for e in found[:MAX_ERRORS]]


def _ref_errors(schema: dict[str, Any], path: str) -> list[dict[str, str]]:
    """Refs that leave the schema or resolve to nothing; then a cycle of in-place refs."""
    nodes: dict[str, Any] = {}  # JSON pointer -> schema node
    _index(schema, "", nodes)
    errors: list[dict[str, str]] = []
    for pointer, node in nodes.items():
        ref = node.get("$ref") if isinstance(node, dict) else None
        if ref is None:
            continue
        where = path + _as_path(pointer) + ".$ref"
        if not isinstance(ref, str) or not ref.startswith("#"):
            errors.append(
                _error(where, f"$ref {ref!r} points outside the schema; only refs inside it (#/...) are taken")
            )
        elif _target(ref) not in nodes:
            errors.append(_error(where, f"$ref {ref!r} points to nothing in the schema"))
    if errors:
        return errors[:MAX_ERRORS]
    cycle = _endless_cycle(nodes)
    if cycle is not None:
        chain = " -> ".join("#" + p for p in cycle)
        return [_error(path + _as_path(cycle[0]), f"its $refs form a cycle that never reaches a value: {chain}")]
    return []


def _index(node: Any, pointer: str, nodes: dict[str, Any]) -> None:
    stack = [(node, pointer)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            nodes[at] = item
            stack.extend((v, f"{at}/{_escape(str(k))}") for k, v in item.items() if k not in _VALUES)
        elif isinstance(item, list):
            stack.extend((v, f"{at}/{i}") for i, v in enumerate(item))


def _endless_cycle(nodes: dict[str, Any]) -> list[str] | None:
    """A cycle through ``$ref`` and the keywords that apply a schema to the same value (no
    ``properties``/``items`` step between): validating any value would recurse for ever."""

    def in_place(pointer: str) -> list[str]:
        node = nodes.get(pointer)
        if not isinstance(node, dict):
            return []
        out: list[str] = []
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            out.append(_target(ref))
        for key in _IN_PLACE_LISTS:
            if isinstance(node.get(key), list):
                out += [f"{pointer}/{key}/{i}" for i in range(len(node[key]))]
        out += [f"{pointer}/{key}" for key in _IN_PLACE_ONE if isinstance(node.get(key), dict)]
        if isinstance(node.get("dependentSchemas"), dict):
            out += [f"{pointer}/dependentSchemas/{_escape(k)}" for k in node["dependentSchemas"]]
        return out

    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in nodes:
        if start in state:
            continue
        path: list[str] = []
        stack: list[tuple[str, list[str]]] = [(start, in_place(start))]
        state[start] = 1
        path.append(start)
        while stack:
            at, children = stack[-1]
            if not children:
                stack.pop()
                path.pop()
                state[at] = 2
                continue
            child = children.pop()
            if state.get(child) == 1:
                return [*path[path.index(child) :], child]
            if child not in state:
                state[child] = 1
                path.append(child)
                stack.append((child, in_place(child)))
    return None


def _target(ref: str) -> str:
    """``#/$defs/a`` → ``/$defs/a`` (a JSON pointer into the document; ``#`` → ``""``)."""
    return unquote(ref[1:])


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _as_path(pointer: str) -> str:
    """A JSON pointer as the dotted path of wire errors: ``/$defs/a/0`` → ``.$defs.a[0]``."""
    out = ""
    for token in pointer.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        out += f"[{key}]" if key.isdigit() else f".{key}"
    return out


def _error(path: str, message: str) -> dict[str, str]:
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "…"
    return {"path": path, "message": message}
