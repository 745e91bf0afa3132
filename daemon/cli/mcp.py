"""``ponder mcp``: start the MCP servers from config.toml (a progress line on a terminal while they
start) and show their status and tools."""

import argparse
import json

from daemon.cli.terminal import progress
from daemon.jsonrpc.client import RpcClient


async def mcp(client: RpcClient, args: argparse.Namespace) -> int:
    """What ``mcp/list`` says, for a person; exit status 1 when a server failed."""
    async with progress("Starting MCP servers…"):
        listed = await client.request("mcp/list")
    servers = listed["servers"]
    if args.json:
        print(json.dumps(listed, ensure_ascii=False, indent=2))
    elif not servers:
        print(
            "No MCP servers are configured; "
            "add [mcp_servers.NAME] (command, args, env) to config.toml in ponder's home."
        )
    for server in [] if args.json else servers:
        count = (
            f"{len(server['tools'])} tool{'s' if len(server['tools']) != 1 else ''}"
            if server["status"] == "ready"
            else ""
        )
        print(f"{server['name']:<20} {server['status']:<8} {count}".rstrip())
        for tool in server["tools"]:
            description = (tool["description"] or "").splitlines()[0] if tool["description"] else ""
            print(f"    {tool['name']:<24} {description}".rstrip())
        for line in (server["error"] or "").splitlines():
            print(f"    {line}")
    return 1 if any(s["status"] == "failed" for s in servers) else 0
