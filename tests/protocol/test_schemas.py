"""``schemas/`` (JSON Schema and TypeScript declarations) is generated from ``protocol/``, must not go
stale, and must give code generators a discriminated event union and one named type per method."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from protocol.events import NOTIFICATIONS, AgentEvent
from protocol.methods import CLIENT_REQUESTS, METHODS
from tests.support.wire import check, validate_message

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "protocol.json").read_text(encoding="utf-8"))
DEFS = SCHEMA["$defs"]
EVENT_TAGS = {t.__name__: t.__struct_config__.tag for t in AgentEvent.__args__}


def _walk(node: Any):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _entry(table: str, method: str) -> dict[str, Any]:
    return DEFS[DEFS[table]["properties"][method]["$ref"].rsplit("/", 1)[1]]


def test_committed_schema_and_typescript_match_the_protocol_types():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_schemas.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_schema_is_json_schema_2020_12_with_everything_under_defs():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert set(SCHEMA) == {"$schema", "$id", "title", "description", "$defs"}, "custom top-level keys are invisible"
    for node in _walk(DEFS):
        if "$ref" in node:
            assert node["$ref"].startswith("#/$defs/") and node["$ref"].rsplit("/", 1)[1] in DEFS, node["$ref"]
        assert not (isinstance(node.get("enum"), list) and len(node["enum"]) == 1), f"a one-value enum: {node}"


def test_tables_name_every_method_notification_and_daemon_request():
    requests = {m for m, (_, result) in METHODS.items() if result is not None}
    assert set(DEFS["Methods"]["properties"]) == requests
    assert set(DEFS["Notifications"]["properties"]) == set(NOTIFICATIONS) | {"$/cancelRequest"}
    assert set(DEFS["DaemonRequests"]["properties"]) == set(CLIENT_REQUESTS)
    for table in ("Methods", "DaemonRequests"):
        for method, (params, result) in {**METHODS, **CLIENT_REQUESTS}.items():
            if method not in DEFS[table]["properties"]:
                continue
            entry = _entry(table, method)
            assert entry["properties"]["method"] == {"const": method}
            assert entry["properties"]["params"] == {"$ref": f"#/$defs/{params.__name__}"}
            assert entry["properties"]["result"] == {"$ref": f"#/$defs/{result.__name__}"}
    assert _entry("Notifications", "agent/event")["properties"]["params"] == {"$ref": "#/$defs/AgentEvent"}


def test_agent_event_is_a_one_of_with_const_tags_and_a_discriminator():
    union = DEFS["AgentEvent"]
    assert [ref["$ref"].rsplit("/", 1)[1] for ref in union["oneOf"]] == list(EVENT_TAGS)
    assert union["discriminator"] == {
        "propertyName": "type",
        "mapping": {tag: f"#/$defs/{name}" for name, tag in EVENT_TAGS.items()},
    }
    for name, tag in EVENT_TAGS.items():
        assert DEFS[name]["properties"]["type"] == {"const": tag}
        assert DEFS[name]["additionalProperties"] is False  # nothing undeclared reaches the wire unnoticed
    assert DEFS["Message"]["properties"]["content"]["items"] == {"$ref": "#/$defs/Block"}


def test_fields_the_daemon_always_sends_are_required_and_client_params_stay_optional():
    for name in ("Usage", "TurnEnd", "Message", "ServerCapabilities", "AuthCompleted"):
        assert DEFS[name]["required"] == list(DEFS[name]["properties"]), name
    # turn_end.error.errors is sent only with schema_failed (PROTOCOL.md: `error?: {…, errors?}`)
    assert DEFS["ErrorInfo"]["required"] == [p for p in DEFS["ErrorInfo"]["properties"] if p != "errors"]
    assert DEFS["SessionListParams"]["required"] == []
    assert DEFS["InitializeParams"]["required"] == ["protocol_version"]
    # the premise: the daemon's encoder writes fields left at their defaults too
    from protocol.events import TurnEnd
    from protocol.objects import Usage

    assert msgspec.json.decode(msgspec.json.encode(Usage())) == dict.fromkeys(DEFS["Usage"]["properties"])
    end = TurnEnd(session_id="s", turn_id="t", seq=1, stop_reason="end_turn", usage=None)
    assert set(msgspec.json.decode(msgspec.json.encode(end))) == set(DEFS["TurnEnd"]["properties"])


def test_stop_reasons_are_enums_with_every_value_documented():
    from daemon.providers.base import StopKind

    turn = DEFS["TurnEnd"]["properties"]["stop_reason"]
    assert turn == {"$ref": "#/$defs/StopReason"}
    # PROTOCOL.md, turn_end: end_turn | max_tokens | tool_limit | refusal | cancelled | error | budget | schema_failed
    turn_values = {"end_turn", "max_tokens", "tool_limit", "refusal", "cancelled", "error", "budget", "schema_failed"}
    assert set(DEFS["StopReason"]["enum"]) == turn_values
    # an assistant message ends as its adapter says (StopKind), or interrupted, or in error
    message_values = set(typing.get_args(StopKind)) | {"interrupted", "error"}
    assert set(DEFS["MessageStopReason"]["enum"]) == message_values
    assert DEFS["Message"]["properties"]["stop_reason"]["anyOf"] == [
        {"$ref": "#/$defs/MessageStopReason"},
        {"type": "null"},
    ]
    for name, values in (("StopReason", turn_values), ("MessageStopReason", message_values)):
        documented = set(re.findall(r"`(\w+)`:", DEFS[name]["description"]))
        assert documented == values, f"{name}: undocumented {values - documented}, unknown {documented - values}"


def test_wire_validation_reads_the_tables():
    event = {"type": "turn_end", "session_id": "s", "turn_id": "t", "seq": 3, "stop_reason": "end_turn"}
    event |= {"usage": None, "error": None, "structured_output": None}
    validate_message({"jsonrpc": "2.0", "method": "agent/event", "params": event}, {})
    not_an_event = {**event, "type": "turn_ended"}  # a tag no member has: refused like the oneOf refuses it
    for bad in ({**event, "stop_reason": "tool_use"}, {k: v for k, v in event.items() if k != "error"}, not_an_event):
        with pytest.raises(AssertionError, match="does not match"):
            validate_message({"jsonrpc": "2.0", "method": "agent/event", "params": bad}, {})
    with pytest.raises(AssertionError, match="does not match"):
        validate_message({"jsonrpc": "2.0", "id": 1, "result": {"turn_id": "t"}}, {1: "session/prompt"})
    # A union inside a message (a Message's blocks) is checked through its tag too.
    check([{"type": "text", "text": "hi"}], "#/$defs/Message/properties/content")
    for block in ({"type": "text", "text": 1}, {"type": "texts", "text": "hi"}, {"text": "hi"}, "hi"):
        with pytest.raises(AssertionError, match="does not match"):
            check([{"type": "text", "text": "hi"}, block], "#/$defs/Message/properties/content")
    with pytest.raises(AssertionError, match="not in Notifications"):
        validate_message({"jsonrpc": "2.0", "method": "agent/nonsense", "params": {}}, {})


# --- a Python code generator -------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The pydantic models ``datamodel-code-generator`` makes of schemas/protocol.json, imported."""
    out = tmp_path_factory.mktemp("codegen") / "ponder_protocol.py"
    command = [sys.executable, "-m", "datamodel_code_generator", "--input", str(ROOT / "schemas" / "protocol.json")]
    command += ["--input-file-type", "jsonschema", "--output", str(out), "--output-model-type", "pydantic_v2.BaseModel"]
    command += ["--target-python-version", "3.11", "--formatters", "builtin", "--disable-timestamp"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    spec = importlib.util.spec_from_file_location("ponder_protocol", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ponder_protocol"] = module  # pydantic resolves forward references through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["ponder_protocol"]


def test_python_generator_makes_events_a_discriminated_union(generated: Any):
    classes = {name: getattr(generated, name) for name in EVENT_TAGS}
    for name, tag in EVENT_TAGS.items():
        assert typing.get_args(classes[name].model_fields["type"].annotation) == (tag,), name
    union = generated.AgentEvent
    assert set(typing.get_args(union.model_fields["root"].annotation)) == set(classes.values())
    assert union.model_fields["root"].discriminator == "type"
    wire = {"type": "text_delta", "session_id": "s", "turn_id": "t", "seq": 4, "message_id": "m", "index": 0}
    event = union.model_validate({**wire, "delta": "hi"}).root
    assert type(event) is classes["TextDelta"] and event.delta == "hi"
    with pytest.raises(ValueError, match="does not match any of the expected tags"):
        union.model_validate({**wire, "type": "text_deltas", "delta": "hi"})


def test_python_generator_makes_one_named_type_per_method(generated: Any):
    for table in ("Methods", "DaemonRequests"):
        for method in DEFS[table]["properties"]:
            entry = _entry(table, method)
            cls = getattr(generated, entry["title"])
            fields = cls.model_fields
            assert typing.get_args(fields["method"].annotation) == (method,)
            for part in ("params", "result"):
                expected = getattr(generated, entry["properties"][part]["$ref"].rsplit("/", 1)[1])
                assert fields[part].annotation is expected, (method, part)
    # every enum and union has a name of its own: no Type1, Status2, ... for a person to rename by hand
    classes = [name for name, value in vars(generated).items() if isinstance(value, type)]
    assert [name for name in classes if re.search(r"\d$", name)] == []
    assert all(field.is_required() for field in generated.Usage.model_fields.values())
    stop_reason = generated.Message.model_fields["stop_reason"].annotation
    assert set(typing.get_args(stop_reason)) == {generated.MessageStopReason, type(None)}


# --- TypeScript ----------------------------------------------------------------------------------

TS = (ROOT / "schemas" / "protocol.d.ts").read_text(encoding="utf-8")


def test_typescript_declares_a_tagged_event_union_and_the_method_tables():
    members = re.search(r"^export type AgentEvent = (.*);$", TS, re.MULTILINE)
    assert members is not None and members.group(1).split(" | ") == list(EVENT_TAGS)
    for name, tag in EVENT_TAGS.items():
        body = re.search(rf"^export interface {name} {{\n(.*?)^}}", TS, re.MULTILINE | re.DOTALL)
        assert body is not None and f'  type: "{tag}";\n' in body.group(1), name
    assert '  "session/start": SessionStartMethod;\n' in TS
    assert "  params: SessionStartParams;\n  result: SessionResult;\n" in TS
    assert '  "permission/request": PermissionRequestMethod;\n' in TS
    assert '  "agent/event": AgentEventNotification;\n' in TS


FRONTEND = """\
import type { AgentEvent, NotificationMessage, ResultOf, ParamsOf } from "./protocol";

export function describe(event: AgentEvent): string {
  switch (event.type) {
BODY
    default: {
      const unreachable: never = event;
      return unreachable;
    }
  }
}

export function onMessage(message: NotificationMessage): string {
  if (message.method === "agent/event") return describe(message.params);
  return message.method;
}

const params: ParamsOf<"session/start"> = { model_id: "mock/thinker", approval_policy: "ask" };
declare const result: ResultOf<"session/start">;
export const level: string = result.thinking.effective + String(params.cwd);
"""


def _case(name: str, tag: str) -> str:
    # each case reads a field only its own event has, so it compiles only if the case narrowed
    own = {"TurnStart": "model_id", "TextDelta": "delta", "TurnEnd": "stop_reason", "MessageEnd": "message.seq"}
    field = own.get(name, "seq")
    return f'    case "{tag}":\n      return String(event.{field});\n'


def _compile(tmp_path: Path, tsc: str, bodies: dict[str, str]) -> dict[str, str]:
    """Compile one frontend per body in one ``tsc`` run (each file is a module of its own, so
    they check independently; the compiler's start-up, most of its time, is paid once) and
    return each file's errors."""
    shutil.copy(ROOT / "schemas" / "protocol.d.ts", tmp_path / "protocol.d.ts")
    for name, body in bodies.items():
        (tmp_path / f"{name}.ts").write_text(FRONTEND.replace("BODY", body), encoding="utf-8")
    command = [tsc, "--strict", "--noEmit", "--target", "es2020", "--moduleResolution", "node"]
    compiled = subprocess.run(
        [*command, *(str(tmp_path / f"{name}.ts") for name in bodies)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    errors = {name: "" for name in bodies}
    for line in compiled.stdout.splitlines():
        name = line.split(".ts(", 1)[0]
        assert name in errors, compiled.stdout + compiled.stderr  # an error in protocol.d.ts itself
        errors[name] += line + "\n"
    assert (compiled.returncode == 0) == (not any(errors.values())), compiled.stdout + compiled.stderr
    return errors


def test_typescript_frontend_narrows_events_with_tsc(tmp_path: Path):
    pinned = ROOT / "tests" / "protocol" / "ts_frontend" / "node_modules" / ".bin" / "tsc"
    tsc = str(pinned) if pinned.exists() else shutil.which("tsc")
    if tsc is None:
        pytest.skip("needs the TypeScript compiler: npm ci --prefix tests/protocol/ts_frontend (.ci/run does it)")
    every_case = "".join(_case(name, tag) for name, tag in EVENT_TAGS.items())
    errors = _compile(
        tmp_path,
        tsc,
        {
            "every": every_case,
            # exhaustiveness: leave one event type out and the `never` check must fail
            "missing": "".join(_case(name, tag) for name, tag in EVENT_TAGS.items() if name != "Retry"),
            # narrowing: a field of another event type is an error in this case
            "wrong": every_case.replace("return String(event.delta)", "return String(event.stop_reason)"),
        },
    )
    assert errors["every"] == ""
    assert "not assignable to type 'never'" in errors["missing"]
    assert "stop_reason" in errors["wrong"] and "never" not in errors["wrong"], errors["wrong"]
