"""The ``ponder`` command: ``serve`` (the daemon on stdio), ``acp`` (the same in ACP), ``ask``, ``sessions``,
``compact``, ``models``, ``store`` (status, copy: the store itself, no daemon).

Only ``serve`` is the daemon; the others are small clients that spawn it and speak the
real protocol (``daemon.jsonrpc.client``), so scripts see exactly what editors see. The one
exception is the ``sessions`` table, which a plain home lets the store say alone
(``daemon.cli.listing``: the same rows and problems, without a second interpreter's start-up).
"""

from __future__ import annotations

import os
import sys

from daemon import __version__
from daemon.cli.command_line import BACKEND_ENV, DEFAULT_MAX_LINE_BYTES, LOG_LEVELS, global_options
from protocol import APPROVAL_POLICIES  # not protocol.objects: a client starts its daemon before loading msgspec

# Not ``typing.TYPE_CHECKING``: a client command starts its daemon before importing anything
# (``typing`` loads ``re`` and ``enum``), see ``_start_client_daemon``. mypy reads any name
# TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:  # argparse only off the serve line
    import argparse

    from daemon.jsonrpc.early import EarlyRequests

MAX_TOKENS = 2**31 - 1
DEFAULT_LISTING = 20  # sessions --limit
MAX_LISTING = 1000  # session/list's largest page: a larger --limit is the daemon's to refuse


def _tokens(text: str) -> int:
    """A token count given on the command line: a whole number from 0 to 2,147,483,647."""
    import argparse

    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if not 0 <= value <= MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and {MAX_TOKENS:,} tokens")
    return value


