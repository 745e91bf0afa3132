"""run_command with real subprocesses: streaming, exit codes, caps, timeout and cancel.

Process-group assertions look processes up by pid in /proc; a zombie counts as gone
(where PID 1 does not reap orphans, killed children stay zombies forever).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

import anyio
import pytest

from daemon.tools import ToolContext, builtin_tools, execute_tool
from daemon.tools import run_command as run_command_module

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


class Collector:
    def __init__(self) -> None:
        self.chunks: list[tuple[float, str]] = []

    async def __call__(self, chunk: str) -> None:
        self.chunks.append((time.monotonic(), chunk))

    @property
    def text(self) -> str:
        return "".join(chunk for _, chunk in self.chunks)


async def run(cwd: Path, command: str, emit=None, *, secrets=(), pass_env=(), **arguments):
    context = ToolContext(cwd=cwd, emit_output=emit, secrets=secrets, pass_env=pass_env)
    return await execute_tool(builtin_tools(), "run_command", {"command": command, **arguments}, context)


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


async def watch_group(collector: Collector, found: list[int], at_least: int) -> None:
    """Wait for the command to print its pgid, then record its running members."""
    while not (match := re.search(r"pgid=(\d+)", collector.text)):
        await anyio.sleep(0.02)
    pgid = int(match.group(1))
    while len(members := group_members(pgid)) < at_least:
        await anyio.sleep(0.02)
    found.extend(members)


@pytest.fixture
def fast_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shorter wait for output after the shell exits, to keep these tests quick."""
    monkeypatch.setattr(run_command_module, "DRAIN_GRACE_S", 0.1)


# A shell that prints its pgid, then a nested shell with a background and a foreground
# sleep: four processes in the group (outer sh, inner sh or its exec'd sleep, 2 sleeps).
NESTED = "echo pgid=$$; sh -c 'sleep 30 & sleep 30'"


async def test_output_is_streamed_as_it_arrives(tmp_path: Path) -> None:
    collector = Collector()
    started = time.monotonic()
    result = await run(tmp_path, "printf 'first\\n'; sleep 0.4; printf 'second\\n'", collector)
    assert collector.text == "first\nsecond\n"
    assert len(collector.chunks) >= 2
    # The first chunk was delivered while the command was still sleeping.
    assert collector.chunks[0][0] - started < 0.35
    assert result.text == "first\nsecond\n[exit code 0]"
    assert not result.is_error


async def test_exit_code_stderr_and_cwd(tmp_path: Path) -> None:
    ok = await run(tmp_path, "pwd")
    assert ok.text == f"{os.path.realpath(tmp_path)}\n[exit code 0]"
    failed = await run(tmp_path, "echo out; echo err >&2; exit 3")
    assert failed.is_error
    assert failed.text == "out\nerr\n[exit code 3]"
    silent = await run(tmp_path, "true")
    assert silent.text == "(no output)\n[exit code 0]"
    stdin_closed = await run(tmp_path, "cat")  # would hang forever with an open stdin
    assert stdin_closed.text == "(no output)\n[exit code 0]"


async def test_output_is_capped_keeping_head_and_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_command_module, "MAX_STREAMED_BYTES", 1000)
    collector = Collector()
    result = await run(tmp_path, "echo START; head -c 300000 /dev/zero | tr '\\0' x; echo; echo END", collector)
    assert not result.is_error
    assert result.text.startswith("START\nxxx")
    assert result.text.endswith("xxx\nEND\n[exit code 0]")
    assert re.search(r"\[\.\.\. \d+ bytes of output omitted \.\.\.\]", result.text)
    assert len(result.text) < 70 * 1024
    assert len(collector.text) < 1200
    assert collector.text.endswith("[streaming stopped after 0 KiB; the command keeps running]\n")


async def test_bad_arguments(tmp_path: Path) -> None:
    too_long = await run(tmp_path, "true", timeout_s=601)
    assert too_long.is_error and "$.timeout_s" in too_long.text
    empty = await run(tmp_path, "   ")
    assert empty.is_error and "empty" in empty.text


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    collector = Collector()
    members: list[int] = []
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_group, collector, members, 3)
        result = await run(tmp_path, NESTED, collector, timeout_s=0.5)
    elapsed = time.monotonic() - started
    assert result.is_error
    assert "[timed out after 0.5 s; the command and its child processes were killed]" in result.text
    assert 0.5 <= elapsed < 2.5
    assert len(members) >= 3
    assert not [pid for pid in members if running(pid)]


async def test_cancellation_kills_the_group_and_propagates(tmp_path: Path) -> None:
    collector = Collector()
    members: list[int] = []
    reached_after_call = False
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_group, collector, members, 3)
        with anyio.move_on_after(0.5) as scope:
            await run(tmp_path, NESTED, collector)
            reached_after_call = True
    assert scope.cancelled_caught
    assert not reached_after_call
    assert time.monotonic() - started < 2
    assert len(members) >= 3
    assert not [pid for pid in members if running(pid)]


async def test_processes_ignoring_sigterm_get_sigkill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_command_module, "KILL_GRACE_S", 0.3)
    collector = Collector()
    members: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_group, collector, members, 3)
        # Ignored signals are inherited across exec, so every process here ignores TERM.
        result = await run(tmp_path, "trap '' TERM; " + NESTED, collector, timeout_s=0.5)
    assert result.is_error and "timed out" in result.text
    assert not [pid for pid in members if running(pid)]


