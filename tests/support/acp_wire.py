"""Validates every message ponder writes in ACP mode against the vendored ACP schema.

``tests/support/acp-schema.json`` is ACP schema 1.21.0 (copied from
``shared/vendor-schemas``). Each message is checked against the ``$defs`` entry whose
``x-method`` names its method: a result against the method's ``...Response``, params of
the agent's requests and notifications against their ``...Request`` / ``...Notification``,
errors against ``Error``. The schema's root accepts nearly anything, so it is never used.
"""

import json
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.tagged_unions import Validator, through_tags

SCHEMA_PATH = Path(__file__).resolve().parent / "acp-schema.json"


@cache
def _defs() -> dict[str, Any]:
    """The schema's definitions, its discriminated unions checked through their tag
    (``tests/support/tagged_unions``)."""
    defs = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]
    return through_tags(defs, defs, None)


@cache
def definition_for(method: str, kind: str) -> str:
    """The ``$defs`` name for ``method``'s request, response or notification."""
    suffix = {"request": "Request", "response": "Response", "notification": "Notification"}[kind]
    names = [name for name, spec in _defs().items() if spec.get("x-method") == method and name.endswith(suffix)]
    assert len(names) == 1, f"the ACP schema has no single {kind} definition for {method!r}: {names}"
    return names[0]


@cache
def _validator(name: str) -> Any:
    return Validator({"$defs": _defs(), "$ref": f"#/$defs/{name}"})


def check(instance: Any, name: str) -> None:
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        details = "; ".join(f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors[:3])
        raise AssertionError(f"ponder wrote a message that does not match {name}: {details}\n{instance!r}"[:3000])


def validate_agent_message(message: Any, method_of_id: dict[Any, str]) -> None:
    """Raise AssertionError unless ``message`` (one message ponder wrote) fits the ACP schema."""
    if isinstance(message, list):
        assert message, "ponder wrote an empty batch"
        for item in message:
            validate_agent_message(item, method_of_id)
        return
    assert isinstance(message, dict), f"not a JSON-RPC object: {message!r}"
    assert message.get("jsonrpc") == "2.0", message
    if "method" in message:
        method = message["method"]
        assert isinstance(method, str)
        kind = "request" if "id" in message else "notification"
        if kind == "request":
            assert isinstance(message["id"], (str, int)), message
        check(message.get("params"), definition_for(method, kind))
        return
    assert "id" in message, message
    if "error" in message:
        assert "result" not in message, message
        check(message["error"], "Error")
        return
    assert "result" in message, message
    method = method_of_id.get(message["id"])
    assert method is not None, f"a result for an id the client never used: {message!r}"
    if method.startswith("_"):
        assert isinstance(message["result"], dict), message  # ExtResponse: any object
        return
    check(message["result"], definition_for(method, "response"))