def _usd(text: str) -> float:
    """An amount in USD given on the command line (``--max-cost``): a finite number of at least 0."""
    import argparse
    import math

    try:
        value = float(text.replace(",", "").removeprefix("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount in USD") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not an amount in USD of at least 0")
    return value


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from daemon.cli.attach import add_attach_options

    parser = argparse.ArgumentParser(prog="ponder", description="An agent daemon for editors, IDEs and scripts.")
    parser.add_argument("--version", action="version", version=f"ponder {__version__}")
    parser.add_argument(
        "--home", help="where config.toml, sessions.db and logs live (default: $PONDER_HOME or the user data dir)"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="how much the daemon writes to logs/ponder.log in the home (default: info)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the daemon on stdio (newline-delimited JSON-RPC 2.0)")
    serve.add_argument("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE_BYTES)
    serve.add_argument(
        "--quiet", action="store_true", help="log to logs/ponder.log only, not stderr (how the client commands run it)"
    )
    serve.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="load the session stack on first use only, not on a thread after initialize (a one-shot client)",
    )
    serve.add_argument(
        "--listen",
        metavar="ENDPOINT",
        help="serve many clients instead of stdio: unix[:PATH] (default <home>/serve.sock) or ws://127.0.0.1:PORT",
    )
    serve.add_argument(
        "--allow-remote", action="store_true", help="let a WebSocket listen off loopback (needs wss:// and TLS)"
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="the certificate of a wss:// listener")
    serve.add_argument("--tls-key", metavar="FILE", help="the private key of a wss:// listener")
    serve.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN", help="a browser Origin that may connect"
    )
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="a Host name taken with --allow-remote"
    )
    serve.add_argument("--new-token", action="store_true", help="replace serve.token in the home before listening")

    attach = sub.add_parser("attach", help="bridge stdio to a running daemon (ponder serve --listen)")
    add_attach_options(attach)

    acp = sub.add_parser(
        "acp", help="run the daemon on stdio speaking the Agent Client Protocol (for Zed and other ACP clients)"
    )
    acp.add_argument("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE_BYTES)
    acp.add_argument("--quiet", action="store_true", help="log to logs/ponder.log only, not stderr")
    acp.add_argument(
        "--login", choices=["copilot"], help="sign in (device login) in this terminal and exit: ACP terminal auth"
    )
    acp.add_argument(
        "--attach",
        action="store_true",
        help="speak ACP through a running daemon (ponder serve --listen) instead of starting one",
    )
    add_attach_options(acp)

    ask = sub.add_parser("ask", help="ask a question in a session and stream the answer")
    ask.add_argument("prompt", nargs="?", help="the prompt (default: read from stdin)")
    ask.add_argument("--model", help="model id, e.g. mock/thinker or anthropic/claude-sonnet-4-5")
    ask.add_argument("--thinking", help="off, minimal, low, medium, high, xhigh or max")
    ask.add_argument(
        "--thinking-budget",
        type=_tokens,
        metavar="N",
        help="thinking budget in tokens for models that take one (clamped to the model's range)",
    )
    ask.add_argument(
        "--max-cost",
        type=_usd,
        metavar="USD",
        help="the session's cost budget in USD (also raises or lowers it with --continue or --session)",
    )
    ask.add_argument(
        "--max-tokens",
        type=_tokens,
        metavar="N",
        help="the session's token budget: input plus output tokens of all its model calls (also with --continue)",
    )
    group = ask.add_mutually_exclusive_group()
    group.add_argument("--session", help="continue this session")
    group.add_argument("--continue", dest="continue_last", action="store_true", help="continue the most recent session")
    ask.add_argument("--cwd", help="the session's working directory (default: the current one)")
    ask.add_argument("--approval", choices=APPROVAL_POLICIES, help="approval policy for a new session")
    ask.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object a line: a header, every event, then the result (schemas/protocol.json)",
    )
    ask.add_argument(
        "--output-schema",
        metavar="FILE",
        help="a JSON Schema file: the answer must be JSON valid against it (exit 5 when it never is)",
    )
    ask.add_argument(
        "--max-turns", type=_positive, metavar="N", help="at most N model calls in this run (then exit 3: tool_limit)"
    )
    ask.add_argument("-o", "--output", metavar="FILE", help="write the result (the answer) to FILE too")
    ask.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="FILE",
        help="attach an image (PNG, JPEG, GIF or WebP; large ones are scaled down); repeatable",
    )
    ask.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="FILE",
        help="attach a text file's content (an embedded resource); repeatable",
    )

    sessions = sub.add_parser("sessions", help="list stored sessions, or show one")
    sessions.add_argument("session_id", nargs="?", help="show this session's messages")
    sessions.add_argument(
        "--limit", type=_positive, default=DEFAULT_LISTING, help="how many sessions to list (default: 20)"
    )
    sessions.add_argument("--json", action="store_true", help="print what the daemon returned, as JSON")

    compact = sub.add_parser("compact", help="fold a session's older messages into a summary (nothing is deleted)")
    compact.add_argument("session_id", help="the session to compact")
    # A default keeps argparse from listing the optional words as required when session_id is missing.
    compact.add_argument("instructions", nargs="*", default=[], help="what the summary should keep (optional)")

    cont = sub.add_parser("continue", help="go on with a session's last turn where it was cut off")
    cont.add_argument("session_id", help="the session whose last turn goes on")
    cont.add_argument("--json", action="store_true", help="print every event as one JSON line")

    login = sub.add_parser("login", help="sign in to a provider with a device login (copilot)")
    login.add_argument("provider", choices=["copilot"])

    models = sub.add_parser("models", help="list the models ponder knows")
    models.add_argument("--provider", help="only this provider's models")
    models.add_argument("--json", action="store_true", help="print what the daemon returned, as JSON")

    mcp = sub.add_parser("mcp", help="start the MCP servers from config.toml and show their status and tools")
    mcp.add_argument("--json", action="store_true", help="print what the daemon returned, as JSON")
    store = sub.add_parser("store", help="the session store: which one and its schema; copy sessions to PostgreSQL")
    store_commands = store.add_subparsers(dest="store_command", metavar="{status,copy}", required=True)
    status = store_commands.add_parser("status", help="which store is in use, its schema version, its sessions")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    copy = store_commands.add_parser(
        "copy", help="copy the home's SQLite sessions into a PostgreSQL store (again: only what is missing)"
    )
    copy.add_argument("--to", required=True, metavar="URL", help="the PostgreSQL store (postgresql://…)")
    return parser


CLIENT_COMMANDS = ("ask", "sessions", "compact", "models", "mcp", "login")


