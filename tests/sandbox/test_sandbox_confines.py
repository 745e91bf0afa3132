"""Real commands in the real sandboxes (bubblewrap, and Landlock as the fallback): what they
may write, what they cannot reach, and the bad input a model (or a repository) can try."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from daemon.sandbox.bwrap import MAX_PROCESSES
from tests.sandbox.support import bubblewrap, landlock, needs_bwrap, needs_landlock, run, sandbox_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def place(tmp_path):
    """A workspace (a git-like .git inside), a ponder home holding a token, and a directory
    outside both; not under /tmp, which the sandbox replaces with a private one."""
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    home = tmp_path / "ponder-home"
    home.mkdir()
    (home / "serve.token").write_text("token-in-the-home")
    outside = Path(tempfile.mkdtemp(prefix="ponder-outside-", dir="/var/tmp"))
    (outside / "keep.txt").write_text("original")
    yield work, home, outside
    shutil.rmtree(outside, ignore_errors=True)


# --- bubblewrap ------------------------------------------------------------------------------


@needs_bwrap
async def test_writes_inside_the_workspace_and_its_tmp_succeed(place):
    work, home, _ = place
    sandbox = sandbox_for(bubblewrap(), work, home)
    result = await run(sandbox, work, 'echo made > made.txt && echo t > "$TMPDIR/t" && cat made.txt "$TMPDIR/t"')
    assert not result.is_error, result.text
    assert (work / "made.txt").read_text() == "made\n"
    assert result.sandbox is not None
    assert (result.sandbox.enforced, result.sandbox.mechanism, result.sandbox.denied) == (True, "bubblewrap", False)


@needs_bwrap
async def test_a_write_outside_the_roots_is_stopped_and_reported(place):
    work, home, outside = place
    result = await run(sandbox_for(bubblewrap(), work, home), work, f"echo bad > {outside}/keep.txt")
    assert result.is_error and "Read-only file system" in result.text
    assert result.sandbox is not None and result.sandbox.denied
    assert (outside / "keep.txt").read_text() == "original"


@needs_bwrap
async def test_git_stays_read_only_inside_a_writable_workspace(place):
    work, home, _ = place
    sandbox = sandbox_for(bubblewrap(), work, home)
    result = await run(sandbox, work, "echo '[evil]' >> .git/config; touch .git/hooks-planted; rm -rf .git")
    assert result.is_error
    assert (work / ".git" / "config").read_text() == "[core]\n"
    assert not (work / ".git" / "hooks-planted").exists()


@needs_bwrap
async def test_read_only_mode_writes_nothing(place):
    work, home, _ = place
    result = await run(sandbox_for(bubblewrap(), work, home, mode="read_only"), work, "touch x")
    assert result.is_error and result.sandbox is not None and result.sandbox.denied
    assert not (work / "x").exists()


@needs_bwrap
async def test_the_ponder_home_is_hidden(place):
    work, home, _ = place
    result = await run(sandbox_for(bubblewrap(), work, home), work, f"ls -A {home}; cat {home}/serve.token")
    assert "token-in-the-home" not in result.text
    assert "No such file" in result.text


@needs_bwrap
async def test_a_workspace_inside_the_home_stays_usable_while_the_rest_is_hidden(tmp_path):
    home = tmp_path / "home"
    work = home / "projects" / "w"
    work.mkdir(parents=True)
    (home / "serve.token").write_text("secret-token")
    result = await run(sandbox_for(bubblewrap(), work, home), work, f"echo ok > f && cat f; cat {home}/serve.token")
    assert "ok" in result.text and "secret-token" not in result.text
    assert (work / "f").read_text() == "ok\n"


@needs_bwrap
async def test_symlinks_from_the_workspace_lead_nowhere_writable(place):
    work, home, outside = place
    (work / "to-file").symlink_to(outside / "keep.txt")
    (work / "to-dir").symlink_to(outside)
    command = "echo bad > to-file; echo bad > to-dir/new.txt; ln -s / root-link; echo bad > root-link/etc-planted"
    result = await run(sandbox_for(bubblewrap(), work, home), work, command)
    assert result.sandbox is not None and result.sandbox.denied
    assert (outside / "keep.txt").read_text() == "original"
    assert not (outside / "new.txt").exists()
    assert not Path("/etc-planted").exists()


@needs_bwrap
async def test_dev_shm_is_private(place):
    work, home, _ = place
    name = f"ponder-sandbox-test-{os.getpid()}"
    result = await run(sandbox_for(bubblewrap(), work, home), work, f"echo x > /dev/shm/{name} && cat /dev/shm/{name}")
    assert not Path("/dev/shm", name).exists(), result.text


@needs_bwrap
async def test_proc_shows_only_the_sandbox(place):
    work, home, outside = place
    me = os.getpid()
    command = (
        f"test -e /proc/{me} && echo SEES-THE-DAEMON; cat /proc/{me}/environ; "
        f"echo bad > /proc/self/root{outside}/keep.txt; echo bad > /proc/1/root{outside}/keep.txt; "
        "echo 1 > /proc/sys/kernel/sysrq"
    )
    result = await run(sandbox_for(bubblewrap(), work, home), work, command)
    assert "SEES-THE-DAEMON" not in result.text
    assert (outside / "keep.txt").read_text() == "original"


@needs_bwrap
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
async def test_unshare_and_mount_are_refused(place):
    work, home, outside = place
    command = (
        f"unshare -U -r -m sh -c 'mount -t tmpfs none {outside} && echo REMOUNTED'; "
        f"mount -t tmpfs none {outside} && echo MOUNTED; mount -o remount,rw / && echo REMOUNT-RW; "
        f"unshare -m true && echo UNSHARED"
    )
    result = await run(sandbox_for(bubblewrap(), work, home), work, command)
    for marker in ("REMOUNTED", "MOUNTED", "REMOUNT-RW", "UNSHARED"):
        assert marker not in result.text, result.text
    assert (outside / "keep.txt").read_text() == "original"


async def _listener() -> tuple[anyio.abc.SocketListener, int, list[str]]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    return listener, port, []


CONNECT = (
    "{python} -I -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('CONNECTED')\""
)


@needs_bwrap
async def test_the_network_is_cut_unless_allowed(place):
    work, home, _ = place
    listener, port, seen = await _listener()

    async def serve() -> None:
        async def handle(stream: anyio.abc.SocketStream) -> None:
            seen.append("connection")
            await stream.aclose()

        await listener.serve(handle)

    command = CONNECT.format(python=sys.executable, port=port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(serve)
        cut = await run(sandbox_for(bubblewrap(), work, home), work, command)
        assert "CONNECTED" not in cut.text and not seen
        opened = await run(sandbox_for(bubblewrap(), work, home, network=True), work, command)
        assert "CONNECTED" in opened.text, opened.text
        assert seen == ["connection"]
        tg.cancel_scope.cancel()


@needs_bwrap
async def test_a_fork_bomb_meets_the_process_limit():
    """RLIMIT_NPROC inside (root is exempt by the kernel: then the bomb runs as nobody)."""
    if bubblewrap().prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    base = Path(tempfile.mkdtemp(prefix="ponder-forkbomb-"))
    try:
        work, home = base / "work", base / "home"
        work.mkdir()
        home.mkdir()
        os.chmod(base, 0o755)
        os.chmod(work, 0o777)
        sandbox = sandbox_for(bubblewrap(), work, home)
        bomb = f"i=0; while [ $i -lt {MAX_PROCESSES + 200} ]; do sleep 30 & i=$((i+1)); done; echo LOOP-DONE"
        argv = sandbox.spawn_argv(bomb, work)
        assert argv is not None
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv: cannot run the bomb as an ordinary user")
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *argv]
        done = await anyio.run_process(argv, cwd=work, check=False, stderr=subprocess.STDOUT)
        output = done.stdout.decode(errors="replace")
        assert "fork" in output.lower(), output[-2000:]  # "Cannot fork" / "can't fork": the limit was met
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_bwrap
async def test_background_jobs_end_with_the_command(place):
    work, home, _ = place
    with anyio.fail_after(30):
        result = await run(sandbox_for(bubblewrap(), work, home), work, "sleep 300 > /dev/null 2>&1 & echo started")
    assert "started" in result.text and not result.is_error


# --- Landlock, the fallback ----------------------------------------------------------------


@needs_landlock
async def test_landlock_confines_writes_and_reports_what_it_cannot(place):
    work, home, outside = place
    sandbox = sandbox_for(landlock(), work, home)
    assert sandbox.confinement.enforced and sandbox.confinement.mechanism == "landlock"
    assert set(sandbox.confinement.degraded) == {"git", "home", "network"}
    assert not sandbox.confinement.approves
    name = f"ponder-landlock-test-{os.getpid()}"
    result = await run(
        sandbox, work, f"echo ok > inside.txt; echo bad > {outside}/keep.txt; echo bad > /dev/shm/{name}"
    )
    assert (work / "inside.txt").read_text() == "ok\n"
    assert (outside / "keep.txt").read_text() == "original"
    assert not Path("/dev/shm", name).exists()
    assert result.sandbox is not None and result.sandbox.denied and result.sandbox.mechanism == "landlock"


@needs_landlock
async def test_landlock_blocks_tcp_connections(place):
    if landlock().landlock_abi < 4:
        pytest.skip("this kernel's Landlock cannot restrict TCP (ABI 4, Linux 6.7)")
    work, home, _ = place
    listener, port, _ = await _listener()
    async with listener:
        result = await run(sandbox_for(landlock(), work, home), work, CONNECT.format(python=sys.executable, port=port))
    assert "CONNECTED" not in result.text and "Permission denied" in result.text


@needs_landlock
async def test_landlock_cannot_signal_the_daemon(place):
    if landlock().landlock_abi < 6:
        pytest.skip("signal scoping is Landlock ABI 6 (Linux 6.12)")
    work, home, _ = place
    result = await run(sandbox_for(landlock(), work, home), work, f"kill -0 {os.getpid()} && echo REACHED")
    assert "REACHED" not in result.text
