"""``ponder compact ID [instructions]``: run a compaction turn and say how it ended."""

import argparse
import sys
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

from daemon.jsonrpc.client import RpcClient


async def compact(client: RpcClient, args: argparse.Namespace) -> int:
    """``ponder compact SESSION [instructions]``: run a compaction turn and say how it ended."""
    instructions = " ".join(args.instructions).strip() or None
    params = {"session_id": args.session_id} | ({"instructions": instructions} if instructions else {})
    started = await client.request("session/compact", params)
    compaction_id, turn_id, before = started["compaction_id"], None, None
    # An async generator (closed on leaving, so nothing is left to the GC); typed as an iterator.
    async with aclosing(cast(AsyncGenerator[dict[str, Any], None], client.events())) as events:
        async for event in events:
            if event.get("compaction_id") == compaction_id:
                turn_id = event["turn_id"]
                before = event.get("tokens_before", before)
                if event["type"] == "compaction_end":
                    return _compaction_said(event, before)
            elif turn_id is not None and event["turn_id"] == turn_id and event["type"] == "turn_end":
                break
    print("The compaction ended without a result.", file=sys.stderr)
    return 1


def _compaction_said(end: dict[str, Any], before: int | None) -> int:
    if end["status"] == "completed":
        print(f"Compacted {end['compaction_id']}: about {before or 0:,} → {end['tokens_after']:,} tokens.")
        return 0
    if end["status"] == "skipped":
        print("Nothing to compact yet: the conversation is all recent.")
        return 0
    error = (end.get("error") or {}).get("message") or end["status"]
    print(f"Compaction {end['status']}: {error}", file=sys.stderr)
    return 1
