"""The ``ponder`` command as a person meets it, driving the real command: on a pseudo-terminal
where that matters (the permission prompt, colours, Ctrl-C, progress lines), piped where a
script would pipe it.

Pipes into a reader that went away, errors that name the command to type, the tables of
``ponder models`` and ``ponder sessions`` (and their ``--json``), ``ponder compact``'s before and
after, the permission prompt's diff, ``--log-level`` and the log file, the README's
``mock/tools`` example, and progress lines (MCP servers starting, a login, a compaction).
"""

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from daemon.cli.wording import for_person
from tests.support.fake_github import FakeGitHub
from tests.support.harness import subprocess_env
from tests.support.terminal import Terminal, plain

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", re.MULTILINE)  # a timestamped log record
RULE = r"(\(session/always keep the rule: .*\)\n)?"  # the rule a session/always answer keeps
RED, GREEN = "\x1b[31m", "\x1b[32m"
HELLO = 'def hello():\n    print("hello")\n'
EDIT_HELLO = "tool: edit_file " + json.dumps(
    {"path": "hello.py", "old_string": 'print("hello")', "new_string": 'print("hello, world")'}
)


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, **subprocess_env(home), "TERM": "xterm-256color", "PONDER_FORCE_TTY": "0", **extra}
    env.pop("NO_COLOR", None)
    if "NO_COLOR" in extra:
        env["NO_COLOR"] = extra["NO_COLOR"]
    return env


