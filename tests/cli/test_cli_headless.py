"""``ponder ask`` as a script runs it (PROTOCOL.md "Structured output and headless runs"): real
``ponder`` processes (the installed console script where there is one), the provider the offline
mock or a real HTTP server on 127.0.0.1. Each exit code, the ``--json`` header and result lines
on success, failure and interrupt (every line valid against ``schemas/protocol.json``'s
``AskJsonLine``), ``--output-schema`` files that cannot be used, ``-o``, and Ctrl-C on a real
pseudo-terminal."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from tests.support.harness import subprocess_env
from tests.support.replay import ScriptedResponse
from tests.support.terminal import Terminal

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = json.loads((ROOT / "schemas" / "protocol.json").read_text(encoding="utf-8"))
LINE = jsonschema.Draft202012Validator(
    {"$ref": "https://ponder.dev/schemas/protocol.json#/$defs/AskJsonLine"},
    registry=Registry().with_resource("https://ponder.dev/schemas/protocol.json", Resource.from_contents(SCHEMAS)),
)
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["answer"],
}
# The console script `pip install`/`uv sync` puts beside the interpreter: what a person runs.
INSTALLED = Path(sys.executable).parent / "ponder"
PONDER = [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "daemon"]


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **subprocess_env(home), "PONDER_FORCE_TTY": "0", **extra}


def ask(home: Path, cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PONDER, "ask", "--cwd", str(cwd), *args],
        capture_output=True,
        text=True,
        env=env_for(home, **extra),
        stdin=subprocess.DEVNULL,
        timeout=90,
    )


def lines_of(stdout: str) -> list[dict[str, Any]]:
    """The ``--json`` lines, each checked against the published schema."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for line in lines:
        errors = list(LINE.iter_errors(line))
        assert not errors, (line, [e.message for e in errors][:3])
    return lines


