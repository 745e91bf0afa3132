"""``ponder login PROVIDER``: a device sign-in, shown to the person at the terminal (with a progress
line while it waits for the code to be entered)."""

import argparse
import sys
from typing import Any

from daemon.cli.terminal import progress
from daemon.cli.wording import for_person
from daemon.jsonrpc.client import RpcClient


async def login(client: RpcClient, args: argparse.Namespace) -> int:
    started = await client.request("auth/login", {"provider": args.provider})
    print(f"Open {started['verification_uri']} and enter the code {started['user_code']}.", file=sys.stderr)
    print(f"Waiting up to {started['expires_in'] // 60} minutes…", file=sys.stderr)
    completed: dict[str, Any] | None = None
    async with progress("Waiting for the code to be entered…"):
        async for method, params in client.notifications:
            if method == "auth/completed" and params["provider"] == args.provider:
                completed = params
                break
    if completed is None:
        return 1
    if completed["ok"]:
        print(f"Signed in to {args.provider}.", file=sys.stderr)
        return 0
    print(f"ponder: {for_person(completed.get('error') or 'the sign-in failed')}", file=sys.stderr)
    return 1
