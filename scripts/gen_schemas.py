"""Write ``schemas/protocol.json``, the JSON Schema of the ponder wire protocol, from ``protocol/``.

One JSON Schema 2020-12 document whose ``$defs`` hold everything, so that code generators
(datamodel-code-generator, quicktype, json-schema-to-typescript, ``scripts/gen_typescript.py``)
see all of it:

- every wire object, tagged unions (``AgentEvent`` and ``Block``, discriminated by ``type``)
  as ``oneOf`` + ``const`` tags + a ``discriminator`` mapping, and the named enums;
- three tables, ``Methods`` (client → daemon requests), ``Notifications`` and
  ``DaemonRequests`` (daemon → client requests): an object whose property per method name
  refers to one named type per method, ``{method, params, result}`` (``{method, params}``
  for a notification). They describe types, not messages;
- the lines of ``ponder ask --json`` (``AskJsonLine``: ``AskHeader``, an ``AgentEvent``, ``AskResult``);
- the JSON-RPC 2.0 envelopes every message fits (``JsonRpcRequest``, ``JsonRpcNotification``,
  ``JsonRpcResponse``, ``JsonRpcErrorResponse``).

A field of a daemon → client object is required: msgspec writes every field, defaults
included, so it is always sent; only one that defaults to ``msgspec.UNSET`` is left out
until set, and stays optional. Client → daemon params keep their defaults optional.

``--check`` exits non-zero when the committed file is stale.

    uv run python scripts/gen_schemas.py [--check]
"""

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import gen_typescript

from protocol import PROTOCOL_VERSION, events, headless, methods, objects
from protocol.errors import ErrorCode
from protocol.events import NOTIFICATIONS, AgentEvent, HookEventName, HookStatus, PermissionSource, ReplyRole
from protocol.headless import AskLine, AskStatus
from protocol.methods import (
    CLIENT_REQUESTS,
    METHODS,
    Admission,
    CancelRequestParams,
    ClientRole,
    ContinueAction,
    CredentialSource,
    Delivery,
    McpServerStatus,
    PermissionDecision,
    Replay,
    TransportKind,
)
from protocol.objects import (
    ApprovalPolicy,
    Block,
    MessageOrigin,
    MessageStatus,
    MessageStopReason,
    PatternWord,
    PlanStatus,
    RequestedThinkingLevel,
    Role,
    RuleDecision,
    RuleSource,
    SessionStatus,
    StopReason,
    ThinkingLevel,
)

OUTPUT = ROOT / "schemas" / "protocol.json"
REF = "#/$defs/{name}"

