"""Validates every message the daemon writes against the generated ``schemas/protocol.json``."""

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "protocol.json"


@cache
def _root() -> dict[str, Any]:
    import json

    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@cache
def _validator(pointer: str) -> jsonschema.Draft202012Validator:
    schema = {**_root(), "$ref": pointer}
    return jsonschema.Draft202012Validator(schema)


def _check(instance: Any, pointer: str) -> None:
    errors = sorted(_validator(pointer).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        details = "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:3])
        raise AssertionError(f"daemon wrote a message that does not match {pointer}: {details}\n{instance!r}"[:2000])


def member_pointer(table: str, method: str, part: str) -> str:
    """JSON pointer to the ``params`` or ``result`` schema of ``method`` in a table of the schema
    (``Methods``, ``Notifications``, ``DaemonRequests``)."""
    entry = _root()["$defs"][table]["properties"].get(method)
    if entry is None:
        raise AssertionError(f"{method!r} is not in {table} of {SCHEMA_PATH.name}")
    return f"{entry['$ref']}/properties/{part}"


def validate_message(message: Any, method_of_id: dict[Any, str]) -> None:
    """Raise AssertionError unless ``message`` (one line the daemon wrote) fits the schema."""
    if isinstance(message, list):
        assert message, "the daemon wrote an empty batch"
        for item in message:
            validate_message(item, method_of_id)
        return
    assert isinstance(message, dict), f"not a JSON-RPC object: {message!r}"
    if "method" in message and "id" in message:
        _check(message, "#/$defs/JsonRpcRequest")
        _check(message["params"], member_pointer("DaemonRequests", message["method"], "params"))
    elif "method" in message:
        _check(message, "#/$defs/JsonRpcNotification")
        _check(message["params"], member_pointer("Notifications", message["method"], "params"))
    elif "error" in message:
        _check(message, "#/$defs/JsonRpcErrorResponse")
    else:
        _check(message, "#/$defs/JsonRpcResponse")
        method = method_of_id.get(message["id"])
        if method is not None:
            _check(message["result"], member_pointer("Methods", method, "result"))
