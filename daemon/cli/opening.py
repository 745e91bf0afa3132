"""What a client command asks its daemon first, known before its async stack loads:
``initialize``'s params for every command, and for ``ponder ask`` in a new session its
``session/start``. ``daemon.cli.main`` writes them to the daemon it just started
(``daemon.jsonrpc.early``), and the commands ask them with these same params (``commands``,
``ask``), so the client takes the answers instead of asking again.

Stdlib only: this runs before the client imports anyio.
"""

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

TITLE_CHARS = 60


def interactive() -> bool:
    """Whether a person is at the terminal to answer permission prompts."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def initialize_params(permission_requests: bool) -> dict[str, Any]:
    return {
        "protocol_version": 1,
        "client_info": {"name": "ponder-cli", "version": "1"},
        "capabilities": {"permission_requests": permission_requests},
    }


def title_of(prompt: str) -> str:
    """A new session's title: its first prompt on one line, cut to ``TITLE_CHARS``."""
    words = " ".join(prompt.split())
    return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1].rstrip() + "…"


def session_start_params(args: "argparse.Namespace", prompt: str) -> dict[str, Any]:
    """``ponder ask``'s ``session/start`` for a new session (not ``--session`` or ``--continue``)."""
    params: dict[str, Any] = {"cwd": os.path.abspath(args.cwd or os.getcwd()), "title": title_of(prompt)}
    if args.model:
        params["model_id"] = args.model
    if args.thinking:
        params["thinking_level"] = args.thinking
    if args.approval:
        params["approval_policy"] = args.approval
    if args.max_cost is not None or args.max_tokens is not None:
        params["budget"] = {"max_cost": args.max_cost, "max_tokens": args.max_tokens}
    return params


def starts_at_once(args: "argparse.Namespace") -> bool:
    """Whether ``ponder ask`` will certainly send ``session_start_params(args, args.prompt)`` as soon as
    it is connected: a new session for a prompt given on the command line, with nothing to read or
    check first that could end the command before (attached files, an output schema, a blank prompt)."""
    return (
        args.command == "ask"
        and args.prompt is not None
        and bool(args.prompt.strip())
        and not args.session
        and not args.continue_last
        and not args.image
        and not args.file
        and args.output_schema is None
    )
