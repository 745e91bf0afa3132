"""``ponder sessions [ID]``: the stored sessions, or one session's messages and compactions."""

import argparse
import json

from daemon.cli.figures import totals_text, usage_line
from daemon.jsonrpc.client import RpcClient


async def sessions(client: RpcClient, args: argparse.Namespace) -> int:
    if args.session_id:
        resumed = await client.request("session/resume", {"session_id": args.session_id})
        session = resumed["session"]
        print(
            f"{session['session_id']}  {session['title'] or '(untitled)'}  {session['model_id']}  "
            f"thinking={session['thinking_level']}"
        )
        print(f"Totals: {totals_text(session).strip()}  {usage_line(session) or ''}".rstrip())
        for item in resumed["items"]:
            if item["kind"] == "compaction":
                print(
                    f"[{item['seq']}] compaction ({item['trigger']}, about {item['tokens_before']:,} → "
                    f"{item['tokens_after']:,} tokens; kept from [{item['first_kept_seq']}]): "
                    f"{' '.join(item['summary'].split())[:100]}"
                )
                continue
            message = item
            for block in message["content"]:
                text = (
                    block.get("text")
                    if block["type"] != "tool_call"
                    else f"{block['name']}({json.dumps(block['arguments'])})"
                )
                label = f"{message['role']}/{block['type']}"
                print(f"[{message['seq']}] {label}: {text}")
        return 0
    listed = await client.request("session/list", {"limit": args.limit})
    for session in listed["sessions"]:
        print(
            f"{session['session_id']}  {session['updated_at']}  {session['message_count']:>4} msgs  "
            f"{totals_text(session)}  {session['model_id']}  {session['title'] or ''}  {session['cwd']}"
        )
    return 0