def framed(stdout: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """(header, the events between, result): the header first and the result last, always."""
    lines = lines_of(stdout)
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "result", [x["type"] for x in lines]
    assert lines[0]["protocol_version"] == 1 and lines[0]["ponder_version"]
    assert all(x["type"] not in ("header", "result") for x in lines[1:-1])
    assert lines[-1]["session_id"] == lines[0]["session_id"]
    return lines[0], lines[1:-1], lines[-1]


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "answer.schema.json"
    path.write_text(json.dumps(ANSWER_SCHEMA))
    return path


def test_success_exit_0_with_the_structured_answer(home, tmp_path, schema_file):
    out = tmp_path / "answer.json"
    run = ask(home, tmp_path, "--model", "mock/echo", "--output-schema", str(schema_file), "--json", "-o", str(out),
              '{"answer": 42}')  # fmt: skip
    assert run.returncode == 0, run.stderr
    _, events, result = framed(run.stdout)
    assert events[0]["type"] == "turn_start" and events[-1]["type"] == "turn_end"
    assert result["status"] == "success" and result["exit_code"] == 0 and result["stop_reason"] == "end_turn"
    assert result["structured_output"] == {"answer": 42} and json.loads(result["result"]) == {"answer": 42}
    assert result["usage"]["input_tokens"] > 0 and result["cost"] is None  # the mock has no price
    assert json.loads(out.read_text()) == {"answer": 42}
    # without --json the answer is printed whole, as JSON, for a pipe to read
    plain = ask(home, tmp_path, "--model", "mock/tools", "--output-schema", str(schema_file),
                'tool: final_output {"answer": 7}')  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == {"answer": 7}


def test_an_answer_that_never_matches_exits_5(home, tmp_path, schema_file):
    run = ask(home, tmp_path, "--model", "mock/echo", "--output-schema", str(schema_file), "--json", "no JSON here")
    assert run.returncode == 5, run.stderr
    _, events, result = framed(run.stdout)
    assert result["status"] == "schema_failed" and result["exit_code"] == 5
    assert result["result"] is None and result["structured_output"] is None
    end = events[-1]
    assert end["stop_reason"] == "schema_failed" and end["error"]["errors"][0]["path"] == "$"
    # two retries (the default) after the first answer: three model calls
    assert sum(1 for e in events if e["type"] == "message_start" and e["role"] == "assistant") == 3
    assert "did not match the output schema" in run.stderr


def test_max_turns_exits_3(home, tmp_path):
    run = ask(home, tmp_path, "--model", "mock/tools", "--max-turns", "1", "--json", "tool: list_files {}")
    assert run.returncode == 3, run.stderr
    _, _, result = framed(run.stdout)
    assert (result["status"], result["stop_reason"], result["exit_code"]) == ("limit", "tool_limit", 3)


def test_a_spent_token_budget_exits_3(home, tmp_path):
    run = ask(home, tmp_path, "--model", "mock/tools", "--max-tokens", "1", "--json", "tool: list_files {}")
    assert run.returncode == 3, run.stderr
    _, _, result = framed(run.stdout)
    assert (result["status"], result["stop_reason"]) == ("limit", "budget")


def test_a_refused_tool_call_exits_4_even_when_the_model_then_answers(home, tmp_path):
    run = ask(home, tmp_path, "--model", "mock/tools", "--approval", "read_only", "--json",
              'tool: write_file {"path": "x.txt", "content": "hi"}')  # fmt: skip
    assert run.returncode == 4, run.stderr
    _, events, result = framed(run.stdout)
    assert events[-1]["stop_reason"] == "end_turn"
    assert (result["status"], result["exit_code"]) == ("denied", 4)
    assert not (tmp_path / "x.txt").exists()


def test_a_provider_failure_exits_1_with_the_result_line(home, tmp_path, replay_server):
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is malformed"}}
    replay_server.enqueue(ScriptedResponse(status=400, body=json.dumps(error).encode()))
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": replay_server.url}
    run = ask(home, tmp_path, "--model", "anthropic/claude-sonnet-4-5", "--json", "hi", **env)
    assert run.returncode == 1, run.stderr
    _, _, result = framed(run.stdout)
    assert (result["status"], result["stop_reason"], result["exit_code"]) == ("error", "error", 1)
    assert "prompt is malformed" in run.stderr


def test_a_schema_from_a_real_project_goes_natively_to_anthropic(home, tmp_path, replay_server):
    from tests.support.steer_streams import anthropic_text

    schema = ROOT / "tests" / "fixtures" / "schemas" / "invoice_list.json"
    answer = {"items": [{"invoice_no": "7", "description": "d", "quantity": "1", "date": "2026-11-02",
                         "unit_price": "2", "amount": "2", "total": "2"}]}  # fmt: skip
    replay_server.enqueue(
        ScriptedResponse(body=anthropic_text(json.dumps(answer)), headers={"content-type": "text/event-stream"})
    )
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": replay_server.url}
    run = ask(home, tmp_path, "--model", "anthropic/claude-sonnet-4-5", "--thinking", "off", "--output-schema",
              str(schema), "--json", "Extract.", **env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    _, _, result = framed(run.stdout)
    assert result["structured_output"] == answer
    sent = replay_server.requests[-1].json()["output_config"]["format"]
    required = ["invoice_no", "description", "quantity", "date", "unit_price", "amount", "total"]
    assert sent["type"] == "json_schema" and sent["schema"]["$defs"]["InvoiceItem"]["required"] == required


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{not json", "not JSON"),
        (b'{"type": "objectx"}', "not a valid JSON Schema"),
        (
            b'{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}',
            "cycle that never reaches a value",
        ),
        (b'{"type": "object", "description": "' + b"x" * (10 * 1024 * 1024) + b'"}', "at most 1,048,576"),
    ],
)
def test_a_schema_file_that_cannot_be_used_exits_2_naming_it(home, tmp_path, content, words):
    path = tmp_path / "bad.schema.json"
    path.write_bytes(content)
    run = ask(home, tmp_path, "--model", "mock/echo", "--output-schema", str(path), "--json", "hi")
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""  # the run never started: no header, no result
    [line] = run.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"ponder: --output-schema {path}:") and words in line, run.stderr


def test_usage_errors_exit_2_before_any_run(home, tmp_path):
    missing = ask(home, tmp_path, "--model", "mock/echo", "--output-schema", str(tmp_path / "nope.json"), "hi")
    assert missing.returncode == 2 and "nope.json: cannot read it" in missing.stderr
    model = ask(home, tmp_path, "--model", "nope/x", "--json", "hi")
    assert model.returncode == 2 and model.stdout == ""
    unconfigured = ask(home, tmp_path, "--model", "anthropic/claude-sonnet-4-5", "--json", "hi")
    assert unconfigured.returncode == 2 and "ANTHROPIC_API_KEY" in unconfigured.stderr
    flag = ask(home, tmp_path, "--max-turns", "0", "hi")
    assert flag.returncode == 2
    # a cost budget on a model without a known price could never be kept: refused, naming the model
    unpriced = ask(home, tmp_path, "--model", "mock/echo", "--max-cost", "1", "--json", "hi")
    assert unpriced.returncode == 2 and unpriced.stdout == ""
    [line] = unpriced.stderr.strip().splitlines()
    assert "no price for mock/echo" in line


