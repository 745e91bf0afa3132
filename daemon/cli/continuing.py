"""``ponder continue SESSION``: the session's last turn goes on where it was cut off (a cancel, an
error, the output limit, a crash), streamed as ``ponder ask`` streams a turn; a session whose
last reply is complete has nothing to continue (said on stderr, exit status 0). ``--json`` frames
the events as ``ponder ask --json`` does: the header line first, the result line last."""

import argparse
import sys

from daemon.cli.ask import follow_turn
from daemon.jsonrpc.client import RpcClient


async def continue_session(client: RpcClient, args: argparse.Namespace) -> int:
    result = await client.request("session/continue", {"session_id": args.session_id})
    if result["action"] == "nothing_to_continue":
        print(f"ponder: nothing to continue in session {args.session_id}: its last reply is complete.", file=sys.stderr)
        return 0
    return await follow_turn(client, args.session_id, result["turn_id"], json_mode=args.json, header=True)