async def test_background_child_holding_output_is_stopped(tmp_path: Path, fast_drain: None) -> None:
    started = time.monotonic()
    result = await run(tmp_path, "sleep 30 & echo bg=$!")
    assert time.monotonic() - started < 1.5
    assert not result.is_error
    assert "[exit code 0]\n[the shell exited but background processes kept its output open" in result.text
    pid = int(re.search(r"bg=(\d+)", result.text).group(1))
    assert not running(pid)


async def test_detached_background_child_is_left_alone(tmp_path: Path) -> None:
    result = await run(tmp_path, "sleep 30 > /dev/null 2>&1 & echo bg=$!")
    pid = int(re.search(r"bg=(\d+)", result.text).group(1))
    try:
        assert result.text == f"bg={pid}\n[exit code 0]"
        assert running(pid)  # it redirected its output: the person wanted it to keep running
    finally:
        os.kill(pid, 9)


async def test_a_failing_listener_does_not_lose_the_result(tmp_path: Path) -> None:
    async def broken(chunk: str) -> None:
        raise RuntimeError("client went away")

    result = await run(tmp_path, "echo a; echo b", broken)
    assert result.text == "a\nb\n[exit code 0]"


async def test_a_slow_listener_gets_all_output(tmp_path: Path, fast_drain: None) -> None:
    received: list[str] = []

    async def slow(chunk: str) -> None:
        await anyio.sleep(0.3)  # longer than the drain grace after the shell exits
        received.append(chunk)

    result = await run(tmp_path, "printf a; sleep 0.1; printf b", slow)
    assert result.text == "ab\n[exit code 0]"
    assert "".join(received) == "ab"


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
async def test_a_holder_outside_the_group_does_not_hang_the_tool(tmp_path: Path, fast_drain: None) -> None:
    started = time.monotonic()
    result = await run(tmp_path, "setsid sleep 30 & echo bg=$!")
    pid = int(re.search(r"bg=(\d+)", result.text).group(1))
    try:
        assert time.monotonic() - started < 2
        assert result.text.startswith(f"bg={pid}\n[exit code 0]\n[the shell exited but background processes")
    finally:
        os.kill(pid, 9)  # it left the process group, so only the test can stop it


async def test_credentials_are_kept_from_the_command_unless_passed(tmp_path, monkeypatch):
    planted = {var: f"planted-{var.lower()}-0123456789" for var in ("GITHUB_TOKEN", "GOOGLE_API_KEY", "OPENAI_API_KEY")}
    for var, value in planted.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("PONDER_TEST_ORDINARY", "kept")
    show = (
        "echo gh=${GITHUB_TOKEN:-absent} google=${GOOGLE_API_KEY:-absent} openai=${OPENAI_API_KEY:-absent}"
        " ${PONDER_TEST_ORDINARY}"
    )
    result = await run(tmp_path, show)
    assert result.text.startswith("gh=absent google=absent openai=absent kept\n"), result.text
    # [tools] pass_env lets chosen ones through
    result = await run(tmp_path, show, pass_env=("GITHUB_TOKEN",))
    assert result.text.startswith(f"gh={planted['GITHUB_TOKEN']} google=absent openai=absent kept\n"), result.text


async def test_a_secret_is_masked_before_the_output_is_cut(tmp_path):
    secret = "sk-planted-" + "0123456789abcdef" * 2
    head = run_command_module.KEPT_HEAD_BYTES
    # The kept head ends one character before the end of the secret; the middle is dropped.
    (tmp_path / "big.txt").write_text("x" * (head - len(secret) + 1) + secret + "y" * (3 * head) + "z" * 100_000)
    emit = Collector()
    result = await run(tmp_path, "cat big.txt", emit, secrets=(secret,))
    assert "bytes of output omitted" in result.text
    for fragment in (secret[:12], secret[-12:-1], secret[8:20]):
        assert fragment not in result.text and fragment not in emit.text
    assert "x***y" in result.text and "x***y" in emit.text


async def _gated(tmp_path: Path, open_it: bool) -> tuple[int, bool]:
    """Start a command that records its stdin behind the watcher's gate; open the gate or drop it."""
    from daemon.tools.procgroup import gated_argv, release_group, watch_then_open_gate

    gate_read, gate = os.pipe()
    try:
        process = await anyio.open_process(
            gated_argv(["/bin/sh", "-c", "readlink /proc/$$/fd/0 > ran"]),
            stdin=gate_read,
            cwd=tmp_path,
            start_new_session=True,
        )
    finally:
        os.close(gate_read)
    if open_it:
        watch_then_open_gate(process.pid, gate)
    else:
        os.close(gate)  # as when the daemon dies before the group is watched
    with anyio.fail_after(10):
        code = await process.wait()
    await process.aclose()
    release_group(process.pid)
    return code, (tmp_path / "ran").exists()


async def test_a_gated_command_starts_once_its_gate_opens_with_stdin_from_dev_null(tmp_path):
    code, ran = await _gated(tmp_path, open_it=True)
    assert (code, ran) == (0, True)
    assert (tmp_path / "ran").read_text() == "/dev/null\n"  # the gate's pipe is not the command's input


async def test_a_gated_command_whose_gate_is_dropped_never_runs(tmp_path):
    assert await _gated(tmp_path, open_it=False) == (125, False)
