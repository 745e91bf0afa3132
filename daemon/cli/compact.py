"""``ponder compact ID [instructions]``: run a compaction turn and say how it ended: before and
after in the same measure (the daemon's estimate of the request, before and after folding), with a
progress line on a terminal while the summary is written."""

import argparse
import sys
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

from daemon.cli.figures import compaction_result
from daemon.cli.terminal import progress
from daemon.jsonrpc.client import RpcClient


async def compact(client: RpcClient, args: argparse.Namespace) -> int:
    """``ponder compact SESSION [instructions]``: run a compaction turn and say how it ended."""
    instructions = " ".join(args.instructions).strip() or None
    params = {"session_id": args.session_id} | ({"instructions": instructions} if instructions else {})
    started = await client.request("session/compact", params)
    compaction_id, turn_id, before = started["compaction_id"], None, None
    end: dict[str, Any] | None = None
    # An async generator (closed on leaving, so nothing is left to the GC); typed as an iterator.
    events = cast(AsyncGenerator[dict[str, Any], None], client.events())
    async with aclosing(events), progress("Waiting for the session's running turn…") as shown:
        if not started.get("queued"):
            shown.update("Compacting…")
        async for event in events:
            if event.get("compaction_id") == compaction_id:
                turn_id = event["turn_id"]
                if event["type"] == "compaction_start":
                    before = event["tokens_before"]
                    shown.update(f"Summarizing the older conversation (about {before:,} tokens)…")
                if event["type"] == "compaction_end":
                    end = event
                    break
            elif turn_id is not None and event["turn_id"] == turn_id and event["type"] == "turn_end":
                break
    if end is not None:
        return _compaction_said(end, before)
    print("The compaction ended without a result.", file=sys.stderr)
    return 1


def _compaction_said(end: dict[str, Any], before: int | None) -> int:
    said = compaction_result(end, before or 0)
    if end["status"] == "completed":
        print(f"Compacted {end['compaction_id']}: {said.removeprefix('compacted: ')}")
        return 0
    if end["status"] == "skipped":
        print("Nothing to compact yet: the conversation is all recent.")
        return 0
    print(f"ponder: {said}", file=sys.stderr)
    return 1
