"""``ponder serve``'s command line is read without argparse when it is the plain line editors
spawn (``daemon.cli.main.plain_serve``); anything else goes to argparse. Both must agree."""

import pytest

from daemon.cli.main import DEFAULT_MAX_LINE_BYTES, Serve, build_parser, plain_serve


def by_argparse(argv: list[str]) -> Serve:
    args = build_parser().parse_args(argv)
    return Serve(args.command, args.home, args.log_level, args.max_line_bytes)


PLAIN = [
    ["serve"],
    ["--home", "/tmp/h", "serve"],
    ["--home=/tmp/h", "serve"],
    ["--log-level", "debug", "serve"],
    ["--log-level=warning", "--home", "~/x", "serve"],
    ["--home", "/a", "--home", "/b", "serve"],  # the last one wins, as in argparse
    ["serve", "--max-line-bytes", "1000"],
    ["--home", "/tmp/h", "--log-level", "error", "serve", "--max-line-bytes", "65536"],
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
]


@pytest.mark.parametrize("argv", OTHERS, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_anything_else_goes_to_argparse(argv: list[str]) -> None:
    assert plain_serve(argv) is None
