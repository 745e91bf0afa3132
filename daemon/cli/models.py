"""``ponder models``: each model ponder knows, with its thinking levels, as a table (``--json``:
what the daemon returned)."""

import argparse
import json
import sys
from typing import Any

from daemon.cli.table import Column, render
from daemon.cli.terminal import DIM, GREEN
from daemon.jsonrpc.client import RpcClient

COLUMNS = [
    Column("MODEL"),
    Column("READY", style_of=lambda text: GREEN if text == "yes" else DIM),
    Column("CONTEXT", right=True),
    Column("THINKING LEVELS", shrinks=True),
    Column("DEFAULT"),
]
NOT_READY = (
    "READY no: ponder has no credentials for that provider yet "
    "(set its key, e.g. ANTHROPIC_API_KEY, or sign in: `ponder login copilot`)."
)


async def models(client: RpcClient, args: argparse.Namespace) -> int:
    params = {"provider": args.provider} if args.provider else {}
    listed = await client.request("models/list", params)
    if args.json:
        print(json.dumps(listed, ensure_ascii=False, indent=2))
        return 0
    for line in render(COLUMNS, [_row(model) for model in listed["models"]], sys.stdout):
        print(line)
    if sys.stdout.isatty() and any(not model["available"] for model in listed["models"]):
        print(f"\n{NOT_READY}")  # for the person reading; a program reading the table gets rows only
    return 0


def _row(model: dict[str, Any]) -> list[str]:
    window = model.get("context_window")
    return [
        model["id"],
        "yes" if model["available"] else "no",
        f"{window // 1000:,}k" if window and window >= 1000 else str(window or "-"),
        " ".join(model["thinking_levels"]) or "-",
        model["default_thinking_level"] if model["thinking_levels"] else "-",
    ]