def ponder(home: Path, *args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    """``ponder ARGS`` with every stream piped, as a script runs it."""
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        capture_output=True,
        text=True,
        env=env_for(home, **extra),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def ask_echo(home: Path, cwd: Path, prompt: str) -> None:
    result = ponder(home, "ask", "--cwd", str(cwd), "--model", "mock/echo", prompt)
    assert result.returncode == 0, result.stderr


# --- pipes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["models"], ["sessions", "SESSION"]])
def test_output_into_a_reader_that_went_away_ends_quietly(home, tmp_path, command):
    """``ponder models | head``: the reader is gone before ponder writes; no traceback, the
    status a Unix tool killed by SIGPIPE has."""
    ask_echo(home, tmp_path, "a question to list")
    session_id = json.loads(ponder(home, "sessions", "--json").stdout)["sessions"][0]["session_id"]
    args = [session_id if word == "SESSION" else word for word in command]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "daemon", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env_for(home),
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert result.stderr.decode() == ""
    assert result.returncode == 141


# --- errors in the command line's words -------------------------------------------------------


def test_errors_name_the_command_to_type_not_protocol_methods(home, tmp_path):
    unknown = ponder(home, "sessions", "ses_nope")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "ponder: No session with id 'ses_nope'; list them with `ponder sessions`."
    model = ponder(home, "ask", "--cwd", str(tmp_path), "--model", "nope/x", "hi")
    assert model.returncode == 2  # a usage error: nothing ran
    assert "`ponder models` lists the models ponder knows." in model.stderr
    assert "models/list" not in model.stderr
    budget = ponder(home, "ask", "--thinking-budget", "-5", "hi")
    assert budget.returncode == 2
    assert "argument --thinking-budget: -5 is not between 0 and 2,147,483,647 tokens" in budget.stderr
    assert "$.params" not in budget.stderr


def test_a_refused_tool_says_which_option_allows_it(home, tmp_path):
    """Under --approval read_only the edit is refused; on a terminal the person reads why, with the
    option to type (the model gets the daemon's own words)."""
    (tmp_path / "hello.py").write_text(HELLO)
    args = ["ask", "--cwd", str(tmp_path), "--model", "mock/tools", "--approval", "read_only", EDIT_HELLO]
    with Terminal(args, env_for(home)) as terminal:
        assert terminal.wait() == 4  # a tool call refused before it ran (PROTOCOL.md: exit 4)
    shown = plain(terminal.text)
    assert "ponder: edit_file: edit_file was not run" in shown
    assert "--approval ask or --approval auto" in shown
    assert (tmp_path / "hello.py").read_text() == HELLO


def test_protocol_words_become_command_line_words():
    assert for_person("Invalid params: Expected `int` >= 0 (at $.params.budget_tokens).") == (
        "--thinking-budget: expected a whole number >= 0."
    )
    assert for_person("start the session with approval_policy 'auto' or use a client") == (
        "start the session with --approval auto or use a client"
    )
    assert for_person("The sign-in code expired before it was entered; run auth/login again.") == (
        "The sign-in code expired before it was entered; run `ponder login copilot` again."
    )
    assert for_person("Choose another level with thinking/set.") == "Choose another level with --thinking."


# --- tables -------------------------------------------------------------------------------------


def columns_of(header: str) -> list[int]:
    """Where each column starts in a header line."""
    return [match.start() for match in re.finditer(r"\S+(?: \S+)*", header)]


def test_models_is_a_headed_aligned_table_coloured_only_on_a_terminal(home):
    piped = ponder(home, "models")
    assert piped.returncode == 0, piped.stderr
    header, *rows = piped.stdout.splitlines()
    assert header.split() == ["MODEL", "READY", "CONTEXT", "THINKING", "LEVELS", "DEFAULT"]
    assert "\x1b[" not in piped.stdout  # piped: no colour
    starts = columns_of(header)
    ready = starts[1]
    assert all(row[ready : ready + 3] in ("yes", "no ") for row in rows), rows[:3]
    assert any(row.startswith("mock/tools ") and " yes " in row for row in rows)
    assert any(" no " in row for row in rows)  # no key for the cloud providers in the test env

    as_json = ponder(home, "models", "--provider", "mock", "--json")
    assert [m["id"] for m in json.loads(as_json.stdout)["models"]] == ["mock/echo", "mock/thinker", "mock/tools"]

    with Terminal(["models"], env_for(home)) as terminal:
        assert terminal.wait() == 0
    assert "\x1b[1mMODEL" in terminal.text  # a bold header on a terminal
    assert f"{GREEN}yes" in terminal.text
    assert "READY no: ponder has no credentials" in terminal.text
    with Terminal(["models"], env_for(home, NO_COLOR="1")) as terminal:
        assert terminal.wait() == 0
    assert "\x1b[" not in terminal.text and "MODEL" in terminal.text


def test_sessions_is_a_table_with_relative_times_and_titles_from_the_first_prompt(home, tmp_path):
    ask_echo(home, tmp_path, "Why is the sky blue?\nAnd why is the sea blue too?")
    ask_echo(home, tmp_path, "x" * 100)
    with Terminal(["sessions"], env_for(home), columns=200) as terminal:
        assert terminal.wait() == 0
    header, *rows = plain(terminal.text).strip().splitlines()
    assert header.split() == ["SESSION", "UPDATED", "MSGS", "TOKENS", "COST", "MODEL", "TITLE"]
    assert "\x1b[1mSESSION" in terminal.text
    starts = columns_of(header)
    assert len(rows) == 2
    for row in rows:
        assert re.match(r"ses_[0-9a-f]+ +just now +2 +\d+ +- +mock/echo +\S", row), row
        assert row.index("just now") == starts[1]  # aligned under its header
        assert row.index("mock/echo") == starts[5]
    assert rows[0].endswith("x" * 59 + "…")  # newest first, the title cut at 60 characters
    assert rows[1].endswith("Why is the sky blue? And why is the sea blue too?")

    narrow = ponder(home, "sessions")  # piped: the same table, nothing cut, no colour
    assert narrow.stdout.splitlines()[0].split()[-1] == "TITLE" and "\x1b[" not in narrow.stdout
    listed = json.loads(ponder(home, "sessions", "--json").stdout)["sessions"]
    assert [s["title"] for s in listed][1] == "Why is the sky blue? And why is the sea blue too?"

    one = ponder(home, "sessions", listed[1]["session_id"])
    lines = one.stdout.splitlines()
    assert lines[0].startswith("Why is the sky blue? And why is the sea blue too?  ses_")
    assert "mock/echo · thinking default · approval ask" in lines[1]
    assert re.search(r"updated just now · 2 messages · \d+ tokens · no price known", lines[2])
    assert any(line.startswith("[1] user/text: Why is the sky blue?") for line in lines)
    detail = json.loads(ponder(home, "sessions", listed[1]["session_id"], "--json").stdout)
    assert [item["role"] for item in detail["items"]] == ["user", "assistant"]


# --- compact ------------------------------------------------------------------------------------


def test_compact_reports_before_and_after_in_one_measure_and_its_usage_line_is_right(home, tmp_path):
    (home / "config.toml").write_text("[compaction]\nkeep_recent_tokens = 50\n")
    first = " ".join(f"word{i}" for i in range(400))
    # mock/thinker summarizes in a few words (mock/echo would echo the whole summary request back)
    started = ponder(home, "ask", "--cwd", str(tmp_path), "--model", "mock/thinker", f"First: {first}")
    assert started.returncode == 0, started.stderr
    session_id = json.loads(ponder(home, "sessions", "--json").stdout)["sessions"][0]["session_id"]
    for n in range(3):
        result = ponder(home, "ask", "--session", session_id, f"Turn {n}: {first}")
        assert result.returncode == 0, result.stderr
    with Terminal(["compact", session_id, "keep", "the", "words"], env_for(home)) as terminal:
        assert terminal.wait() == 0
    shown = plain(terminal.text)
    said = re.search(r"Compacted (cmp_\w+): about ([\d,]+) → ([\d,]+) tokens \((\d+)% smaller\)\.", shown)
    assert said is not None, terminal.text
    before, after = (int(said[i].replace(",", "")) for i in (2, 3))
    assert after < before
    assert int(said[4]) == 100 - round(100 * after / before)
    assert "Summarizing the older conversation" in shown  # the progress line, on a terminal
    [record] = [
        item
        for item in json.loads(ponder(home, "sessions", session_id, "--json").stdout)["items"]
        if item["kind"] == "compaction"
    ]
    assert (record["compaction_id"], record["tokens_before"], record["tokens_after"]) == (said[1], before, after)

    usage = ponder(home, "compact")
    assert usage.returncode == 2
    assert "usage: ponder compact [-h] session_id [instructions ...]" in usage.stderr
    assert "the following arguments are required: session_id\n" in usage.stderr


# --- the permission prompt ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_permission_prompt_shows_an_edits_coloured_diff_and_allows_it(home, tmp_path, backend):
    (tmp_path / "hello.py").write_text(HELLO)
    args = ["ask", "--cwd", str(tmp_path), "--model", "mock/tools", EDIT_HELLO]
    with Terminal(args, env_for(home, PONDER_ASYNC_BACKEND=backend)) as terminal:
        terminal.expect(r"Allow\? \[y\]es once / \[s\]ession / \[a\]lways here / \[N\]o / \[d\]eny always: $")
        assert (tmp_path / "hello.py").read_text() == HELLO  # nothing changed while it asks
        terminal.type("y\n")
        assert terminal.wait() == 0
    prompt = plain(terminal.text)
    assert "Edit hello.py\n--- a/hello.py\n+++ b/hello.py\n@@ -1,2 +1,2 @@\n def hello():\n" in prompt
    assert f'{RED}-    print("hello")' in terminal.text
    assert f'{GREEN}+    print("hello, world")' in terminal.text
    assert (tmp_path / "hello.py").read_text() == HELLO.replace('"hello"', '"hello, world"')


def test_the_permission_prompt_for_a_new_file_a_command_and_a_long_write(home, tmp_path):
    (home / "config.toml").write_text("[sandbox]\nauto_approve = false\n")  # a sandboxed command asks too
    long_text = "".join(f"line {i}\n" for i in range(100))
    script = "\n".join(
        [
            f"tool: write_file {json.dumps({'path': 'notes.txt', 'content': long_text})}",
            'tool: run_command {"command": "echo one &&\\n echo two"}',
        ]
    )
    args = ["ask", "--cwd", str(tmp_path), "--model", "mock/tools", script]
    with Terminal(args, env_for(home, NO_COLOR="1")) as terminal:
        terminal.expect(r"Allow\?")
        terminal.type("y\n")
        terminal.expect(r"\$ echo one &&\n   echo two\nin .*\n" + RULE + r"Allow\?")
        terminal.type("n\n")
        assert terminal.wait() == 4  # the person denied the command: a refused call (exit 4)
    shown = terminal.text
    assert "\x1b[" not in shown  # NO_COLOR
    assert "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,100 @@\n+line 0\n" in shown
    assert "+line 35\n… 64 more lines\n" in shown  # a screenful, saying what was left out
    assert (tmp_path / "notes.txt").read_text() == long_text
    assert "The last one failed:\nrun_command was not run: the user denied permission." in shown
    assert "ponder: run_command:" not in shown  # the person said no: no notice about it


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_at_the_permission_prompt_cancels_the_turn_and_changes_nothing(home, tmp_path, backend):
    (tmp_path / "hello.py").write_text(HELLO)
    args = ["ask", "--cwd", str(tmp_path), "--model", "mock/tools", EDIT_HELLO]
    with Terminal(args, env_for(home, PONDER_ASYNC_BACKEND=backend)) as terminal:
        terminal.expect(r"Allow\?")
        terminal.type("\x03")
        assert terminal.wait(timeout=30) == 130
    assert "ponder: cancelling…" in terminal.text
    assert (tmp_path / "hello.py").read_text() == HELLO
    [session] = json.loads(ponder(home, "sessions", "--json").stdout)["sessions"]
    assert session["status"] == "idle"  # the daemon cancelled the turn and shut down cleanly


# --- logs -----------------------------------------------------------------------------------------


def test_log_level_is_honoured_for_client_commands_and_the_terminal_gets_plain_words(home, tmp_path):
    (home / "config.toml").write_text('[defaults]\napproval_policy = "sometimes"\n')  # a configuration problem
    log = home / "logs" / "ponder.log"
    with Terminal(["--log-level", "debug", "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "hi"],
                  env_for(home)) as terminal:  # fmt: skip
        assert terminal.wait() == 0
    shown = plain(terminal.text)
    assert not LOG_LINE.search(shown), shown  # no daemon log records on the person's terminal
    assert re.search(r"^ponder: .*approval_policy.*sometimes", shown, re.MULTILINE), shown
    written = log.read_text()
    assert " DEBUG " in written and " INFO " in written
    assert "sometimes" in written  # the problem is in the log too, with its details

    log.unlink()
    result = ponder(home, "--log-level", "warning", "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "hi")
    assert result.returncode == 0, result.stderr
    written = log.read_text()
    assert " WARNING " in written and " INFO " not in written and " DEBUG " not in written
    assert not LOG_LINE.search(result.stderr), result.stderr


# --- the README's mock/tools example ------------------------------------------------------------


def test_the_readme_mock_tools_example_edits_a_file_and_runs_a_command(home, tmp_path):
    (home / "config.toml").write_text("[sandbox]\nauto_approve = false\n")  # the command asks, sandbox or not
    text = README.read_text()
    block = text[text.index("    printf 'def hello") :]
    lines = [line.removeprefix("    ") for line in block[: block.index("\n\n")].splitlines()]
    subprocess.run(["bash", "-c", lines[0]], cwd=tmp_path, check=True)
    assert (tmp_path / "hello.py").read_text() == HELLO
    command = shlex.split("\n".join(lines[1:]))
    assert command[:4] == ["ponder", "ask", "--model", "mock/tools"]
    with Terminal(command[1:], env_for(home), cwd=tmp_path) as terminal:
        terminal.expect(r"\+    print\(\"hello, world\"\)\n" + RULE + r"Allow\?")
        terminal.type("y\n")
        terminal.expect(r"\$ python3 -c \"import hello; hello.hello\(\)\"\nin .*\n" + RULE + r"Allow\?")
        terminal.type("y\n")
        assert terminal.wait() == 0
    assert "The last one returned:\nhello, world\n" in plain(terminal.text)
    assert (tmp_path / "hello.py").read_text() == HELLO.replace('"hello"', '"hello, world"')


# --- progress -------------------------------------------------------------------------------------


def test_starting_mcp_servers_shows_progress_on_a_terminal_only(home):
    server = Path(__file__).resolve().parents[1] / "support" / "mcp_servers" / "docs_server.py"
    slow_start = (
        f"import runpy, sys, time; time.sleep(1.5); sys.argv = [{str(server)!r}]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    (home / "config.toml").write_text(
        f'[mcp_servers.docs]\ncommand = {json.dumps(sys.executable)}\nargs = ["-c", {json.dumps(slow_start)}]\n'
    )
    with Terminal(["mcp"], env_for(home)) as terminal:
        assert terminal.wait() == 0
    assert "Starting MCP servers…" in terminal.text
    assert re.search(r"docs +ready +\d+ tools", plain(terminal.text)), terminal.text
    piped = ponder(home, "mcp")
    assert piped.returncode == 0, piped.stderr
    assert "Starting MCP servers" not in piped.stderr + piped.stdout


def test_login_shows_progress_while_it_waits_and_says_what_to_type_when_denied(home, replay_server):
    github = FakeGitHub(replay_server)
    github.release = threading.Event()  # every poll is "authorization pending" until released
    with Terminal(["login", "copilot"], env_for(home, **github.env())) as terminal:
        terminal.expect(r"Open https://github.com/login/device and enter the code WDJB-MJH1\.")
        terminal.expect(r"Waiting for the code to be entered…")  # the progress line, while GitHub says pending
        github.release.set()
        assert terminal.wait() == 0
    assert "Signed in to copilot." in plain(terminal.text)

    github.release = None
    github.poll_answers = ["access_denied"]
    denied = ponder(home, "login", "copilot", **github.env())
    assert denied.returncode == 1
    assert "run `ponder login copilot` again" in denied.stderr and "auth/login" not in denied.stderr
    assert "Waiting for the code" not in denied.stderr  # no progress line off a terminal
