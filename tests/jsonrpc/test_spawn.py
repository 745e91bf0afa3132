"""Starting a child without ``subprocess`` (``daemon.jsonrpc.spawn.start_process``), as the
client commands start their daemon: pipes both ways, a session of its own, no descriptor of the
client's beyond the three it is given, stderr inherited or /dev/null, and waiting and signalling
as ``subprocess.Popen`` does."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.jsonrpc.spawn import DAEMON_MAIN, DEVNULL, daemon_command, start_process

ROOT = Path(__file__).resolve().parents[2]

# Reports what the child sees: its session, its stdin's first line, the descriptors it holds.
REPORT = r"""
import os, sys
line = sys.stdin.buffer.readline()
fds = sorted(int(name) for name in os.listdir("/proc/self/fd"))
print(os.getsid(0), os.getpid(), line.decode().strip(), fds, flush=True)
print("on stderr", file=sys.stderr, flush=True)
"""


def _run_reporting(stderr: int | None) -> tuple[int, int, str, list[int], int]:
    child = start_process([sys.executable, "-c", REPORT], stderr=stderr)
    child.stdin.write(b"hello\n")
    child.stdin.close()
    sid, pid, line, fds = child.stdout.readline().decode().split(" ", 3)
    child.stdout.close()
    code = child.wait(30)
    return int(sid), int(pid), line, [int(fd) for fd in fds.strip("[]\n").split(", ")], code


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the child's descriptors")
def test_a_started_child_gets_pipes_its_own_session_and_no_other_descriptor(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    leaked = os.open(tmp_path / "inheritable", os.O_CREAT | os.O_WRONLY)
    os.set_inheritable(leaked, True)  # what a parent may hand this process: not for the daemon
    try:
        sid, pid, line, fds, code = _run_reporting(stderr=None)
    finally:
        os.close(leaked)
    assert (line, code) == ("hello", 0)
    assert sid == pid  # a session of its own: the terminal's Ctrl-C is not for it
    # stdin, stdout, stderr, and what the interpreter opened for the listing (its own, non-inheritable)
    assert leaked not in fds
    assert fds[:3] == [0, 1, 2]
    assert len(fds) <= 4
    assert "on stderr" in capfd.readouterr().err  # inherited


def test_stderr_can_go_to_devnull(capfd: pytest.CaptureFixture[str]) -> None:
    _, _, line, _, code = _run_reporting(stderr=DEVNULL)
    assert (line, code) == ("hello", 0)
    assert "on stderr" not in capfd.readouterr().err


# A client with stdin and stdout closed (in a process of its own, not the test runner's):
# its pipe ends would be numbered 0 and 1, and lost in the child's dup2 onto them.
NO_STDIO = r"""
import os, sys
os.close(0)
os.close(1)
from daemon.jsonrpc.spawn import start_process
child = start_process([sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.readline())"])
child.stdin.write(b"through\n")
got = child.stdout.readline()
sys.stderr.write(f"{child.stdin.fileno() > 2 and child.stdout.fileno() > 2} {got!r} {child.wait(30)}")
"""


def test_stdio_taken_by_the_pipes_when_this_process_has_none() -> None:
    done = subprocess.run([sys.executable, "-c", NO_STDIO], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stderr == "True b'through\\n' 0"


def test_wait_poll_and_kill_as_popen_does() -> None:
    child = start_process([sys.executable, "-c", "import sys; sys.stdin.buffer.read()"])
    assert child.poll() is None
    with pytest.raises(TimeoutError):
        child.wait(0.05)
    child.kill()
    assert child.wait(30) == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL
    child.kill()  # reaped already: nothing is signalled (its pid may belong to another process now)
    child.terminate()
    child.stdin.close()
    child.stdout.close()


def test_a_missing_program_is_an_error_and_leaks_no_pipe(tmp_path: Path) -> None:
    before = sorted(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    with pytest.raises(FileNotFoundError):
        start_process([str(tmp_path / "no-such-python")])
    if before is not None:
        assert sorted(os.listdir("/proc/self/fd")) == before


def test_the_daemon_command_runs_ponder_without_runpy() -> None:
    # A client's daemon is ``python -m daemon`` run as ``-c DAEMON_MAIN``: the same program and
    # arguments, without runpy (its import and module search, before the daemon's first line).
    command = daemon_command("/nonexistent-home", ("--quiet",), "debug")
    assert command[:3] == [sys.executable, "-c", DAEMON_MAIN]
    assert command[3:] == ["--log-level", "debug", "--home", "/nonexistent-home", "serve", "--quiet"]

    def imported(*how: str) -> tuple[str, list[str]]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", *how, "--version"], capture_output=True, cwd=ROOT, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        modules = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()]
        return done.stdout.decode(), modules

    version, modules = imported("-c", DAEMON_MAIN)
    assert version.startswith("ponder ") and "daemon.cli.main" in modules
    assert "runpy" not in modules
    # What it stands for: ``-m daemon`` prints the same, through runpy.
    by_module, modules = imported("-m", "daemon")
    assert by_module == version and "runpy" in modules
