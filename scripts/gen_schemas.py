"""Write ``schemas/protocol.json``, the JSON Schema of the ponder wire protocol, from ``protocol/``.

One bundle: every type under ``$defs``, and maps from each method to its params and
result, each notification to its params, and each daemon → client request to its
params and result. ``--check`` exits non-zero when the committed file is stale.

    uv run python scripts/gen_schemas.py [--check]
"""

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protocol import PROTOCOL_VERSION  # noqa: E402
from protocol.events import NOTIFICATIONS  # noqa: E402
from protocol.methods import CLIENT_REQUESTS, METHODS, CancelRequestParams  # noqa: E402

OUTPUT = ROOT / "schemas" / "protocol.json"
REF = "#/$defs/{name}"


def build() -> dict[str, Any]:
    entries: list[tuple[str, str, Any]] = []  # (section, key, type)
    for method, (params, result) in METHODS.items():
        entries.append(("methods.params", method, params))
        if result is not None:
            entries.append(("methods.result", method, result))
    for method, params in NOTIFICATIONS.items():
        entries.append(("notifications", method, params))
    entries.append(("notifications", "$/cancelRequest", CancelRequestParams))
    for method, (params, result) in CLIENT_REQUESTS.items():
        entries.append(("client_requests.params", method, params))
        entries.append(("client_requests.result", method, result))
    schemas, components = msgspec.json.schema_components([t for _, _, t in entries], ref_template=REF)
    methods: dict[str, dict[str, Any]] = {}
    notifications: dict[str, Any] = {}
    client_requests: dict[str, dict[str, Any]] = {}
    for (section, key, _), schema in zip(entries, schemas, strict=True):
        if section == "notifications":
            notifications[key] = schema
        elif section.startswith("methods"):
            methods.setdefault(key, {})[section.split(".")[1]] = schema
        else:
            client_requests.setdefault(key, {})[section.split(".")[1]] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ponder.dev/schemas/protocol.json",
        "title": f"ponder wire protocol, version {PROTOCOL_VERSION}",
        "description": "Generated from protocol/ by scripts/gen_schemas.py; do not edit by hand.",
        "methods": methods,
        "notifications": notifications,
        "client_requests": client_requests,
        "envelopes": {
            "result": {
                "type": "object",
                "required": ["jsonrpc", "id", "result"],
                # JSON-RPC 2.0 allows (and discourages) a null request id; the answer echoes it.
                "properties": {"jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]}},
            },
            "error": {
                "type": "object",
                "required": ["jsonrpc", "id", "error"],
                "properties": {
                    "jsonrpc": {"const": "2.0"},
                    "id": {"type": ["string", "integer", "null"]},
                    "error": {
                        "type": "object",
                        "required": ["code", "message", "data"],
                        "properties": {
                            "code": {"type": "integer"},
                            "message": {"type": "string"},
                            "data": {"type": "object"},
                        },
                    },
                },
            },
            "notification": {
                "type": "object",
                "required": ["jsonrpc", "method", "params"],
                "properties": {"jsonrpc": {"const": "2.0"}, "method": {"type": "string"}},
                "not": {"required": ["id"]},
            },
            "request": {
                "type": "object",
                "required": ["jsonrpc", "id", "method", "params"],
                "properties": {"jsonrpc": {"const": "2.0"}, "id": {"type": "string"}, "method": {"type": "string"}},
            },
        },
        "$defs": dict(sorted(components.items())),
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run `uv run python scripts/gen_schemas.py`", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
