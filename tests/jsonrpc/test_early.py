"""Requests written to a started daemon before the client is connected (``daemon.jsonrpc.early``),
as ``ponder ask`` writes ``initialize`` and its ``session/start``: the client takes their answers
instead of asking again, and a daemon that stops before answering fails them clearly, not by
hanging."""

import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from daemon.cli import commands, opening
from daemon.cli.main import build_parser
from daemon.jsonrpc.client import DaemonStopped, spawn_daemon
from daemon.jsonrpc.early import EarlyRequests
from daemon.jsonrpc.spawn import DEVNULL, QUIET_SERVE, StartedDaemon, start_daemon, start_process
from tests.support.harness import subprocess_env

# A "daemon" that reads one request and exits without answering it.
STOPS_AT_ONCE = "import sys; sys.stdin.buffer.readline()"
# One that writes back the first line it reads.
ECHOES_ONE_LINE = "import sys; sys.stdout.buffer.write(sys.stdin.buffer.readline())"


def _stopping_daemon() -> StartedDaemon:
    return start_process([sys.executable, "-c", STOPS_AT_ONCE])


@pytest.mark.anyio
async def test_requests_sent_early_are_answered_once_and_not_asked_again(home: Path, tmp_path: Path) -> None:
    daemon = start_daemon(home=home, serve_args=QUIET_SERVE, env=subprocess_env(home), stderr=DEVNULL)
    early = EarlyRequests(daemon)
    initialize = opening.initialize_params(False)
    start = {"cwd": str(tmp_path), "title": "hi", "model_id": "mock/echo"}
    early.send("initialize", initialize)
    early.send("session/start", start)
    assert [(sent.request_id, sent.method) for sent in early.sent] == [(1, "initialize"), (2, "session/start")]
    with anyio.fail_after(60):
        async with spawn_daemon(started=daemon, sent_early=early.sent) as client:
            written: list[dict] = []
            send_line = client._send_line

            async def record(line: bytes) -> None:
                written.append(msgspec.json.decode(line))
                await send_line(line)

            client._send_line = record
            assert (await client.request("initialize", initialize))["server_info"]["name"] == "ponder"
            started = await client.request("session/start", start)
            assert started["session"]["model_id"] == "mock/echo"
            assert written == []  # both were answered from what was sent early
            # Anything else is asked as usual, with the ids after the early ones.
            listed = await client.request("session/list", {})
            assert [row["session_id"] for row in listed["sessions"]] == [started["session"]["session_id"]]
            assert [(line["id"], line["method"]) for line in written] == [(3, "session/list")]
            # The same params again is a new request: an early answer is taken once.
            await client.request("initialize", initialize)
            assert [line["id"] for line in written] == [3, 4]


@pytest.mark.anyio
async def test_a_daemon_that_stops_before_answering_fails_the_requests_instead_of_hanging() -> None:
    daemon = _stopping_daemon()
    early = EarlyRequests(daemon)
    early.send("initialize", opening.initialize_params(False))
    with anyio.fail_after(30):
        async with spawn_daemon(started=daemon, sent_early=early.sent, wait_for_exit=False) as client:
            with pytest.raises(DaemonStopped):
                await client.request("initialize", opening.initialize_params(False))
            with pytest.raises(DaemonStopped):  # and so does any later one
                await client.request("ping")
    daemon.wait(10)


def test_a_client_command_whose_daemon_stopped_says_so(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["--home", str(home), "ask", "--model", "mock/echo", "hi"])
    daemon = _stopping_daemon()
    early = EarlyRequests(daemon)
    early.send("initialize", opening.initialize_params(opening.interactive()))
    early.send("session/start", opening.session_start_params(args, args.prompt))
    assert commands.run(args, daemon, early.sent) == 1
    assert capsys.readouterr().err == commands.DAEMON_STOPPED + "\n"
    daemon.wait(10)


def test_text_that_is_not_utf8_is_not_sent_early() -> None:
    daemon = start_process([sys.executable, "-c", ECHOES_ONE_LINE])
    early = EarlyRequests(daemon)
    early.send("session/start", {"cwd": "/", "title": "caf\udce9"})  # a lone surrogate from a non-UTF-8 argv
    assert early.sent == []  # the command asks itself later, and fails the way it always did
    early.send("initialize", opening.initialize_params(False))
    assert [sent.request_id for sent in early.sent] == [1]
    assert msgspec.json.decode(daemon.stdout.readline())["method"] == "initialize"  # only that line went
    assert daemon.wait(10) == 0
    daemon.stdin.close()
    daemon.stdout.close()


def test_only_a_new_session_for_a_prompt_on_the_command_line_is_started_early() -> None:
    def parse(*argv: str) -> bool:
        return opening.starts_at_once(build_parser().parse_args(argv))

    assert parse("ask", "hi")
    assert parse("ask", "--model", "mock/echo", "--thinking", "low", "--max-cost", "1", "hi")
    assert not parse("ask")  # the prompt comes from stdin
    assert not parse("ask", "  ")  # "nothing to ask": no session
    assert not parse("ask", "--continue", "hi")
    assert not parse("ask", "--session", "s1", "hi")
    assert not parse("ask", "--file", "x.txt", "hi")  # read (and perhaps refused) before the session starts
    assert not parse("ask", "--image", "x.png", "hi")
    assert not parse("ask", "--output-schema", "s.json", "hi")
    assert not parse("sessions")