# Unions and enums that have no class of their own but deserve a name in every generated
# language; wherever their schema appears inline it becomes a $ref to the named one.
NAMED: dict[str, tuple[Any, str]] = {
    "AgentEvent": (AgentEvent, "Params of `agent/event`: one event of a session, discriminated by `type`."),
    "Block": (Block, "One content block of a Message, discriminated by `type`."),
    "StopReason": (StopReason, ""),
    "MessageStopReason": (MessageStopReason, ""),
    "ThinkingLevel": (ThinkingLevel, "How hard a model thinks, in order from `off` to `max`."),
    "RequestedThinkingLevel": (
        RequestedThinkingLevel,
        "A level as asked for: one of ThinkingLevel, or `default` (follows the configured defaults).",
    ),
    "ApprovalPolicy": (ApprovalPolicy, "Which tools run without asking: see PROTOCOL.md, Approval policies."),
    "PermissionDecision": (PermissionDecision, "The person's answer to a `permission/request`."),
    "Role": (Role, "Who wrote a Message: the user, the model (`assistant`) or the tools (`tool`: their results)."),
    "ReplyRole": (
        ReplyRole,
        "Who a message streamed during a turn is from: the model, the tools (their results), or the user (a steer).",
    ),
    "MessageStatus": (MessageStatus, "`complete`, or cut short: `interrupted` (cancelled) or `error` (it failed)."),
    "SessionStatus": (SessionStatus, "`running` while a turn runs in the session, else `idle`."),
    "PlanStatus": (PlanStatus, "A plan step's status (at most one `in_progress`): see PROTOCOL.md, Plans."),
    "McpServerStatus": (McpServerStatus, "Where an MCP server is in its life: `error` says why it `failed`."),
    "CredentialSource": (CredentialSource, "Where a provider's credentials come from (never the secret itself)."),
    "Delivery": (
        Delivery,
        "How a prompt is delivered: `queue` (a turn of its own) or `steer` (joins the running turn).",
    ),
    "Admission": (Admission, "What admission did with a prompt: `started`, `queued` or `steer_pending`."),
    "MessageOrigin": (MessageOrigin, "Where a user message came from: a `prompt`, a `steer` or `session/continue`."),
    "ContinueAction": (ContinueAction, "What `session/continue` did: `resumed` a turn, or `nothing_to_continue`."),
    "RuleDecision": (RuleDecision, "What a permission rule does with the calls it matches."),
    "RuleSource": (RuleSource, "Where a permission rule comes from: see PROTOCOL.md, Permissions."),
    "PatternWord": (PatternWord, "A word of a run_command pattern: a word, or a list of alternative words."),
    "PermissionSource": (PermissionSource, "Which step decided a tool call: see PROTOCOL.md, Permissions."),
    "HookEventName": (HookEventName, "When a hook runs."),
    "ClientRole": (ClientRole, "What a connection may do: `controller` (everything) or `observer` (read and follow)."),
    "TransportKind": (TransportKind, "How a connection reached the daemon."),
    "Replay": (Replay, "What follows a `session/subscribe` answer: the missed `events`, none, or `snapshot_required`."),
    "HookStatus": (HookStatus, "How a hook ended: `blocked` when it denied, `failed`/`timed_out` when it broke."),
    "AskLine": (AskLine, "The first (`header`) or last (`result`) line of `ponder ask --json`."),
    "AskStatus": (
        AskStatus,
        "How a `ponder ask` run ended; its exit status: success 0, error 1, limit 3, denied 4, schema_failed 5, "
        "cancelled 130.",
    ),
}
# ``ponder ask --json``: every line is one of these (PROTOCOL.md "Structured output and headless runs").
ASK_JSON_LINE = {
    "title": "AskJsonLine",
    "description": "One line of `ponder ask --json`: the `header` first, then `agent/event` params, the `result` "
    "last (also when the run fails or is interrupted).",
    "oneOf": [{"$ref": REF.format(name=n)} for n in ("AskHeader", "AgentEvent", "AskResult")],
}

ID = {"type": ["string", "integer", "null"]}  # JSON-RPC 2.0 allows (and discourages) a null id; answers echo it
ENVELOPES: dict[str, dict[str, Any]] = {
    "JsonRpcRequest": {
        "description": "A request: `method` names an entry of `Methods` (client → daemon) or `DaemonRequests`.",
        "type": "object",
        "required": ["jsonrpc", "id", "method", "params"],
        "properties": {"jsonrpc": {"const": "2.0"}, "id": ID, "method": {"type": "string"}, "params": {}},
    },
    "JsonRpcNotification": {
        "description": "A notification: `method` names an entry of `Notifications`; it has no `id`.",
        "type": "object",
        "required": ["jsonrpc", "method", "params"],
        "properties": {"jsonrpc": {"const": "2.0"}, "method": {"type": "string"}, "params": {}},
        "not": {"required": ["id"]},
    },
    "JsonRpcResponse": {
        "description": "The answer to a request: `result` is the `result` of its method's table entry.",
        "type": "object",
        "required": ["jsonrpc", "id", "result"],
        "properties": {"jsonrpc": {"const": "2.0"}, "id": ID, "result": {}},
    },
    "JsonRpcErrorResponse": {
        "description": "A request that failed (or a message that could not be read: then `id` is null).",
        "type": "object",
        "required": ["jsonrpc", "id", "error"],
        "properties": {"jsonrpc": {"const": "2.0"}, "id": ID, "error": {"$ref": "#/$defs/JsonRpcError"}},
    },
    "JsonRpcError": {
        "description": "`code` says what went wrong (PROTOCOL.md, Errors, also says what `data` holds); `message` "
        "is one sentence a person can act on.",
        "type": "object",
        "required": ["code", "message", "data"],
        "properties": {
            "code": {"type": "integer", "description": ", ".join(f"{c.value} {c.name.lower()}" for c in ErrorCode)},
            "message": {"type": "string"},
            "data": {"type": "object"},
        },
    },
}