def plain_listing(argv: list[str]) -> tuple[str | None, str, int] | None:
    """``[--home H] [--log-level L] sessions [--limit N]``, read without argparse (the table,
    which ``daemon.cli.listing`` prints from the store): home, log level and limit; None for
    any other line."""
    found = global_options(argv)
    if found is None or not found[2] or found[2][0] != "sessions":
        return None
    home, level, rest = found
    match rest[1:]:
        case []:
            limit = str(DEFAULT_LISTING)
        case ["--limit", limit]:
            pass
        case [option] if option.startswith("--limit="):
            limit = option.removeprefix("--limit=")
        case _:
            return None
    if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_LISTING):
        return None  # argparse explains it, or the daemon refuses it
    return home, level, int(limit)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    found = global_options(argv)
    command = found[2][0] if found is not None and found[2] else None
    if command == "serve":
        from daemon.cli.serving import plain_serve, run_serve

        plain = plain_serve(argv)
        if plain is not None:
            code = run_serve(plain)
            from daemon.cli.ending import end_daemon  # not on the start path

            end_daemon(code)
    listing = plain_listing(argv)
    if listing is not None:
        from daemon.cli.listing import Listing, list_sessions_then_exit

        list_sessions_then_exit(Listing(*listing))  # returns only when a daemon must answer
    # Every client command talks to a daemon: start it first, before even argparse, so that
    # it starts up while this process reads its arguments and imports the client's stack.
    # It logs to the home's logs/ponder.log at --log-level, not to the person's terminal.
    early = None
    if found is not None and command in CLIENT_COMMANDS and "-h" not in argv and "--help" not in argv:
        early = _start_client_daemon(found[0], found[1])
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:  # a mistake in the command's own arguments: argparse said which
        if early is not None:
            early.daemon.kill()
            early.daemon.wait()
        raise
    if args.command == "acp" and args.login:
        args.command, args.provider = "login", args.login  # what `ponder login` does
    if args.command == "serve" and (args.listen or args.new_token):
        from daemon.cli.listening import run_listening

        return run_listening(args, os.environ.get(BACKEND_ENV, "asyncio"))
    if args.command == "attach" or (args.command == "acp" and args.attach):
        from daemon.cli.attach import run_attach

        return run_attach(args, os.environ.get(BACKEND_ENV, "asyncio"), "acp" if args.command == "acp" else None)
    if args.command == "acp" and (args.socket or args.url or args.token_file):
        build_parser().error("--socket, --url and --token-file go with ponder acp --attach")
    if args.command == "store":
        from daemon.cli.store import run_store

        return run_store(args)
    if args.command in ("serve", "acp"):
        from daemon.cli.serving import Serve, run_serve

        warm_up = args.warm_up if args.command == "serve" else True  # (--no-warm-up is serve's)
        code = run_serve(Serve(args.command, args.home, args.log_level, args.max_line_bytes, args.quiet, warm_up))
        from daemon.cli.ending import end_daemon

        end_daemon(code)
    if early is None:
        early = _start_client_daemon(args.home, args.log_level)
    from daemon.cli import opening

    if opening.starts_at_once(args):  # its first request after initialize is known now: ask it now
        early.send("session/start", opening.session_start_params(args, args.prompt))
    from daemon.cli import commands

    commands.run_then_exit(args, early.daemon, early.sent)


def _start_client_daemon(home: str | None, log_level: str) -> EarlyRequests:
    """Start a client command's daemon and write it ``initialize`` at once: it answers while this
    process loads the rest (the command's requests are matched to what was sent, see ``opening``)."""
    from daemon.jsonrpc.spawn import QUIET_SERVE, start_daemon  # os and sys only

    daemon = start_daemon(home=home, log_level=log_level, serve_args=QUIET_SERVE)
    # The rest (json, typing) loads while the daemon starts.
    from daemon.cli.opening import initialize_params, interactive
    from daemon.jsonrpc.early import EarlyRequests

    early = EarlyRequests(daemon)
    early.send("initialize", initialize_params(interactive()))
    return early


if __name__ == "__main__":
    raise SystemExit(main())
