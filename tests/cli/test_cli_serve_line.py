"""``ponder serve``'s command line is read without argparse when it is the plain line editors
spawn (``daemon.cli.serving.plain_serve``); anything else goes to argparse. Both must agree. A
client command starts its daemon before argparse reads the rest."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.cli.main import DEFAULT_MAX_LINE_BYTES, build_parser, plain_listing
from daemon.cli.serving import Serve, plain_serve
from tests.support.harness import subprocess_env


def by_argparse(argv: list[str]) -> Serve:
    args = build_parser().parse_args(argv)
    return Serve(args.command, args.home, args.log_level, args.max_line_bytes, args.quiet, args.warm_up)


PLAIN = [
    ["serve"],
    ["--home", "/tmp/h", "serve"],
    ["--home=/tmp/h", "serve"],
    ["--log-level", "debug", "serve"],
    ["--log-level=warning", "--home", "~/x", "serve"],
    ["--home", "/a", "--home", "/b", "serve"],  # the last one wins, as in argparse
    ["serve", "--max-line-bytes", "1000"],
    ["--home", "/tmp/h", "--log-level", "error", "serve", "--max-line-bytes", "65536"],
    ["serve", "--quiet"],
    ["serve", "--quiet", "--no-warm-up"],  # how the client commands spawn their daemon
    ["--home", "/tmp/h", "serve", "--no-warm-up", "--max-line-bytes", "9", "--quiet"],
]


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_the_plain_line_reads_as_argparse_reads_it(argv: list[str]) -> None:
    assert plain_serve(argv) == by_argparse(argv)


def test_defaults() -> None:
    assert plain_serve(["serve"]) == Serve("serve", None, "info", DEFAULT_MAX_LINE_BYTES)


OTHERS = [
    [],
    ["acp"],
    ["ask", "hi"],
    ["--version"],
    ["serve", "--help"],
    ["--log-level", "loud", "serve"],  # argparse says which levels exist
    ["--home"],
    ["--home", "--log-level", "serve"],
    ["--home", "/h"],
    ["serve", "--max-line-bytes"],
    ["serve", "--max-line-bytes", "-5"],
    ["serve", "--max-line-bytes", "ten"],
    ["serve", "--max-line-bytes=10"],
    ["serve", "extra"],
    ["--verbose", "serve"],
    ["serve", "--no-warmup"],
]


@pytest.mark.parametrize("argv", OTHERS, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_anything_else_goes_to_argparse(argv: list[str]) -> None:
    assert plain_serve(argv) is None


LISTINGS = [
    ["sessions"],
    ["--home", "/tmp/h", "sessions", "--limit", "5"],
    ["--log-level", "debug", "sessions", "--limit=1000"],
    ["sessions", "--limit", "1"],
]


@pytest.mark.parametrize("argv", LISTINGS, ids=" ".join)
def test_the_plain_sessions_line_reads_as_argparse_reads_it(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.session_id is None and not args.json
    assert plain_listing(argv) == (args.home, args.log_level, args.limit)


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "ses_1"],  # one session: a daemon resumes it
        ["sessions", "--json"],  # what the daemon returned
        ["sessions", "--limit", "1001"],  # the daemon refuses it
        ["sessions", "--limit", "0"],  # argparse refuses it
        ["sessions", "--limit", "٣"],  # a digit argparse reads, not ASCII
        ["sessions", "--lim", "5"],
        ["sessions", "--limit", "5", "--limit", "6"],
        ["sessions", "-h"],
        ["ask", "sessions"],
    ],
    ids=" ".join,
)
def test_any_other_sessions_line_goes_to_argparse_and_a_daemon(argv: list[str]) -> None:
    assert plain_listing(argv) is None


def test_a_client_command_starts_its_daemon_before_argparse_and_stops_it_on_a_mistake(tmp_path: Path) -> None:
    # ``ponder ask`` starts its daemon before reading its own arguments; when argparse then
    # refuses them, that daemon is stopped, not left behind.
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "--home", str(home), "ask", "--no-such-option", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **subprocess_env(home)},
    )
    assert done.returncode == 2 and "unrecognized arguments: --no-such-option" in done.stderr
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and str(home) in _cmdline(pid)]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone meanwhile, or not ours to read
        return ""