# (table, description, per-method type suffix, method -> (params, result or None))
TABLES: list[tuple[str, str, str, dict[str, tuple[Any, Any]]]] = [
    (
        "Methods",
        "Every client → daemon request: method name → its params and result.",
        "Method",
        {m: types for m, types in METHODS.items() if types[1] is not None},
    ),
    (
        "Notifications",
        "Every notification: method name → its params. All go daemon → client except `$/cancelRequest`, "
        "which both sides send.",
        "Notification",
        {**{m: (p, None) for m, p in NOTIFICATIONS.items()}, "$/cancelRequest": (CancelRequestParams, None)},
    ),
    (
        "DaemonRequests",
        "Every daemon → client request: method name → its params and the result the client answers with.",
        "Method",
        dict(CLIENT_REQUESTS),
    ),
]
OUTGOING = {("Methods", "result"), ("Notifications", "params"), ("DaemonRequests", "params")}


def type_name(method: str, suffix: str) -> str:
    """``session/start`` → ``SessionStartMethod``; ``$/cancelRequest`` → ``CancelRequestNotification``."""
    words = [w for part in method.split("/") for w in part.split("_") if w and w != "$"]
    return "".join(w[0].upper() + w[1:] for w in words) + suffix


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema object inside ``node``, ``node`` included."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def lift_named(node: Any, named: dict[str, Any]) -> Any:
    """``node`` with every inline copy of a named schema replaced by a ``$ref`` to it."""
    inline = {json.dumps(schema, sort_keys=True): name for name, schema in named.items()}

    def replace(node: Any) -> Any:
        if isinstance(node, dict):
            name = inline.get(json.dumps(node, sort_keys=True))
            if name is not None:
                return {"$ref": REF.format(name=name)}
            return {key: replace(value) for key, value in node.items()}
        if isinstance(node, list):
            return [replace(value) for value in node]
        return node

    return replace(node)


