"""``schemas/protocol.json`` is generated from ``protocol/`` and must not go stale."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_committed_schema_matches_the_protocol_types():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_schemas.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_schema_covers_every_method_and_event():
    from protocol.events import AgentEvent
    from protocol.methods import METHODS

    schema = json.loads((ROOT / "schemas" / "protocol.json").read_text())
    assert set(schema["methods"]) == set(METHODS)
    event_refs = {ref["$ref"].rsplit("/", 1)[-1] for ref in schema["notifications"]["agent/event"]["anyOf"]}
    assert event_refs == {t.__name__ for t in AgentEvent.__args__}
    # outgoing objects forbid unknown fields, so nothing undeclared can reach the wire unnoticed
    assert schema["$defs"]["TurnEnd"]["additionalProperties"] is False
