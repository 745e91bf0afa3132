"""``ponder ask``, ``ponder sessions``, ``ponder models`` and ``ponder mcp``: clients of a spawned daemon.

On a terminal, ``ask`` shows thinking dimmed and the answer normally, and asks before a
tool changes anything; piped, it prints only the answer; ``--json`` prints every event
as a JSON line. Ctrl-C cancels the turn cleanly. The exit status is non-zero when the
turn ends in error (1) or is cancelled (130).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

import anyio

from daemon.client import RpcClient, RpcError, spawn_daemon
from daemon.providers.table import OFFLINE_PROVIDERS, PROVIDERS

DIM, RESET = "\x1b[2m", "\x1b[0m"
_KEY_ENVS = [info.key_envs[0] for info in PROVIDERS.values() if info.key_envs][:3]
MOCK_NOTICE = (
    "ponder: no provider is configured, so this uses the offline mock model {model}. "
    f"Set {_KEY_ENVS[0]} (or {', '.join(_KEY_ENVS[1:])}, ...) or pass --model to use a real one."
)


def run(args: argparse.Namespace, daemon: subprocess.Popen[bytes] | None = None) -> int:
    """Run the client command ``args`` against ``daemon`` (from ``start_daemon``; started here if None)."""
    backend = os.environ.get("PONDER_ASYNC_BACKEND", "asyncio")
    try:
        return anyio.run(_run, args, daemon, backend=backend)
    except BaseException as exc:
        error = _find(exc, RpcError)
        if error is not None:
            print(f"ponder: {error.message}", file=sys.stderr)
            return 1
        if _find(exc, KeyboardInterrupt) is not None:
            return 130
        raise


def _find(exc: BaseException, kind: type[BaseException]) -> Any:
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _find(inner, kind)
        if found is not None:
            return found
    return None


async def _run(args: argparse.Namespace, daemon: subprocess.Popen[bytes] | None) -> int:
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    on_request = _ask_permission if interactive else None
    async with spawn_daemon(home=args.home, log_level="warning", on_request=on_request, started=daemon) as client:
        await client.request(
            "initialize",
            {
                "protocol_version": 1,
                "client_info": {"name": "ponder-cli", "version": "1"},
                "capabilities": {"permission_requests": interactive},
            },
        )
        if args.command == "ask":
            code = await _ask(client, args)
        elif args.command == "login":
            code = await _login(client, args)
        elif args.command == "sessions":
            code = await _sessions(client, args)
        elif args.command == "compact":
            code = await _compact(client, args)
        elif args.command == "mcp":
            code = await _mcp(client, args)
        else:
            code = await _models(client, args)
        await client.request("shutdown")
        return code


async def _ask(client: RpcClient, args: argparse.Namespace) -> int:
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        print("ponder: nothing to ask (give a prompt or pipe one in).", file=sys.stderr)
        return 2
    session_id = await _open_session(client, args)
    turn = await client.request("session/prompt", {"session_id": session_id, "text": prompt})
    printer = _Printer(json_mode=args.json, tty=sys.stdout.isatty())
    end: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:

        async def cancel_on_interrupt() -> None:
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                async for _ in signals:
                    print("\nponder: cancelling…", file=sys.stderr)
                    await client.request("session/cancel", {"session_id": session_id})

        tg.start_soon(cancel_on_interrupt)
        async for event in client.events(turn["turn_id"]):
            printer.show(event)
            if event["type"] == "turn_end":
                end = event
        tg.cancel_scope.cancel()
    printer.close()
    if end.get("stop_reason") == "error":
        error = end.get("error") or {}
        print(f"ponder: {error.get('message', 'the turn failed')}", file=sys.stderr)
        return 1
    if end.get("stop_reason") == "cancelled":
        return 130
    if not args.json:
        print(f"ponder: session {session_id}", file=sys.stderr) if sys.stderr.isatty() else None
    return 0


async def _open_session(client: RpcClient, args: argparse.Namespace) -> str:
    session_id = args.session
    if args.continue_last:
        cwd = os.path.abspath(args.cwd or os.getcwd())
        listed = await client.request("session/list", {"cwd": cwd, "limit": 1})
        if not listed["sessions"]:
            raise RpcError(-32001, f"No session to continue in {cwd}.")
        session_id = listed["sessions"][0]["session_id"]
    if session_id:
        if args.model:
            await client.request("model/set", {"session_id": session_id, "model_id": args.model})
        if args.thinking:
            await client.request("thinking/set", {"session_id": session_id, "level": args.thinking})
        await client.request("session/get", {"session_id": session_id})
        return session_id
    params: dict[str, Any] = {"cwd": os.path.abspath(args.cwd or os.getcwd())}
    if args.model:
        params["model_id"] = args.model
    if args.thinking:
        params["thinking_level"] = args.thinking
    if args.approval:
        params["approval_policy"] = args.approval
    started = await client.request("session/start", params)
    model_id = started["session"]["model_id"]
    if not args.model and model_id.split("/", 1)[0] in OFFLINE_PROVIDERS:
        print(MOCK_NOTICE.format(model=model_id), file=sys.stderr)
    thinking = started["thinking"]
    if thinking.get("reason"):
        print(f"ponder: {thinking['reason']}", file=sys.stderr)
    return started["session"]["session_id"]


class _Printer:
    def __init__(self, *, json_mode: bool, tty: bool) -> None:
        self.json_mode = json_mode
        self.tty = tty
        self.in_thinking = False
        self.wrote_text = False
        self.closed = False  # stdout went away (e.g. piped into head): stop writing

    def show(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self._show(event)
        except BrokenPipeError:
            self.closed = True

    def _show(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if self.json_mode:
            sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
            sys.stdout.flush()
            return
        if kind == "thinking_delta" and self.tty:
            if not self.in_thinking:
                sys.stdout.write(DIM)
                self.in_thinking = True
            sys.stdout.write(event["delta"])
        elif kind == "thinking_end" and self.tty and self.in_thinking:
            sys.stdout.write(RESET + "\n\n")
            self.in_thinking = False
        elif kind == "text_delta":
            sys.stdout.write(event["delta"])
            self.wrote_text = True
        elif kind == "tool_execution_start" and self.tty:
            sys.stdout.write(f"{DIM}→ {event['name']} {json.dumps(event['arguments'], ensure_ascii=False)}{RESET}\n")
        elif kind == "retry":
            print(f"ponder: {event['error']['message']} Retrying in {event['delay_ms'] / 1000:.1f}s…", file=sys.stderr)
        sys.stdout.flush()

    def close(self) -> None:
        if self.closed:
            return
        if self.in_thinking:
            sys.stdout.write(RESET)
        if self.wrote_text and not self.json_mode:
            sys.stdout.write("\n")
        sys.stdout.flush()


async def _ask_permission(method: str, params: Any) -> Any:
    if method != "permission/request":
        raise ValueError(f"unexpected request {method}")

    def ask() -> str:
        sys.stderr.write(f"\n{params['title']}\nAllow? [y]es once / [a]lways this session / [N]o: ")
        sys.stderr.flush()
        with open("/dev/tty") as tty:
            answer = tty.readline().strip().lower()
        return {"y": "allow_once", "yes": "allow_once", "a": "allow_session"}.get(answer, "deny")

    return {"decision": await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)}


async def _sessions(client: RpcClient, args: argparse.Namespace) -> int:
    if args.session_id:
        resumed = await client.request("session/resume", {"session_id": args.session_id})
        session = resumed["session"]
        print(
            f"{session['session_id']}  {session['title'] or '(untitled)'}  {session['model_id']}  thinking={session['thinking_level']}"
        )
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
            f"{session['model_id']}  {session['title'] or ''}  {session['cwd']}"
        )
    return 0


async def _compact(client: RpcClient, args: argparse.Namespace) -> int:
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


async def _login(client: RpcClient, args: argparse.Namespace) -> int:
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


async def _models(client: RpcClient, args: argparse.Namespace) -> int:
    params = {"provider": args.provider} if args.provider else {}
    listed = await client.request("models/list", params)
    for model in listed["models"]:
        levels = ",".join(model["thinking_levels"]) or "-"
        mark = " " if model["available"] else "×"
        print(
            f"{mark} {model['id']:<42} {model['api']:<17} thinking: {levels} (default {model['default_thinking_level']})"
        )
    return 0


async def _mcp(client: RpcClient, args: argparse.Namespace) -> int:
    """What ``mcp/list`` says, for a person; exit status 1 when a server failed."""
    listed = await client.request("mcp/list")
    servers = listed["servers"]
    if args.json:
        print(json.dumps(listed, ensure_ascii=False, indent=2))
    elif not servers:
        print(
            "No MCP servers are configured; add [mcp_servers.NAME] (command, args, env) to config.toml in ponder's home."
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
