"""The SQLite session store: round trips, paging, forks, cascades, migrations, file safety,
two processes on one file, turn leases, and the async facade on asyncio and trio."""

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import msgspec
import pytest

from daemon.conversation import ChatMessage, Part
from daemon.errors import (
    InvalidCursor,
    InvalidLimit,
    InvalidParams,
    LeaseLost,
    MessageNotInSession,
    SessionNotFound,
    StoreUnavailable,
)
from daemon.jsonrpc.client import RpcError
from daemon.jsonrpc.connection import as_wire_error
from daemon.store import AsyncStore, SessionRow, Store, StoreClosed, StoreError, new_lease_owner, process_start_time
from daemon.store.db import MMAP_BYTES
from daemon.store.migrations import MIGRATIONS, SchemaTooNew, migrate, schema_version
from daemon.store.store import StoreQueries
from protocol.objects import SessionPlan, Usage
from tests.store.conftest import FakeClock
from tests.support.acp_harness import acp_daemon
from tests.support.harness import in_memory_daemon

REPO_ROOT = Path(__file__).resolve().parents[2]

# Multi-byte text in every width: CJK, emoji (incl. ZWJ sequence and skin tone), combining
# marks, RTL, and the characters that trip line-based or C-string handling.
TRICKY = "思考中…🙂👩🏽‍💻 e\u0301 עברית \u2028line\u2029 tab\t crlf\r\n nul\x00 end"


@pytest.fixture
def sqlite_store(db_path: Path, clock: FakeClock):
    """For the tests of what only SQLite has (its file, its pragmas, its processes)."""
    with Store(db_path, clock=clock) as opened:
        yield opened