def referenced(defs: dict[str, Any], roots: list[Any]) -> set[str]:
    """Names of the ``$defs`` reachable from ``roots`` through ``$ref``s."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        for node in walk(stack.pop()):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.rsplit("/", 1)[1]
                if name not in seen:
                    seen.add(name)
                    stack.append(defs[name])
    return seen


def struct_classes() -> dict[str, type[msgspec.Struct]]:
    modules = (objects, events, methods, headless)
    return {
        name: value
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    }


def require_sent_fields(defs: dict[str, Any], outgoing: set[str], incoming: set[str]) -> None:
    """Mark every field of a daemon → client object required: it is always on the wire."""
    classes = struct_classes()
    for name in sorted(outgoing):
        schema = defs[name]
        if schema.get("type") != "object" or "properties" not in schema:
            continue
        optional = [p for p in schema["properties"] if p not in schema.get("required", [])]
        if not optional:
            continue
        if name in incoming:
            raise SystemExit(f"{name} is both sent and received, and has optional fields {optional}: split it in two")
        if classes[name].__struct_config__.omit_defaults:
            raise SystemExit(f"{name} omits defaults, so {optional} are not always sent")
        # A field that defaults to UNSET is left out until it is set (``tool_execution_end.sandbox``).
        unset = {
            field.encode_name
            for field in msgspec.structs.fields(classes[name])
            if field.default is msgspec.UNSET and field.default_factory is msgspec.NODEFAULT
        }
        schema["required"] = [p for p in schema["properties"] if p not in unset]
        for prop in schema["properties"].values():
            prop.pop("default", None)


def type_schemas() -> tuple[dict[str, Any], dict[tuple[str, str, str], Any]]:
    """The ``$defs`` of every type, and the schema of each (table, method, "params"|"result")."""
    roots: list[tuple[str, str, str]] = []
    types: list[Any] = []
    for table, _, _, entries in TABLES:
        for method, (params, result) in entries.items():
            for part, type_ in (("params", params), ("result", result)):
                if type_ is not None:
                    roots.append((table, method, part))
                    types.append(type_)
    schemas, components = msgspec.json.schema_components([*types, *(t for t, _ in NAMED.values())], ref_template=REF)
    named = dict(zip(NAMED, schemas[len(roots) :], strict=True))
    defs: dict[str, Any] = lift_named(components, named)
    for name, schema in named.items():
        rest = {k: v for k, v in schema.items() if k != "description"}
        defs[name] = {"title": name, "description": NAMED[name][1] or schema.get("description", ""), **rest}
    return defs, dict(zip(roots, lift_named(list(schemas[: len(roots)]), named), strict=True))


def add_tables(defs: dict[str, Any], by_root: dict[tuple[str, str, str], Any]) -> None:
    """One named type per method, ``{method, params, result}``, and the tables that list them."""
    for table, description, suffix, entries in TABLES:
        properties: dict[str, Any] = {}
        for method, (_, result) in entries.items():
            name = type_name(method, suffix)
            assert name not in defs, f"{name} (for {method}) collides with a type of the same name"
            member: dict[str, Any] = {"method": {"const": method}, "params": by_root[(table, method, "params")]}
            if result is not None:
                member["result"] = by_root[(table, method, "result")]
            defs[name] = {
                "title": name,
                "description": f"`{method}`: its params" + (" and result." if result is not None else "."),
                "type": "object",
                "properties": member,
                "required": list(member),
                "additionalProperties": False,
            }
            properties[method] = {"$ref": REF.format(name=name)}
        defs[table] = {
            "title": table,
            "description": description,
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }


def build() -> dict[str, Any]:
    defs, by_root = type_schemas()
    sent = [schema for (table, _, part), schema in by_root.items() if (table, part) in OUTGOING]
    sent.append(defs["AskLine"])  # what `ponder ask --json` writes: every field always there
    received = [schema for (table, _, part), schema in by_root.items() if (table, part) not in OUTGOING]
    require_sent_fields(defs, referenced(defs, sent), referenced(defs, received))
    add_tables(defs, by_root)
    for name, schema in ENVELOPES.items():
        assert name not in defs, name
        defs[name] = {"title": name, **schema}
    defs["AskJsonLine"] = ASK_JSON_LINE
    for node in walk(defs):
        # A one-value enum is a const: generators then type it as a literal, not as an enum class.
        if isinstance(node.get("enum"), list) and len(node["enum"]) == 1:
            node["const"] = node.pop("enum")[0]
        # A tagged union's members exclude each other by their tag.
        if "discriminator" in node and "anyOf" in node:
            node["oneOf"] = node.pop("anyOf")
            node["discriminator"] = node.pop("discriminator")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ponder.dev/schemas/protocol.json",
        "title": "ponder wire protocol",
        "description": f"Version {PROTOCOL_VERSION}. Generated from protocol/ by scripts/gen_schemas.py; do not edit "
        "by hand. Everything is in $defs; the tables Methods, Notifications and DaemonRequests name each method's "
        "params and result.",
        "$defs": dict(sorted(defs.items())),
    }


def render() -> dict[Path, str]:
    """The generated files and their text: the JSON Schema and the TypeScript declarations made from it."""
    schema = build()
    return {
        OUTPUT: json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False) + "\n",
        gen_typescript.OUTPUT: gen_typescript.render(schema),
    }


def main() -> int:
    outputs = render()
    if "--check" in sys.argv:
        stale = [
            path for path, text in outputs.items() if not path.exists() or path.read_text(encoding="utf-8") != text
        ]
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run `uv run python scripts/gen_schemas.py`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