def test_sigterm_cancels_the_turn_and_exits_130_with_the_result_line(home, tmp_path):
    process = subprocess.Popen(
        [*PONDER, "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "--json", "word " * 400],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env_for(home, PONDER_MOCK_DELAY_MS="50"),
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert json.loads(first)["type"] == "header"
    while '"text_delta"' not in process.stdout.readline():
        pass
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert process.returncode == 130
    result = lines_of(rest)[-1]
    assert (result["type"], result["status"], result["stop_reason"], result["exit_code"]) == (
        "result", "cancelled", "cancelled", 130,
    )  # fmt: skip


def _daemon_of(pid: int) -> int:
    """The ponder daemon the command started (its one child)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def _json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON lines a terminal shows (the echo of a Ctrl-C, ``^C``, may come first on a line)."""
    return [json.loads(line[line.index('{"type"') :]) for line in text.splitlines() if '{"type"' in line]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads a process's children from /proc (Linux)")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_on_a_terminal_cancels_prints_the_result_and_exits_130(home, tmp_path, backend):
    args = ["ask", "--cwd", str(tmp_path), "--model", "mock/echo", "--json", "word " * 400]
    env = env_for(home, PONDER_MOCK_DELAY_MS="50", PONDER_ASYNC_BACKEND=backend)
    with Terminal(args, env, program=PONDER) as terminal:
        terminal.expect(r'"text_delta"')
        pressed = time.monotonic()
        terminal.type("\x03")  # SIGINT to the whole foreground process group, as a person's Ctrl-C
        assert terminal.wait(timeout=30) == 130
        took = time.monotonic() - pressed
    assert took < 2.5, f"{took:.1f}s from Ctrl-C to exit"
    lines = _json_lines(terminal.text)
    assert lines[0]["type"] == "header"
    assert lines[-2]["type"] == "turn_end" and lines[-2]["stop_reason"] == "cancelled"
    assert (lines[-1]["type"], lines[-1]["status"], lines[-1]["exit_code"]) == ("result", "cancelled", 130)
    assert "ponder: cancelling…" in terminal.text
    # the daemon was not shut down under the cancel: it stored the partial reply as interrupted
    sessions = subprocess.run([*PONDER, "sessions", "--json"], capture_output=True, text=True, env=env_for(home))
    [session] = json.loads(sessions.stdout)["sessions"]
    shown = subprocess.run([*PONDER, "sessions", session["session_id"], "--json"], capture_output=True, text=True,
                           env=env_for(home))  # fmt: skip
    stored = json.loads(shown.stdout)
    assert stored["session"]["status"] == "idle"
    assert [m["status"] for m in stored["messages"] if m["role"] == "assistant"] == ["interrupted"]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads a process's children from /proc (Linux)")
def test_a_second_ctrl_c_exits_at_once(home, tmp_path):
    args = ["ask", "--cwd", str(tmp_path), "--model", "mock/echo", "--json", "word " * 400]
    with Terminal(args, env_for(home, PONDER_MOCK_DELAY_MS="50"), program=PONDER) as terminal:
        terminal.expect(r'"text_delta"')
        daemon = _daemon_of(terminal.pid)
        os.kill(daemon, signal.SIGSTOP)  # a daemon that cannot answer the cancel
        try:
            terminal.type("\x03")
            terminal.expect(r"cancelling…")
            pressed = time.monotonic()
            terminal.type("\x03")
            assert terminal.wait_exit(timeout=30) == 130
            took = time.monotonic() - pressed
        finally:
            os.kill(daemon, signal.SIGCONT)
    assert took < 1.5, f"{took:.1f}s from the second Ctrl-C to exit"
    result = _json_lines(terminal.text)[-1]
    assert (result["type"], result["status"], result["exit_code"]) == ("result", "cancelled", 130)


def test_a_store_that_cannot_be_used_is_never_exit_0(home, tmp_path):
    (home / "sessions.db").mkdir()  # no database can be opened there
    run = ask(home, tmp_path, "--model", "mock/echo", "--json", "hi")
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stdout == ""  # no session, no run: no lines
    assert "sessions.db" in run.stderr