def rows(store: StoreQueries, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """``sql``'s rows, read through the store's own connection (either backend)."""
    return [tuple(row) for row in store._read(lambda db: db.execute(sql, params).fetchall())]


def session(session_id: str = "s1", cwd: str = "/work", **fields) -> SessionRow:
    return SessionRow(id=session_id, cwd=cwd, model_id="anthropic/claude-sonnet-4-5", thinking_level="high", **fields)


def every_part_message(message_id: str = "m1", session_id: str = "s1", seq: int = 1) -> ChatMessage:
    return ChatMessage(
        message_id=message_id,
        session_id=session_id,
        seq=seq,
        role="assistant",
        parts=[
            Part(
                type="thinking",
                text=TRICKY,
                provider="anthropic",
                model="claude-sonnet-4-5",
                signature="EqQBCkYIBxgCKkD+/=" + "签名",
            ),
            Part(
                type="thinking",
                text="",
                redacted=True,
                provider="anthropic",
                model="claude-sonnet-4-5",
                provider_data={"data": "b64==", "nested": {"list": [1, 2.5, None, True], "漢字": "🙂"}},
            ),
            Part(type="text", text="答えは42です 🎉"),
            Part(
                type="tool_call",
                call_id="call_1",
                name="read_file",
                arguments={"path": "src/ファイル.py", "lines": [1, 10]},
                provider="openai",
                model="gpt-5.2",
                provider_data={"item_id": "fc_123", "encrypted_content": "gAAAA…"},
            ),
            Part(type="tool_result", call_id="call_1", is_error=True, text="no such file: ファイル.py\n"),
            Part(type="tool_call", call_id="call_2", name="noop", arguments={}),
        ],
        model_id="anthropic/claude-sonnet-4-5",
        thinking_requested="max",
        thinking_effective="high",
        stop_reason="end_turn",
        usage=Usage(input_tokens=10, output_tokens=20, reasoning_tokens=None, cache_read_tokens=3),
        status="complete",
        created_at="2025-01-02T03:04:05.000006Z",
    )


def text_message(message_id: str, seq: int, session_id: str = "s1", text: str = "hi") -> ChatMessage:
    return ChatMessage(
        message_id=message_id, session_id=session_id, seq=seq, role="user", parts=[Part(type="text", text=text)]
    )


def raw(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(db_path, isolation_level=None)


# --- round trips -------------------------------------------------------------------------


def test_message_round_trip_is_exact(store: StoreQueries, db_path: Path) -> None:
    store.create_session(session())
    original = every_part_message()
    assert store.save_message(original) == original

    [loaded] = store.get_messages("s1")
    assert loaded == original
    assert loaded.to_wire() == original.to_wire()
    if store.backend_name != "sqlite":
        return
    # Byte-exact in the file itself, not only after decoding.
    with raw(db_path) as conn:
        blob = conn.execute("SELECT CAST(text AS BLOB) FROM parts WHERE message_id='m1' AND position=0").fetchone()[0]
    assert blob == TRICKY.encode("utf-8")


def test_absent_round_trip_data_is_null_not_empty(store: StoreQueries) -> None:
    store.create_session(session())
    message = text_message("m1", 1)
    message.parts = [
        Part(type="thinking", text="unsigned", signature=""),
        Part(type="thinking", text="also unsigned", provider="", model=""),
        Part(type="text", text="plain"),
    ]
    stored = store.save_message(message)
    assert [p.signature for p in stored.parts] == [None, None, None]

    stored_rows = rows(
        store, "SELECT signature, provider, model, provider_data_json, arguments_json FROM parts ORDER BY position"
    )
    assert stored_rows == [(None,) * 5] * 3
    assert rows(store, "SELECT count(*) FROM parts WHERE signature = '' OR provider = ''") == [(0,)]
    # The schema refuses '' even from a writer that skips the queries.
    with pytest.raises(StoreError):
        store._write(lambda db: db.execute("UPDATE parts SET signature = '' WHERE position = 0"))

    assert [p.signature for p in store.get_messages("s1")[0].parts] == [None, None, None]


def test_checkpoint_then_final_save_leaves_one_message(store: StoreQueries, clock: FakeClock) -> None:
    store.create_session(session())
    checkpoint = text_message("m1", 1)
    checkpoint.role = "assistant"
    checkpoint.status = "interrupted"
    first = store.save_message(checkpoint)
    clock.tick()

    final = every_part_message("m1", seq=1)
    final.created_at = ""  # an empty created_at keeps the checkpoint's
    store.save_message(final)

    [loaded] = store.get_messages("s1")
    assert loaded.status == "complete"
    assert len(loaded.parts) == len(final.parts)
    assert loaded.created_at == first.created_at
    row = store.get_session("s1")
    assert row is not None
    assert row.message_count == 1
    assert row.updated_at > row.created_at


def test_save_message_errors(store: StoreQueries) -> None:
    with pytest.raises(SessionNotFound):
        store.save_message(text_message("m1", 1, session_id="nope"))
    store.create_session(session("s1"))
    store.create_session(session("s2"))
    store.save_message(text_message("m1", 1))
    with pytest.raises(StoreError, match="Seq 1"):
        store.save_message(text_message("m2", 1))
    with pytest.raises(StoreError, match="belongs to session"):
        store.save_message(text_message("m1", 1, session_id="s2"))
    assert [m.message_id for m in store.get_messages("s1")] == ["m1"]
    assert store.get_messages("s2") == []


# --- sessions ----------------------------------------------------------------------------


def test_create_get_update_session(store: StoreQueries, clock: FakeClock) -> None:
    created = store.create_session(session(title="first", system_prompt="be brief"))
    assert created.created_at == created.updated_at == "2023-11-14T22:13:20.000000Z"
    assert store.get_session("s1") == created
    assert store.get_session("missing") is None

    clock.tick(5)
    updated = store.update_session("s1", title="renamed 🙂", model_id="openai/gpt-5.2", thinking_level="medium")
    assert (updated.title, updated.model_id, updated.thinking_level) == ("renamed 🙂", "openai/gpt-5.2", "medium")
    assert updated.updated_at == "2023-11-14T22:13:25.000000Z"
    assert updated.created_at == created.created_at
    assert store.update_session("s1", approval_policy="auto", updated_at="2030-01-01T00:00:00.000000Z").updated_at == (
        "2030-01-01T00:00:00.000000Z"
    )

    with pytest.raises(SessionNotFound):
        store.update_session("missing", title="x")
    with pytest.raises(TypeError):
        store.update_session("s1", cwd="/elsewhere")

    wire = store.get_session("s1").to_wire("running")  # type: ignore[union-attr]
    assert (wire.session_id, wire.status, wire.message_count, wire.approval_policy) == ("s1", "running", 0, "auto")


def test_list_sessions_pages_newest_first(store: StoreQueries, clock: FakeClock) -> None:
    expected = []
    for i in range(23):
        if i % 3:  # every third pair shares an updated_at: the id breaks the tie
            clock.tick()
        cwd = "/a" if i % 2 else "/b"
        expected.append(store.create_session(session(f"s{i:02d}", cwd=cwd)))
    expected.sort(key=lambda r: (r.updated_at, r.id), reverse=True)

    seen, cursor = [], None
    while True:
        page, cursor = store.list_sessions(limit=5, cursor=cursor)
        seen.extend(page)
        if cursor is None:
            break
        assert len(page) == 5
    assert [r.id for r in seen] == [r.id for r in expected]

    only_a, cursor = store.list_sessions(cwd="/a", limit=100)
    assert cursor is None
    assert [r.id for r in only_a] == [r.id for r in expected if r.cwd == "/a"]

    first, cursor = store.list_sessions(cwd="/b", limit=4)
    # A session created between pages lands in front, not in the middle of the walk.
    clock.tick()
    store.create_session(session("new", cwd="/b"))
    second, _ = store.list_sessions(cwd="/b", limit=4, cursor=cursor)
    b_ids = [r.id for r in expected if r.cwd == "/b"]
    assert [r.id for r in first + second] == b_ids[:8]
    assert store.list_sessions(cwd="/b", limit=1)[0][0].id == "new"

    assert store.list_sessions(cwd="/nowhere") == ([], None)
    with pytest.raises(InvalidCursor):
        store.list_sessions(cursor="not a cursor!")
    with pytest.raises(InvalidLimit):
        store.list_sessions(limit=0)


def test_message_paging(store: StoreQueries) -> None:
    store.create_session(session())
    for seq in range(1, 11):
        store.save_message(text_message(f"m{seq}", seq, text=f"#{seq}"))

    assert [m.seq for m in store.get_messages("s1")] == list(range(1, 11))
    assert [m.seq for m in store.get_messages("s1", after_seq=7)] == [8, 9, 10]
    assert [m.seq for m in store.get_messages("s1", limit=3)] == [1, 2, 3]
    page = store.get_messages("s1", after_seq=3, limit=4)
    assert [(m.seq, m.parts[0].text) for m in page] == [(4, "#4"), (5, "#5"), (6, "#6"), (7, "#7")]
    assert store.get_messages("s1", after_seq=10) == []
    assert store.get_messages("s1", limit=0) == []
    assert store.get_messages("unknown") == []


def test_a_history_read_keeps_every_part_in_place_whatever_its_kind(store: StoreQueries) -> None:
    # The read takes a part's place from the order (no position column) and its two flags as one
    # number: kinds mixed in every order, on pages, with appended text, each part stays what and
    # where it was.
    store.create_session(session())
    plain = Part(type="text", text="plain")
    thought = Part(type="thinking", text="hm", provider="anthropic", model="claude-sonnet-4-5", signature="sig")
    call = Part(type="tool_call", call_id="c1", name="read_file", arguments={"path": "a.py"})
    result = Part(type="tool_result", call_id="c1", text="no such file", is_error=True)
    redacted = Part(type="thinking", redacted=True, provider="anthropic", model="claude-sonnet-4-5")
    image = Part(type="image", attachment_id="a" * 64, mime_type="image/png", size=3, width=1, height=1)
    image_bytes = msgspec.structs.replace(image, data=b"png")
    layouts = [
        [call, plain, result],
        [plain, thought, call, result, plain],
        [redacted, thought, plain],
        [plain],
        [result, call],
        [thought, image_bytes, plain, call],
    ]
    for seq, parts in enumerate(layouts, start=1):
        store.save_message(
            ChatMessage(message_id=f"m{seq}", session_id="s1", seq=seq, role="assistant", parts=list(parts))
        )
    store.append_to_message("m2", {}, {1: " more", 3: " still"})  # a plain part and a rich one
    expected = [[msgspec.structs.replace(p, data=None) for p in parts] for parts in layouts]
    expected[1][1] = msgspec.structs.replace(thought, text="hm more")
    expected[1][3] = msgspec.structs.replace(result, text="no such file still")

    assert [m.parts for m in store.get_messages("s1")] == expected
    assert [m.parts for m in store.get_messages("s1", after_seq=1, limit=2)] == expected[1:3]
    assert [m.parts for m in store.get_messages("s1", after_seq=4)] == expected[4:]
    assert [m.session_id for m in store.get_messages("s1")] == ["s1"] * len(layouts)


def test_fork_whole_and_up_to_a_message(store: StoreQueries) -> None:
    store.create_session(session("src", title="origin"))
    store.save_message(text_message("u1", 1, session_id="src"))
    store.save_message(every_part_message("a1", session_id="src", seq=2))
    store.save_message(text_message("u2", 3, session_id="src"))
    source_messages = store.get_messages("src")

    whole = store.fork_session("src", session("f1", title="fork"))
    assert (whole.parent_id, whole.message_count, whole.title) == ("src", 3, "fork")
    copied = store.get_messages("f1")
    assert {m.message_id for m in copied}.isdisjoint({m.message_id for m in source_messages})
    for before, after in zip(source_messages, copied, strict=True):
        assert after.session_id == "f1"
        assert (after.seq, after.parts, after.usage, after.created_at) == (
            before.seq,
            before.parts,
            before.usage,
            before.created_at,
        )

    partial = store.fork_session("src", session("f2"), up_to_message_id="a1")
    assert partial.message_count == 2
    assert [m.seq for m in store.get_messages("f2")] == [1, 2]
    assert store.get_messages("f2")[1].parts == source_messages[1].parts
    assert store.get_messages("src") == source_messages  # the source is untouched
    assert store.get_session("src").message_count == 3  # type: ignore[union-attr]

    with pytest.raises(MessageNotInSession, match="not in session"):
        store.fork_session("src", session("f3"), up_to_message_id="no-such-message")
    with pytest.raises(MessageNotInSession, match="not in session"):
        store.fork_session("f1", session("f4"), up_to_message_id="a1")  # a1 lives in src
    with pytest.raises(SessionNotFound):
        store.fork_session("missing", session("f5"))
    assert store.get_session("f3") is None  # a failed fork leaves nothing behind


def test_delete_cascades(store: StoreQueries) -> None:
    store.create_session(session("s1"))
    store.create_session(session("keep"))
    store.save_message(every_part_message("m1", session_id="s1"))
    store.save_message(every_part_message("k1", session_id="keep"))
    store.record_change("s1", "model", "openai/gpt-5.2")
    assert store.acquire_lease("s1", new_lease_owner(), 30)
    fork = store.fork_session("s1", session("child"))

    assert store.delete_session("s1") is True
    assert store.delete_session("s1") is False
    assert store.get_session("s1") is None
    for table in ("messages", "session_changes", "turn_leases", "lease_epochs"):
        assert rows(store, f"SELECT count(*) FROM {table} WHERE session_id = 's1'") == [(0,)]
    assert rows(store, "SELECT count(*) FROM parts WHERE message_id = 'm1'") == [(0,)]
    assert len(store.get_messages("keep")[0].parts) == 6
    # The fork keeps its history and still names its (deleted) origin.
    assert store.get_session("child") == fork
    assert len(store.get_messages("child")) == 1


def test_record_change(store: StoreQueries, clock: FakeClock) -> None:
    store.create_session(session())
    store.record_change("s1", "model", "openai/gpt-5.2")
    clock.tick()
    store.record_change("s1", "thinking", "low")
    changes = store.get_changes("s1")
    assert [(c.kind, c.value) for c in changes] == [("model", "openai/gpt-5.2"), ("thinking", "low")]
    assert changes[0].at < changes[1].at
    with pytest.raises(SessionNotFound):
        store.record_change("missing", "model", "x")


# --- the file ----------------------------------------------------------------------------


def test_files_are_owner_only_whatever_the_umask(db_path: Path) -> None:
    previous = os.umask(0)
    try:
        with Store(db_path) as opened:
            opened.create_session(session())
            for suffix in ("", "-wal", "-shm"):
                mode = stat.S_IMODE(os.stat(f"{db_path}{suffix}").st_mode)
                assert mode == 0o600, (suffix, oct(mode))
    finally:
        os.umask(previous)


def test_existing_loose_file_is_tightened(db_path: Path) -> None:
    db_path.parent.mkdir()
    db_path.touch(mode=0o644)
    os.chmod(db_path, 0o644)
    Store(db_path).close()
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600


def test_pragmas(sqlite_store: Store, db_path: Path) -> None:
    db = sqlite_store._db
    assert db is not None
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("PRAGMA foreign_keys").fetchone() == (1,)
    assert db.execute("PRAGMA busy_timeout").fetchone() == (5000,)
    assert db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    assert db.execute("PRAGMA mmap_size").fetchone() == (MMAP_BYTES,)


def test_migrates_from_version_zero_and_reopens_idempotently(db_path: Path) -> None:
    db_path.parent.mkdir()
    with raw(db_path) as conn:  # an existing, empty database at user_version 0
        assert schema_version(conn) == 0
        conn.execute("CREATE TABLE unrelated (x)")
    conn.close()

    with Store(db_path) as first:
        first.create_session(session())
        first.save_message(every_part_message())
    for _ in range(2):
        with Store(db_path) as again:
            assert again.get_messages("s1") == [every_part_message()]
    conn = raw(db_path)
    try:
        assert schema_version(conn) == len(MIGRATIONS)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


def test_migration_chain_applies_only_pending_steps(db_path: Path) -> None:
    Store(db_path).close()
    applied = []

    def m_next(db: sqlite3.Connection) -> None:
        applied.append("next")
        db.execute("ALTER TABLE sessions ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")

    conn = raw(db_path)
    try:
        assert migrate(conn, [*MIGRATIONS, m_next]) == len(MIGRATIONS) + 1
        assert migrate(conn, [*MIGRATIONS, m_next]) == len(MIGRATIONS) + 1
        assert applied == ["next"]

        def m_broken(db: sqlite3.Connection) -> None:
            db.execute("CREATE TABLE half_done (x)")
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            migrate(conn, [*MIGRATIONS, m_next, m_broken])
        # The failed step left neither its table nor a version bump.
        assert schema_version(conn) == len(MIGRATIONS) + 1
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone() == (0,)

        # This ponder now meets a file from a newer one: refuse rather than guess.
        with pytest.raises(SchemaTooNew):
            Store(db_path)
    finally:
        conn.close()


# --- two processes -----------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from daemon.conversation import ChatMessage, Part
    from daemon.store import Store, SessionRow

    path, prefix, first_seq, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with Store(path) as store:
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(count):
            store.save_message(ChatMessage(
                message_id=f"{prefix}{i}", session_id="shared", seq=first_seq + i, role="assistant",
                parts=[Part(type="thinking", text=f"{prefix}{i} 思考🙂" * 50, signature=f"sig{i}"),
                       Part(type="text", text="x" * 2000)],
            ))
            if i % 10 == 0:
                store.update_session("shared", title=f"{prefix}{i}")
                store.list_sessions()
    """
)


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", *args],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_processes_write_one_file_without_corruption(db_path: Path) -> None:
    count = 150
    with Store(db_path) as store:
        store.create_session(session("shared"))
        children = [
            spawn(WRITER, str(db_path), prefix, str(first), str(count)) for prefix, first in (("a", 1), ("b", 1001))
        ]
        try:
            for child in children:
                assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            for child in children:  # release both at once so their writes interleave with ours
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            for i in range(count):
                store.save_message(text_message(f"p{i}", 5001 + i, session_id="shared"))
            for child in children:
                assert child.wait(timeout=60) == 0
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
                for stream in (child.stdin, child.stdout):
                    if stream is not None:
                        stream.close()

        messages = store.get_messages("shared")
        assert len(messages) == 3 * count
        assert store.get_session("shared").message_count == 3 * count  # type: ignore[union-attr]
        by_id = {m.message_id: m for m in messages}
        assert by_id["b7"].parts[0].text == "b7 思考🙂" * 50
        assert by_id["b7"].parts[0].signature == "sig7"
        assert store._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)  # type: ignore[union-attr]
        assert store._db.execute("PRAGMA foreign_key_check").fetchall() == []  # type: ignore[union-attr]


@pytest.mark.slow
def test_processes_opening_a_fresh_file_at_once_migrate_it_once(db_path: Path) -> None:
    opener = textwrap.dedent(
        """
        import sys
        from daemon.store import Store, SessionRow
        sys.stdin.readline()
        with Store(sys.argv[1]) as store:
            store.create_session(SessionRow(id=sys.argv[2], cwd="/", model_id="m", thinking_level="off"))
        """
    )
    children = [spawn(opener, str(db_path), f"s{i}") for i in range(4)]
    try:
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        assert [child.wait(timeout=60) for child in children] == [0] * 4
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
    with Store(db_path) as store:
        rows, _ = store.list_sessions()
        assert sorted(r.id for r in rows) == ["s0", "s1", "s2", "s3"]


def test_unusable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreUnavailable, match="cannot be opened: a part of its path is not a directory"):
        Store(tmp_path / "file" / "sessions.db")


@pytest.mark.slow
def test_write_waits_for_another_process_holding_the_lock(sqlite_store: Store, db_path: Path) -> None:
    sqlite_store.create_session(session())
    holder = spawn(
        textwrap.dedent(
            """
            import sqlite3, sys, time
            db = sqlite3.connect(sys.argv[1], isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE sessions SET title = 'held'")
            print("locked", flush=True)
            time.sleep(0.5)
            db.execute("COMMIT")
            """
        ),
        str(db_path),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        sqlite_store.save_message(text_message("m1", 1))  # waits on busy_timeout rather than failing
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()
    assert sqlite_store.get_session("s1").title == "held"  # type: ignore[union-attr]
    assert len(sqlite_store.get_messages("s1")) == 1


# --- leases ------------------------------------------------------------------------------


def test_lease_blocks_a_second_live_owner(store: StoreQueries) -> None:
    store.create_session(session())
    mine, theirs = new_lease_owner(), new_lease_owner()
    assert store.acquire_lease("s1", mine, 30)
    assert store.acquire_lease("s1", mine, 30)  # re-entrant for its owner
    assert not store.acquire_lease("s1", theirs, 30)
    assert not store.release_lease("s1", theirs)
    assert not store.acquire_lease("s1", theirs, 30)  # still mine
    assert store.release_lease("s1", mine)
    assert store.acquire_lease("s1", theirs, 30)
    with pytest.raises(SessionNotFound):
        store.acquire_lease("missing", mine, 30)


def test_admit_takes_the_lease_and_stores_the_prompt_in_one_transaction(store: StoreQueries) -> None:
    # Admission's one store step (Store.admit): the lease, the row and the prompt together.
    store.create_session(session())
    mine, theirs = new_lease_owner(), new_lease_owner()
    admitted = store.admit(text_message("m1", 1), mine, 30, known_count=0)
    assert admitted.leased and admitted.saved
    assert admitted.row is not None and admitted.row.message_count == 0  # as stored before the prompt
    assert [m.message_id for m in store.get_messages("s1")] == ["m1"]
    assert not store.acquire_lease("s1", theirs, 30)  # the lease is held
    # Another owner's lease: nothing is stored.
    refused = store.admit(text_message("m2", 2), theirs, 30, known_count=1)
    assert not refused.leased and not refused.saved and refused.row is None
    assert len(store.get_messages("s1")) == 1
    # The caller knows of fewer messages than are stored (another daemon added one): the lease
    # is taken and the row read, but the prompt waits for the caller to catch up.
    assert store.release_lease("s1", mine)
    behind = store.admit(text_message("m3", 2), mine, 30, known_count=0)
    assert behind.leased and not behind.saved and behind.row is not None and behind.row.message_count == 1
    assert [m.message_id for m in store.get_messages("s1")] == ["m1"]
    # A prompt the store refuses (its seq is taken) leaves no lease behind either.
    assert store.release_lease("s1", mine)
    with pytest.raises(StoreError):
        store.admit(text_message("m4", 1), mine, 30, known_count=1)
    assert store.acquire_lease("s1", theirs, 30)
    with pytest.raises(SessionNotFound):
        store.admit(text_message("m5", 1, session_id="missing"), mine, 30, known_count=0)


def test_fencing_refuses_every_write_of_a_stale_holder(reopen, clock: FakeClock) -> None:
    """Two daemons on one store: the first's lease expires and the second takes the session over;
    each write of the first's turn is then refused (``LeaseLost``), the second's go through."""
    stale, fresh = reopen(clock=clock), reopen(clock=clock)
    stale.create_session(session())
    old, new = new_lease_owner(), new_lease_owner()
    assert stale.admit(text_message("m1", 1), old, 0.3, known_count=0).saved
    reply = text_message("m2", 2)
    reply.role = "assistant"
    stale.save_message(reply)  # still ours
    first_epoch = stale.lease_epoch("s1")
    clock.tick(1)  # SQLite's expiry is the store's clock,
    time.sleep(0.4)  # PostgreSQL's the server's
    assert fresh.acquire_lease("s1", new, 30)
    assert fresh.lease_epoch("s1") == first_epoch + 1  # type: ignore[operator]
    for write in (
        lambda: stale.save_message(text_message("m3", 3)),
        lambda: stale.append_to_message("m2", {}, {0: " more"}),
        lambda: stale.record_usage("s1", Usage(input_tokens=1), None, None),
        lambda: stale.set_session_plan(
            "s1", SessionPlan(explanation=None, entries=[], updated_at="2030-01-01T00:00:00.000000Z")
        ),
    ):
        with pytest.raises(LeaseLost, match=r"^Another daemon took session 's1' over"):
            write()
    assert [m.message_id for m in fresh.get_messages("s1")] == ["m1", "m2"]
    assert fresh.get_messages("s1")[1].parts[0].text == "hi"
    fresh.save_message(text_message("m3", 3, text="the new holder's"))
    assert not stale.acquire_lease("s1", old, 30)  # held, alive, unexpired
    # Once the new holder lets go, the old daemon may take the session again, at a new epoch.
    assert fresh.release_lease("s1", new)
    assert stale.acquire_lease("s1", old, 30)
    assert stale.lease_epoch("s1") == first_epoch + 2  # type: ignore[operator]
    stale.save_message(text_message("m4", 4))


def test_expired_lease_is_taken_over(sqlite_store: Store, clock: FakeClock) -> None:
    sqlite_store.create_session(session())
    first, second = new_lease_owner(), new_lease_owner()
    assert sqlite_store.acquire_lease("s1", first, 10)
    clock.tick(9)
    assert not sqlite_store.acquire_lease("s1", second, 10)
    clock.tick(2)
    assert sqlite_store.acquire_lease("s1", second, 10)
    # The old owner no longer holds it, and cannot take it back while the new one does.
    assert not sqlite_store.release_lease("s1", first)
    assert not sqlite_store.acquire_lease("s1", first, 10)


def test_lease_of_a_dead_process_is_taken_over(sqlite_store: Store) -> None:
    sqlite_store.create_session(session())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert sqlite_store.acquire_lease("s1", f"{dead.pid}:cafe", 3600)
    assert sqlite_store.acquire_lease("s1", new_lease_owner(), 30)

    # An owner string we cannot parse is only freed by expiry.
    sqlite_store.create_session(session("s2"))
    assert sqlite_store.acquire_lease("s2", "not-a-pid", 3600)
    assert not sqlite_store.acquire_lease("s2", new_lease_owner(), 30)


def test_lease_of_a_dead_owner_whose_pid_was_reused_is_taken_over(sqlite_store: Store) -> None:
    sqlite_store.create_session(session())
    me = os.getpid()
    started = process_start_time(me)
    assert started  # Linux: /proc is there
    # Our pid, but another start time: a daemon that died before a container restart.
    assert sqlite_store.acquire_lease("s1", f"{me}:{int(started) - 1}:cafe", 3600)
    assert sqlite_store.acquire_lease("s1", new_lease_owner(), 30)
    # Our pid and our start time: alive, so it stays.
    assert not sqlite_store.acquire_lease("s1", f"{me}:{started}:beef", 30)


def test_newer_schema_is_refused_before_anything_is_written(db_path: Path) -> None:
    Store(db_path).close()
    conn = raw(db_path)
    conn.execute("PRAGMA journal_mode = DELETE")  # so that a switch back to WAL would rewrite the header
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(SchemaTooNew) as refused:
        Store(db_path)
    assert refused.value.message == (
        f"sessions.db was written by a newer ponder (schema 99); this one understands up to {len(MIGRATIONS)}."
    )
    assert db_path.read_bytes() == before


def test_unavailable_store_answers_every_call_with_its_problem(db_path: Path) -> None:
    unavailable = Store.unavailable(db_path, "sessions.db is damaged: it is not an SQLite database.")
    assert not db_path.exists()  # nothing is created either
    for call in (lambda: unavailable.get_session("s1"), lambda: unavailable.create_session(session())):
        with pytest.raises(StoreUnavailable, match=r"^sessions\.db is damaged: it is not an SQLite database\.$"):
            call()
    unavailable.close()


# --- async facade ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_store_round_trip_and_concurrency(reopen) -> None:
    async with AsyncStore(reopen()) as store:
        await store.create_session(session())
        async with anyio.create_task_group() as tg:
            for seq in range(1, 21):
                tg.start_soon(store.save_message, text_message(f"m{seq}", seq, text=TRICKY))
        messages = await store.get_messages("s1", after_seq=15)
        assert [m.seq for m in messages] == [16, 17, 18, 19, 20]
        assert messages[0].parts[0].text == TRICKY
        rows, cursor = await store.list_sessions()
        assert ([r.message_count for r in rows], cursor) == ([20], None)
        await store.save_message(every_part_message("m1", seq=1))
        assert (await store.get_messages("s1", limit=1))[0] == every_part_message("m1", seq=1)
        renamed = await store.update_session("s1", title="t")
        assert renamed.title == "t"
        await store.record_change("s1", "thinking", "low")
        assert len(store.store.get_changes("s1")) == 1
        forked = await store.fork_session("s1", session("f"), "m5")
        assert forked.message_count == 5
        owner = new_lease_owner()
        assert await store.acquire_lease("s1", owner, 30)
        assert not await store.acquire_lease("s1", new_lease_owner(), 30)
        assert await store.release_lease("s1", owner)
        assert await store.delete_session("f")
        assert await store.get_session("f") is None
    assert store.store.closed
    await store.aclose()  # twice is fine
    with pytest.raises(StoreClosed):
        await store.get_session("s1")


@pytest.mark.anyio
async def test_async_store_closes_inside_a_cancelled_scope(db_path: Path) -> None:
    store = await AsyncStore.open(db_path)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.aclose()  # a shutdown path that is already being cancelled
    assert store.store.closed


@pytest.mark.anyio
async def test_cancelled_caller_does_not_lose_a_started_write(db_path: Path) -> None:
    async with await AsyncStore.open(db_path) as store:
        await store.create_session(session())
        with anyio.move_on_after(0):
            await store.save_message(text_message("m1", 1))
        # Either the write ran to completion or it never started: never half a message.
        messages = await store.get_messages("s1")
        assert [(m.message_id, [p.text for p in m.parts]) for m in messages] in ([], [("m1", ["hi"])])


@pytest.mark.anyio
async def test_writes_arriving_together_commit_in_one_transaction(db_path: Path, monkeypatch) -> None:
    """A burst of prompts' saves shares a transaction, and one failing write (an unknown
    session) is refused alone: the others in its transaction are committed."""
    async with await AsyncStore.open(db_path) as store:
        await store.create_session(session())
        batches: list[int] = []
        run_together = store.store.run_together

        def counted(bodies, *, write):  # type: ignore[no-untyped-def]
            batches.append(len(bodies))
            return run_together(bodies, write=write)

        monkeypatch.setattr(store.store, "run_together", counted)
        errors: list[BaseException] = []

        async def save(message: ChatMessage) -> None:
            try:
                await store.save_message(message)
            except SessionNotFound as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for seq in range(1, 21):
                tg.start_soon(save, text_message(f"m{seq}", seq))
            tg.start_soon(save, text_message("lost", 1, session_id="nope"))
        assert sum(batches) == 21
        assert len(batches) < 21  # the first flush found the others waiting
        assert [type(e) for e in errors] == [SessionNotFound]
        assert [m.seq for m in await store.get_messages("s1")] == list(range(1, 21))
        rows: dict[str, SessionRow | None] = {}

        async def read(session_id: str) -> None:
            rows[session_id] = await store.get_session(session_id)

        async with anyio.create_task_group() as tg:  # reads batch too, each gets its own row
            for session_id in ("s1", "nope", "s1"):
                tg.start_soon(read, session_id)
        assert rows["nope"] is None and rows["s1"] is not None and rows["s1"].message_count == 20


@pytest.mark.anyio
async def test_a_cancelled_waiting_write_is_withdrawn_or_finished(db_path: Path) -> None:
    async with await AsyncStore.open(db_path) as store:
        await store.create_session(session())
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.save_message, text_message("m1", 1))  # the flusher
            with anyio.move_on_after(0):
                await store.save_message(text_message("m2", 2))  # waits behind it, then cancelled
        stored = [(m.message_id, [p.text for p in m.parts]) for m in await store.get_messages("s1")]
        assert stored in ([("m1", ["hi"])], [("m1", ["hi"]), ("m2", ["hi"])])
        await store.save_message(text_message("m3", 3))  # the batch machinery is not left stuck
        assert (await store.get_messages("s1"))[-1].message_id == "m3"


@pytest.mark.anyio
async def test_the_flusher_hands_over_once_its_own_write_is_done(db_path: Path, monkeypatch) -> None:
    """Writes that arrive while a flush runs are flushed by one of their own callers: the first
    caller is answered as soon as its own transaction commits, not after everyone else's."""
    import threading

    async with await AsyncStore.open(db_path) as store:
        await store.create_session(session())
        batches: list[int] = []
        committed: list[int] = []
        release = threading.Event()
        first_answered = threading.Event()
        run_together = store.store.run_together

        def held(bodies, *, write):  # type: ignore[no-untyped-def]
            batches.append(len(bodies))
            # The first flush stays on the store thread until the others queue; a later one
            # waits (bounded) for the first caller's answer, which must not need it.
            (release if len(batches) == 1 else first_answered).wait(10)
            result = run_together(bodies, write=write)
            committed.append(len(bodies))
            return result

        monkeypatch.setattr(store.store, "run_together", held)
        committed_when_first_answered: list[int] = []

        async def first() -> None:
            await store.save_message(text_message("m1", 1))
            committed_when_first_answered.append(len(committed))
            first_answered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            with anyio.fail_after(5):
                while not batches:  # the first flush is on the store thread
                    await anyio.sleep(0.001)
            tg.start_soon(store.save_message, text_message("m2", 2))
            tg.start_soon(store.save_message, text_message("m3", 3))
            await anyio.wait_all_tasks_blocked()
            release.set()
        assert committed_when_first_answered == [1]  # answered before the others' flush committed
        assert batches == [1, 2]  # the other two still committed together
        assert [m.seq for m in await store.get_messages("s1")] == [1, 2, 3]


# --- the store's own errors on the wire --------------------------------------------------

BAD_CURSOR_MESSAGE = "The cursor is not one session/list returned."


def test_store_request_errors_map_to_invalid_params() -> None:
    wire = as_wire_error(InvalidCursor())
    assert isinstance(wire, InvalidParams)
    assert (wire.code, wire.message) == (-32602, BAD_CURSOR_MESSAGE)
    assert wire.data == {"errors": [{"path": "$.cursor", "message": BAD_CURSOR_MESSAGE}]}


@pytest.mark.anyio
async def test_a_bad_cursor_answers_as_before_in_both_protocols(home: Path) -> None:
    errors = [{"path": "$.params.cursor", "message": BAD_CURSOR_MESSAGE}]
    async with in_memory_daemon(home) as (client, _):
        with pytest.raises(RpcError) as ponder:
            await client.request("session/list", {"cursor": "not a cursor!"})
    assert (ponder.value.code, ponder.value.message, ponder.value.data) == (
        -32602,
        BAD_CURSOR_MESSAGE,
        {"errors": errors},
    )
    async with acp_daemon(home) as (client, _):
        with pytest.raises(RpcError) as acp:
            await client.request("session/list", {"cursor": "not a cursor!"})
    assert (acp.value.code, acp.value.message, acp.value.data) == (-32602, BAD_CURSOR_MESSAGE, {"errors": errors})
