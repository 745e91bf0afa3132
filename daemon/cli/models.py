"""``ponder models``: each model ponder knows, with its thinking levels."""

import argparse

from daemon.jsonrpc.client import RpcClient


async def models(client: RpcClient, args: argparse.Namespace) -> int:
    params = {"provider": args.provider} if args.provider else {}
    listed = await client.request("models/list", params)
    for model in listed["models"]:
        levels = ",".join(model["thinking_levels"]) or "-"
        mark = " " if model["available"] else "×"
        print(
            f"{mark} {model['id']:<42} {model['api']:<17} "
            f"thinking: {levels} (default {model['default_thinking_level']})"
        )
    return 0
