"""``ponder ask``: one prompt in a session, streamed as it arrives.

On a terminal it says on stderr how the model will think (one line, and a warning when that
differs from what was asked), shows thinking dimmed and the answer normally, and asks before a
tool changes anything; piped, it prints only the answer; ``--json`` prints every event as a
JSON line between a header line and a result line. ``--image`` and ``--file`` attach files (read
here, sent as prompt content); ``--output-schema`` asks for an answer valid against a JSON Schema;
``--max-turns``, ``--max-cost`` and ``--max-tokens`` limit the run; ``-o`` writes the result to a
file. Ctrl-C cancels the turn cleanly; a second one quits at once. The exit status says how the run
ended (``daemon.cli.headless``: 0, 1, 2, 3, 4, 5 or 130).
"""

import argparse
import base64
import contextlib
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import anyio

from daemon.cli.figures import compaction_result, usage_line
from daemon.cli.headless import (
    EXIT_CODES,
    USAGE_CODES,
    USAGE_ERROR,
    RunRecord,
    UsageError,
    header_line,
    load_output_schema,
    write_line,
)
from daemon.cli.opening import session_start_params
from daemon.cli.terminal import DIM, RESET, colour_on, stderr_is_terminal
from daemon.cli.wording import for_person
from daemon.jsonrpc.client import RpcClient, RpcError
from daemon.vendors.table import OFFLINE_PROVIDERS, PROVIDERS

TOOL_ARGS_CHARS = 200  # of a tool call's arguments shown as it starts
_KEY_ENVS = [info.key_envs[0] for info in PROVIDERS.values() if info.key_envs][:3]
MOCK_NOTICE = (
    "ponder: no provider is configured, so this uses the offline mock model {model}. "
    f"Set {_KEY_ENVS[0]} (or {', '.join(_KEY_ENVS[1:])}, ...) or pass --model to use a real one."
)


