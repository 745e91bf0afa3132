"""``ponder sessions [ID]``: the stored sessions as a table (newest first, times relative to now,
tokens and cost), or one session's settings, totals, messages and compactions in order.
``--json`` prints what the daemon returned instead."""

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from daemon.cli.figures import money, usage_line
from daemon.cli.table import Column, render
from daemon.cli.terminal import BOLD, CYAN, DIM, Style, ago

if TYPE_CHECKING:  # the table is also printed without a daemon (daemon.cli.listing): no client stack then
    from daemon.jsonrpc.client import RpcClient

COLUMNS = [
    Column("SESSION", style=DIM),
    Column("UPDATED"),
    Column("MSGS", right=True),
    Column("TOKENS", right=True),
    Column("COST", right=True),
    Column("MODEL", style=CYAN),
    Column("TITLE", shrinks=True),
]
UNTITLED = "(untitled)"


async def sessions(client: "RpcClient", args: argparse.Namespace) -> int:
    if args.session_id:
        return await _one(client, args)
    listed = await client.request("session/list", {"limit": args.limit})
    if args.json:
        print(json.dumps(listed, ensure_ascii=False, indent=2))
        return 0
    return print_table(listed["sessions"])


def print_table(sessions: list[dict[str, Any]]) -> int:
    """The stored sessions (``session/list`` rows, as JSON objects) as a table on stdout; 0."""
    if not sessions:
        print('No sessions yet: `ponder ask "…"` starts one.', file=sys.stderr)
        return 0
    rows = [
        [
            session["session_id"],
            ago(session["updated_at"]),
            f"{session['message_count']:,}",
            f"{tokens_of(session):,}",
            money(session["cost"]) if session.get("cost") is not None else "-",
            session["model_id"],
            session["title"] or UNTITLED,
        ]
        for session in sessions
    ]
    for line in render(COLUMNS, rows, sys.stdout):
        print(line)
    return 0


def tokens_of(session: dict[str, Any]) -> int:
    """Every token of every model call in the session: input and output."""
    totals = session.get("totals") or {}
    return int((totals.get("input_tokens") or 0) + (totals.get("output_tokens") or 0))


async def _one(client: "RpcClient", args: argparse.Namespace) -> int:
    resumed = await client.request("session/resume", {"session_id": args.session_id})
    if args.json:
        print(json.dumps(resumed, ensure_ascii=False, indent=2))
        return 0
    style = Style(sys.stdout)
    session = resumed["session"]
    cost = money(session["cost"]) if session.get("cost") is not None else "no price known"
    print(f"{style(BOLD, session['title'] or UNTITLED)}  {style(DIM, session['session_id'])}")
    print(
        f"  {session['model_id']} · thinking {session['thinking_level']} · approval {session['approval_policy']}"
        f" · {_home_relative(session['cwd'])}"
    )
    print(
        f"  updated {ago(session['updated_at'])} · {session['message_count']:,} messages · "
        f"{tokens_of(session):,} tokens · {cost}"
    )
    fill = usage_line(session)
    if fill is not None:
        print(f"  {fill}")
    print()
    for item in resumed["items"]:
        for line in item_lines(item):
            print(style(DIM, line) if "/thinking: " in line else line)
    return 0


def item_lines(item: dict[str, Any]) -> list[str]:
    """One stored item (a message or a compaction) as lines: ``[seq] role/block: text``."""
    if item["kind"] == "compaction":
        return [
            f"[{item['seq']}] compaction ({item['trigger']}, about {item['tokens_before']:,} → "
            f"{item['tokens_after']:,} tokens; kept from [{item['first_kept_seq']}]): "
            f"{' '.join(item['summary'].split())[:100]}"
        ]
    lines = []
    for block in item["content"]:
        if block["type"] == "tool_call":
            text = f"{block['name']}({json.dumps(block['arguments'], ensure_ascii=False)})"
        else:
            text = block.get("text") or ""
        lines.append(f"[{item['seq']}] {item['role']}/{block['type']}: {text}")
    return lines


def _home_relative(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home not in ("", "/") and (path + "/").startswith(home + "/") else path
