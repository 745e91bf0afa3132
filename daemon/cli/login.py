"""``ponder login PROVIDER``: a device sign-in, shown to the person at the terminal."""

import argparse
import sys

from daemon.jsonrpc.client import RpcClient


async def login(client: RpcClient, args: argparse.Namespace) -> int:
    started = await client.request("auth/login", {"provider": args.provider})
    print(f"Open {started['verification_uri']} and enter the code {started['user_code']}.", file=sys.stderr)
    print(f"Waiting up to {started['expires_in'] // 60} minutes…", file=sys.stderr)
    async for method, params in client.notifications:
        if method == "auth/completed" and params["provider"] == args.provider:
            if params["ok"]:
                print(f"Signed in to {args.provider}.", file=sys.stderr)
                return 0
            print(f"ponder: {params.get('error') or 'sign-in failed'}", file=sys.stderr)
            return 1
    return 1