async def ask(client: RpcClient, args: argparse.Namespace) -> int:
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        print("ponder: nothing to ask (give a prompt or pipe one in).", file=sys.stderr)
        return USAGE_ERROR
    try:
        attached = attachments(args.image, args.file)
        schema = load_output_schema(args.output_schema) if args.output_schema is not None else None
    except (AttachmentError, UsageError) as exc:
        print(f"ponder: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        session_id = await _open_session(client, args, prompt)
        params: dict[str, Any] = {"session_id": session_id}
        if attached:
            params["content"] = [{"type": "text", "text": prompt}, *attached]
        else:
            params["text"] = prompt
        if schema is not None:
            params["output_schema"] = schema
        if args.max_turns is not None:
            params["max_turns"] = args.max_turns
        turn = await client.request("session/prompt", params)
    except RpcError as exc:  # refused before anything ran: no --json lines, a sentence on stderr
        print(f"ponder: {for_person(exc.message)}", file=sys.stderr)
        return USAGE_ERROR if exc.code in USAGE_CODES else EXIT_CODES["error"]
    return await follow_turn(
        client,
        session_id,
        turn["turn_id"],
        json_mode=args.json,
        structured=schema is not None,
        output_file=args.output,
        header=True,
    )


# After the first Ctrl-C, how long the turn may take to end before the command ends anyway.
CANCEL_GRACE_S = 3.0


async def follow_turn(
    client: RpcClient,
    session_id: str,
    turn_id: str,
    *,
    json_mode: bool,
    structured: bool = False,
    output_file: str | None = None,
    header: bool = False,
) -> int:
    """Print turn ``turn_id`` as it streams and return the exit status its end calls for
    (``daemon.cli.headless``). ``json_mode``: every event as a JSON line, between a header line
    (``header``) and a result line. Ctrl-C (or SIGTERM) cancels the turn; a second one ends the
    command at once. ``structured``: the answer is the turn's ``structured_output``, printed as
    JSON at the end rather than streamed. ``output_file``: the result is written there too."""
    printer = _Printer(
        json_mode=json_mode,
        tty=sys.stdout.isatty(),
        notice=stderr_is_terminal(),
        dim=colour_on(sys.stdout),
        show_text=not structured,
    )
    record = RunRecord(session_id)
    if header and json_mode:
        write_line(header_line(session_id))
    interrupted = False
    async with anyio.create_task_group() as tg:

        async def cancel_on_interrupt() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    if interrupted:  # the second one: no more waiting
                        if json_mode:
                            write_line(record.result_line("cancelled", structured=structured))
                        os._exit(EXIT_CODES["cancelled"])
                    interrupted = True
                    print("\nponder: cancelling… (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)
                    tg.cancel_scope.deadline = anyio.current_time() + CANCEL_GRACE_S
                    tg.start_soon(cancel_turn)  # in its own task: a second Ctrl-C is heard meanwhile

        async def cancel_turn() -> None:
            with contextlib.suppress(RpcError):
                await client.request("session/cancel", {"session_id": session_id})

        tg.start_soon(cancel_on_interrupt)
        async for event in client.events(turn_id):
            printer.show(event)
            record.see(event)
        tg.cancel_scope.cancel()
    printer.close()
    status = record.status(interrupted=interrupted)
    result = record.result(structured=structured)
    _tell(record, status)
    if structured and not json_mode and result is not None:
        printer.write_line(result)
    if output_file is not None:
        try:
            await anyio.Path(output_file).write_text(result or "", encoding="utf-8")
        except OSError as exc:
            print(f"ponder: -o {output_file}: cannot write it ({exc.strerror or exc}).", file=sys.stderr)
            status = "error" if status in ("success", "limit", "denied", "schema_failed") else status
    if json_mode:
        write_line(record.result_line(status, structured=structured))
    elif status not in ("error", "cancelled") and stderr_is_terminal():
        print(f"ponder: session {session_id}", file=sys.stderr)
        # Last, one line: where the session stands (its context fill and what it has cost).
        line = usage_line((await client.request("session/get", {"session_id": session_id}))["session"])
        if line is not None:
            print(line, file=sys.stderr)
    return EXIT_CODES[status]


def _tell(record: RunRecord, status: str) -> None:
    """Why the run did not simply succeed, in one line on stderr (the --json result line says it too)."""
    end = record.end
    error = end.get("error") or {}
    stop = end.get("stop_reason")
    if not end and status == "error":
        print("ponder: the daemon stopped before the turn ended; see logs/ponder.log in the home.", file=sys.stderr)
    elif stop in ("error", "max_tokens", "budget", "schema_failed") and error.get("message"):
        print(f"ponder: {for_person(error['message'])}", file=sys.stderr)
    elif stop == "error":
        print("ponder: the turn failed.", file=sys.stderr)
    elif stop == "tool_limit":
        print("ponder: the turn reached its limit of model calls (--max-turns).", file=sys.stderr)
    elif stop == "refusal":
        print("ponder: the provider refused to answer.", file=sys.stderr)


# What ``ask`` reads of one attached file: the daemon refuses larger images anyway (48 MiB) and
# keeps 256 KiB of a text file; the JSON line carrying them stays well under its 32 MiB limit.
MAX_ATTACHED_BYTES = 16 * 1024 * 1024


class AttachmentError(Exception):
    """An attached file that cannot be sent, said in one sentence."""


def attachments(images: list[str], files: list[str]) -> list[dict[str, Any]]:
    """Prompt blocks for ``--image`` and ``--file``. The command reads them itself (they are the
    person's own choice, anywhere on disk) and sends their bytes; the daemon checks them as it
    checks every prompt block."""
    blocks: list[dict[str, Any]] = []
    for path in images:
        data = _read(path)
        blocks.append({"type": "image", "data": base64.b64encode(data).decode("ascii"), "name": os.path.basename(path)})
    for path in files:
        data = _read(path)
        uri = Path(path).resolve().as_uri()
        try:
            blocks.append({"type": "resource", "uri": uri, "text": data.decode("utf-8")})
        except UnicodeDecodeError:  # an image sent with --file is still taken; anything else is refused
            blocks.append({"type": "resource", "uri": uri, "blob": base64.b64encode(data).decode("ascii")})
    return blocks


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise AttachmentError(f"{path} is not a regular file.")
            data = file.read(MAX_ATTACHED_BYTES + 1)
    except OSError as exc:
        raise AttachmentError(f"cannot read {path}: {exc.strerror or exc}.") from None
    if len(data) > MAX_ATTACHED_BYTES:
        raise AttachmentError(
            f"{path} is larger than {MAX_ATTACHED_BYTES // (1024 * 1024)} MiB; attach a smaller file."
        )
    return data


async def _open_session(client: RpcClient, args: argparse.Namespace, prompt: str) -> str:
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
        await _set_spending(client, session_id, args)
        await client.request("session/get", {"session_id": session_id})
        return session_id
    # The same params main may have sent already, before this process was connected (``opening``).
    started = await client.request("session/start", session_start_params(args, prompt))
    model_id = started["session"]["model_id"]
    if not args.model and model_id.split("/", 1)[0] in OFFLINE_PROVIDERS:
        print(MOCK_NOTICE.format(model=model_id), file=sys.stderr)
    thinking = started["thinking"]
    if thinking.get("reason") and not stderr_is_terminal():  # on a terminal, the turn's thinking line says it
        print(f"ponder: {for_person(thinking['reason'])}", file=sys.stderr)
    await _set_budget(client, started["session"]["session_id"], args)
    return started["session"]["session_id"]


async def _set_budget(client: RpcClient, session_id: str, args: argparse.Namespace) -> None:
    if args.thinking_budget is not None:
        await client.request("thinking/set", {"session_id": session_id, "budget_tokens": args.thinking_budget})


async def _set_spending(client: RpcClient, session_id: str, args: argparse.Namespace) -> None:
    """``--max-cost``/``--max-tokens`` on a continued session: its budget changes (a spent one is raised
    so the prompt can go on); a limit not given stays as it is in force (its own, or config.toml's)."""
    if args.max_cost is None and args.max_tokens is None:
        return
    current = (await client.request("session/get", {"session_id": session_id}))["session"]["budget"] or {}
    budget = {
        "max_cost": args.max_cost if args.max_cost is not None else current.get("max_cost"),
        "max_tokens": args.max_tokens if args.max_tokens is not None else current.get("max_tokens"),
    }
    await client.request("session/budget", {"session_id": session_id, "budget": budget})


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
        lines.append(f"ponder: {for_person(thinking['reason'])}")
    return lines


class _Printer:
    def __init__(
        self, *, json_mode: bool, tty: bool, notice: bool = False, dim: bool = True, show_text: bool = True
    ) -> None:
        self.json_mode = json_mode
        self.show_text = show_text  # False with --output-schema: the answer is printed whole, at the end
        self.tty = tty
        self.dim, self.reset = (DIM, RESET) if dim else ("", "")  # thinking dimmed where colour is on
        self.compaction_before = 0
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
                sys.stdout.write(self.dim)
                self.in_thinking = True
            sys.stdout.write(event["delta"])
        elif kind == "thinking_end" and self.tty and self.in_thinking:
            sys.stdout.write(self.reset + "\n\n")
            self.in_thinking = False
        elif kind == "text_delta" and self.show_text:
            sys.stdout.write(event["delta"])
            self.wrote_text = True
        elif kind == "tool_execution_start" and self.tty:
            arguments = json.dumps(event["arguments"], ensure_ascii=False)
            shown = arguments if len(arguments) <= TOOL_ARGS_CHARS else arguments[: TOOL_ARGS_CHARS - 1] + "…"
            sys.stdout.write(f"{self.dim}→ {event['name']} {shown}{self.reset}\n")
        elif kind == "tool_execution_end" and event["is_error"] and self.notice:
            # Why a tool did not run or failed, for the person (the model gets the same text); not
            # when the person just said no at the prompt: they know.
            said = event["result"].strip().splitlines()[0] if event["result"].strip() else "it failed"
            if "the user denied permission" not in said:
                print(f"ponder: {event['name']}: {for_person(said)}", file=sys.stderr, flush=True)
        elif kind == "retry":
            # A retry at once (another thinking level) says what it does in its message.
            wait = f" Retrying in {event['delay_ms'] / 1000:.1f}s…" if event["delay_ms"] else ""
            print(f"ponder: {for_person(event['error']['message'])}{wait}", file=sys.stderr)
        elif kind == "compaction_start" and self.notice:
            self.compaction_before = event["tokens_before"]
            print(f"ponder: compacting the conversation (about {event['tokens_before']:,} tokens)…", file=sys.stderr)
        elif kind == "compaction_end" and self.notice:
            print(f"ponder: {compaction_result(event, self.compaction_before)}", file=sys.stderr)
        sys.stdout.flush()

    def write_line(self, text: str) -> None:
        if self.closed:
            return
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            self.closed = True

    def close(self) -> None:
        if self.closed:
            return
        if self.in_thinking:
            sys.stdout.write(self.reset)
        if self.wrote_text and not self.json_mode:
            sys.stdout.write("\n")
        sys.stdout.flush()
