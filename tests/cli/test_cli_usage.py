"""``ponder ask`` on a terminal ends with one line saying where the session stands (context
used / window, and cost); ``ponder sessions`` lists each session's totals. Real processes,
stderr on a pseudo-terminal as a person's shell gives it."""

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.catalog.catalog import Catalog
from daemon.config.settings import load_config
from daemon.context.pricing import cost_of
from protocol.objects import Usage
from tests.support.harness import subprocess_env
from tests.support.replay import ReplayServer

pytestmark = pytest.mark.slow

OPUS = "anthropic/claude-opus-4-6"


def ponder(home: Path, *args: str, extra_env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``ponder ARGS`` with stdout piped and stderr on a pseudo-terminal: (code, stdout, stderr)."""
    env = {**os.environ, **subprocess_env(home, extra_env)}
    leader, follower = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "daemon", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            env=env,
            timeout=60,
        )
    finally:
        os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    stderr = b"".join(chunks).decode().replace("\r\n", "\n")
    return result.returncode, result.stdout.decode(), stderr


def test_ask_on_a_terminal_ends_with_context_and_the_models_dev_cost(
    home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-cli-usage", "ANTHROPIC_BASE_URL": replay_server.url}
    replay_server.enqueue_fixture("anthropic", "thinking-text")  # 31 tokens in, 118 out
    catalog = Catalog(load_config(home, env=env))
    spec = catalog.get(OPUS)
    cost = cost_of(Usage(input_tokens=31, output_tokens=118), catalog.price(spec))
    assert cost is not None and spec.context_window is not None

    code, stdout, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--model", OPUS, "Hello?", extra_env=env)
    assert code == 0, stderr
    assert stdout.strip()  # the answer, on stdout
    lines = stderr.strip().splitlines()
    assert lines[-1] == f"Context: 149 / {spec.context_window:,} tokens · ${cost.amount:.4f}"
    assert sum(line.startswith("Context:") for line in lines) == 1
    assert "Context:" not in stdout

    code, stdout, stderr = ponder(home, "sessions", extra_env=env)
    assert code == 0, stderr
    header, listed = stdout.strip().splitlines()
    assert header.split() == ["SESSION", "UPDATED", "MSGS", "TOKENS", "COST", "MODEL", "TITLE"]
    assert re.search(rf"\b149 +\${cost.amount:.4f} +{OPUS} +Hello\?$", listed), listed
    code, stdout, stderr = ponder(home, "sessions", listed.split()[0], extra_env=env)
    assert code == 0, stderr
    window = f"{spec.context_window:,}"
    assert f"149 tokens · ${cost.amount:.4f}" in stdout.splitlines()[2]
    assert stdout.splitlines()[3] == f"  Context: 149 / {window} tokens · ${cost.amount:.4f}"


def test_ask_on_a_terminal_with_an_unpriced_model_says_no_price_and_a_pipe_gets_no_line(
    home: Path, tmp_path: Path
) -> None:
    code, _, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "ping")
    assert code == 0, stderr
    last = stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"Context: [1-9][\d,]* / 200,000 tokens · no price known", last), last

    env = {**os.environ, **subprocess_env(home)}
    piped = subprocess.run(
        [sys.executable, "-m", "daemon", "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "ping"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    assert "Context:" not in piped.stderr  # not a terminal: scripts get the answer only


def test_ask_stopped_by_a_budget_says_which_and_fails(home: Path, tmp_path: Path) -> None:
    (home / "config.toml").write_text("[budget]\nmax_tokens = 1\n")  # every new session's default
    code, _, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "ping")
    assert code == 0, stderr  # the first call is within the budget; it spends it
    code, stdout, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--continue", "ping again")
    assert code == 3  # a limit (PROTOCOL.md: exit 3)
    assert stdout == ""  # no model call was made
    assert re.search(r"ponder: The session's token budget of 1 tokens is spent \([\d,]+ used\)", stderr), stderr
    assert stderr.strip().splitlines()[-1].startswith("Context: ")


def test_ask_max_tokens_sets_a_new_sessions_budget_and_raises_a_spent_one_on_continue(
    home: Path, tmp_path: Path
) -> None:
    code, _, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "--max-tokens", "1", "ping")
    assert code == 0, stderr  # the first call is within the budget; it spends it
    code, stdout, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--continue", "ping again")
    assert code == 3 and stdout == "", stderr  # a limit (PROTOCOL.md: exit 3)
    assert "token budget of 1 tokens is spent" in stderr
    # --max-tokens on --continue raises the spent budget: the prompt goes on.
    code, stdout, stderr = ponder(
        home, "ask", "--cwd", str(tmp_path), "--continue", "--max-tokens", "1,000,000", "ping again"
    )
    assert code == 0, stderr
    assert "ping again" in stdout
    # --max-cost on a model with no known price is refused, naming it, before any model call.
    code, stdout, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--continue", "--max-cost", "5", "once more")
    assert code == 2 and stdout == ""  # a usage error: nothing ran
    assert "ponder knows no price for mock/echo" in stderr, stderr


def test_ask_max_cost_that_is_not_an_amount_is_a_usage_error(home: Path, tmp_path: Path) -> None:
    code, stdout, stderr = ponder(home, "ask", "--cwd", str(tmp_path), "--max-cost", "lots", "ping")
    assert code == 2 and stdout == ""
    assert "--max-cost: 'lots' is not an amount in USD" in stderr, stderr
