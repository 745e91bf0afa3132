"""Validates every message the daemon writes against the generated ``schemas/protocol.json``
(its tagged unions checked through their tag: ``tests/support/tagged_unions``)."""

from functools import cache
from pathlib import Path
from typing import Any

from tests.support.tagged_unions import Validator, through_tags

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "protocol.json"


@cache
def _root() -> dict[str, Any]:
    import json

    root: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return {**root, "$defs": through_tags(root["$defs"], root["$defs"], "type")}


@cache
def _validator(pointer: str) -> Any:
    return Validator({**_root(), "$ref": pointer})


def check(instance: Any, pointer: str) -> None:
    """Raise AssertionError unless ``instance`` fits the schema ``pointer`` names."""
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
        check(message, "#/$defs/JsonRpcRequest")
        check(message["params"], member_pointer("DaemonRequests", message["method"], "params"))
    elif "method" in message:
        check(message, "#/$defs/JsonRpcNotification")
        check(message["params"], member_pointer("Notifications", message["method"], "params"))
    elif "error" in message:
        check(message, "#/$defs/JsonRpcErrorResponse")
    else:
        check(message, "#/$defs/JsonRpcResponse")
        method = method_of_id.get(message["id"])
        if method is not None:
            check(message["result"], member_pointer("Methods", method, "result"))
