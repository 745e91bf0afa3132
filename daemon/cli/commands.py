"""``ponder ask``, ``ponder sessions``, ``ponder models`` and ``ponder mcp``: clients of a spawned daemon.

On a terminal, ``ask`` says on stderr how the model will think (one line, and a warning
when that differs from what was asked), shows thinking dimmed and the answer normally,
and asks before a tool changes anything; piped, it prints only the answer; ``--json``
prints every event as a JSON line. ``PONDER_FORCE_TTY=1`` makes stderr count as a
terminal (for tests, and wrappers that relay it to one). Ctrl-C cancels the turn
cleanly. The exit status is non-zero when the turn ends in error (1), with an empty
answer cut by the output limit (1), or is cancelled (130).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, TypeVar, cast

import anyio

from daemon.jsonrpc.client import RpcClient, RpcError, spawn_daemon
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


_E = TypeVar("_E", bound=BaseException)


def _find(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first ``kind`` in ``exc`` or, depth first, in the groups it is made of."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


async def _run(args: argparse.Namespace, daemon: subprocess.Popen[bytes] | None) -> int:
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    on_request = _ask_permission if interactive else None
    # Not waiting for the daemon to exit: by the end every answer is in (see spawn_daemon).
    async with spawn_daemon(
        home=args.home, log_level="warning", on_request=on_request, started=daemon, wait_for_exit=False
    ) as client:
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
    printer = _Printer(json_mode=args.json, tty=sys.stdout.isatty(), notice=_stderr_is_terminal())
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
    if end.get("stop_reason") == "max_tokens" and end.get("error"):
        print(f"ponder: {end['error']['message']}", file=sys.stderr)
        if not printer.wrote_text:  # an empty answer is no success
            return 1
    if end.get("stop_reason") == "error":
        error = end.get("error") or {}
        print(f"ponder: {error.get('message', 'the turn failed')}", file=sys.stderr)
        return 1
    if end.get("stop_reason") == "cancelled":
        return 130
    if end.get("stop_reason") == "budget":
        print(f"ponder: {(end.get('error') or {}).get('message', 'the session budget is spent')}", file=sys.stderr)
    if not args.json and _stderr_is_terminal():
        print(f"ponder: session {session_id}", file=sys.stderr)
        # Last, one line: where the session stands (its context fill and what it has cost).
        line = usage_line((await client.request("session/get", {"session_id": session_id}))["session"])
        if line is not None:
            print(line, file=sys.stderr)
    return 1 if end.get("stop_reason") == "budget" else 0


def usage_line(session: dict[str, Any]) -> str | None:
    """``Context: 12,340 / 200,000 tokens · $0.0123`` (the session's cost so far), or None before any model call."""
    context = session.get("context")
    if not context:
        return None
    window = f" / {context['size']:,}" if context.get("size") else ""
    cost = session.get("cost")
    spent = "no price known" if cost is None else _money(cost)
    return f"Context: {context['used']:,}{window} tokens · {spent}"


def totals_text(session: dict[str, Any]) -> str:
    """A session's running totals for ``ponder sessions``: tokens in and out, and their cost."""
    totals = session.get("totals") or {}
    tokens = (totals.get("input_tokens") or 0) + (totals.get("output_tokens") or 0)
    cost = session.get("cost")
    return f"{tokens:>11,} tokens {_money(cost) if cost is not None else '-':>9}"


def _money(cost: dict[str, Any]) -> str:
    amount, currency = cost["amount"], cost["currency"]
    if currency != "USD":
        return f"{amount:,.4f} {currency}"
    return f"${amount:,.4f}" if amount < 1 else f"${amount:,.2f}"


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
        await _set_budget(client, session_id, args)
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
    if thinking.get("reason") and not _stderr_is_terminal():  # on a terminal, the turn's thinking line says it
        print(f"ponder: {thinking['reason']}", file=sys.stderr)
    await _set_budget(client, started["session"]["session_id"], args)
    return started["session"]["session_id"]


async def _set_budget(client: RpcClient, session_id: str, args: argparse.Namespace) -> None:
    if args.thinking_budget is not None:
        await client.request("thinking/set", {"session_id": session_id, "budget_tokens": args.thinking_budget})


def _stderr_is_terminal() -> bool:
    return os.environ.get("PONDER_FORCE_TTY") == "1" or sys.stderr.isatty()


def thinking_lines(thinking: dict[str, Any]) -> list[str]:
    """What a person sees of a turn's thinking decision: ``Thinking: medium (14,720 tokens)`` on a
    budget model, ``Thinking: high effort`` on the others, ``Thinking: off``; then why the level
    differs from the one asked for, when it does."""
    effective = thinking["effective"]
    if effective == "off":
        lines = ["Thinking: off"]
    elif thinking.get("budget_tokens") is not None:
        lines = [f"Thinking: {effective} ({thinking['budget_tokens']:,} tokens)"]
    else:
        lines = [f"Thinking: {effective} effort"]
    if thinking.get("reason") and thinking["requested"] not in ("default", effective):
        lines.append(f"ponder: {thinking['reason']}")
    return lines


class _Printer:
    def __init__(self, *, json_mode: bool, tty: bool, notice: bool = False) -> None:
        self.json_mode = json_mode
        self.tty = tty
        self.notice = notice and not json_mode  # the thinking line on stderr
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
        if kind == "turn_start" and self.notice:
            print("\n".join(thinking_lines(event["thinking"])), file=sys.stderr, flush=True)
        elif kind == "thinking_delta" and self.tty:
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
            # A retry at once (another thinking level) says what it does in its message.
            wait = f" Retrying in {event['delay_ms'] / 1000:.1f}s…" if event["delay_ms"] else ""
            print(f"ponder: {event['error']['message']}{wait}", file=sys.stderr)
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
            f"{mark} {model['id']:<42} {model['api']:<17} "
            f"thinking: {levels} (default {model['default_thinking_level']})"
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
