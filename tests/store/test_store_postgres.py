"""What only the PostgreSQL store has: migrations raced by many daemons, the lease's expiry on the
server's clock and its holder's liveness from its connection, a connection lost mid-call and
back, an unreachable server and a refused login (a sentence naming the host, never the
password), NUL characters in text, and ``ponder store copy``'s copy of a SQLite home."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from daemon.conversation import ChatMessage, Part
from daemon.errors import LeaseLost, StoreUnavailable
from daemon.store import Store, new_lease_owner
from daemon.store.copy import copy_sessions
from daemon.store.pg_migrations import PG_MIGRATIONS
from daemon.store.postgres import PostgresStore, describe_url, escape_text, open_store, unescape_text, url_password
from protocol.objects import Compaction, Usage
from tests.support.postgres import PASSWORD, PASSWORD_ROLE, ThrowawayPostgres


def session(session_id: str = "s1"):
    from daemon.store import SessionRow

    return SessionRow(id=session_id, cwd="/work", model_id="anthropic/claude-sonnet-4-5", thinking_level="high")


def text_message(message_id: str, seq: int, session_id: str = "s1", text: str = "hi") -> ChatMessage:
    return ChatMessage(
        message_id=message_id, session_id=session_id, seq=seq, role="user", parts=[Part(type="text", text=text)]
    )


def test_many_daemons_starting_together_migrate_once(postgres_url: str) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        try:
            barrier.wait()
            stores.append(PostgresStore(postgres_url))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert len(stores) == 8
        status = stores[0].status()
        assert (status.schema_version, status.schema_latest, status.backend) == (len(PG_MIGRATIONS),) * 2 + (
            "postgresql",
        )
        assert stores[0]._read(lambda db: db.execute("SELECT count(*) FROM ponder_schema").fetchone()) == (1,)
        stores[3].create_session(session())
        assert stores[5].get_session("s1") is not None
    finally:
        for store in stores:
            store.close()


def test_lease_expiry_is_on_the_servers_clock(postgres_url: str, opened) -> None:
    # The two daemons' own clocks disagree by a day; the lease's expiry is the server's.
    ahead = opened(postgres_url, clock=lambda: time.time() + 86400)
    behind = opened(postgres_url, clock=lambda: time.time() - 86400)
    ahead.create_session(session())
    first, second = new_lease_owner(), new_lease_owner()
    assert behind.acquire_lease("s1", first, 0.5)
    assert not ahead.acquire_lease("s1", second, 30)  # a day ahead, but the server says unexpired
    time.sleep(0.6)
    assert ahead.acquire_lease("s1", second, 30)


def test_a_holder_whose_connection_is_gone_loses_its_leases_at_once(postgres_url: str, opened) -> None:
    holder, other = opened(postgres_url), opened(postgres_url)
    holder.create_session(session())
    assert holder.acquire_lease("s1", new_lease_owner(), 3600)
    assert not other.acquire_lease("s1", new_lease_owner(), 30)
    holder.close()  # the daemon is gone: its connection closes with it
    started = time.monotonic()
    while not other.acquire_lease("s1", new_lease_owner(), 30):
        assert time.monotonic() - started < 1.0, "the lease was not taken over within a second"
        time.sleep(0.02)


def test_a_killed_connection_fences_the_old_holder_out(postgres_url: str, opened) -> None:
    holder, other = opened(postgres_url), opened(postgres_url)
    holder.create_session(session())
    assert holder.admit(text_message("m1", 1), new_lease_owner(), 3600, known_count=0).saved
    # with a timeout it returns once the backend is gone (PostgreSQL 14+), not when it was signalled
    kill = "SELECT pg_terminate_backend(?, 5000)"
    assert other._write(lambda db: db.execute(kill, (holder.backend_pid,)).fetchone()) == (True,)
    assert other.acquire_lease("s1", new_lease_owner(), 30)  # at once: the holder's connection is gone
    with pytest.raises(LeaseLost, match="Another daemon took session 's1' over"):
        holder.save_message(text_message("m2", 2))
    assert [m.message_id for m in other.get_messages("s1")] == ["m1"]


def test_a_connection_lost_mid_commit_is_a_sentence_and_the_next_call_reconnects(postgres_url: str, opened) -> None:
    store, other = opened(postgres_url), opened(postgres_url)
    store.create_session(session())

    def save_then_lose_the_connection(db):
        store._save_message_body(text_message("m1", 1))(db)
        db.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with pytest.raises(StoreUnavailable, match=r"^The PostgreSQL store at .* could not be reached: "):
        store._write(save_then_lose_the_connection)
    assert other.get_messages("s1") == []  # nothing half-written
    with pytest.raises(StoreUnavailable, match="could not be reached"):  # not retried more than every 0.5 s
        store.get_session("s1")
    time.sleep(0.6)
    store.save_message(text_message("m1", 1))  # connected again
    assert [m.message_id for m in other.get_messages("s1")] == ["m1"]


def test_a_connection_dropped_while_idle_is_replaced_without_an_error(postgres_url: str, opened) -> None:
    store, other = opened(postgres_url), opened(postgres_url)
    store.create_session(session())
    other._read(lambda db: db.execute("SELECT pg_terminate_backend(?)", (store.backend_pid,)).fetchone())
    store.save_message(text_message("m1", 1))
    assert [m.message_id for m in other.get_messages("s1")] == ["m1"]


def test_unreachable_server_and_refused_login_name_the_host_never_the_password(
    postgres_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    nowhere = f"postgresql://ponder:{PASSWORD}x@/db?host={tmp_path}"
    store = open_store(nowhere)
    assert store.problem is not None
    assert store.problem.startswith(
        f"The PostgreSQL store at ponder@{tmp_path} (socket, port 5432)/db cannot be reached"
    )
    with pytest.raises(StoreUnavailable) as refused:
        store.get_session("s1")
    assert PASSWORD not in refused.value.message
    store.close()

    wrong = postgres_server.url(user=PASSWORD_ROLE, password=PASSWORD + "-wrong")
    store = open_store(wrong)
    assert store.problem is not None and "refused the login" in store.problem
    assert "password authentication failed" in store.problem
    assert PASSWORD not in store.problem
    store.close()

    right = postgres_server.url(user=PASSWORD_ROLE, password=PASSWORD)
    assert url_password(right) == PASSWORD
    assert PASSWORD not in describe_url(right)
    with PostgresStore(right) as good:
        assert good.problem is None
        assert PASSWORD not in good.status().location


def test_a_store_started_while_the_server_is_away_connects_when_it_is_back(
    postgres_server: ThrowawayPostgres,
) -> None:
    url = postgres_server.url(postgres_server.new_schema())
    postgres_server.stop()
    try:
        store = open_store(url)
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            store.get_session("s1")
    finally:
        postgres_server.start()
    time.sleep(0.6)
    store.create_session(session())
    assert store.get_session("s1") is not None
    store.close()


def test_nul_and_the_escape_character_round_trip() -> None:
    for text in ["", "plain", "nul\x00", "\uffff", "\uffff0", "\x00\uffff\x00", "a\uffff\uffff0b"]:
        assert unescape_text(escape_text(text)) == text
        assert "\x00" not in escape_text(text)


def test_store_copy_moves_a_sqlite_home_and_runs_again_idempotently(tmp_path: Path, postgres_url: str) -> None:
    with Store(tmp_path / "sessions.db") as home:
        home.create_session(session("a"))
        home.create_session(session("b"))
        home.save_message(text_message("a1", 1, "a", "first\x00"))
        image = Part(type="image", attachment_id="sha-1", data=b"\x89PNG...", mime_type="image/png")
        home.save_message(ChatMessage(message_id="a2", session_id="a", seq=2, role="user", parts=[image]))
        home.save_message(text_message("a3", 3, "a"))
        home.append_to_message("a3", {}, {0: " and more"})
        home.save_compaction(
            "a",
            Compaction(
                compaction_id="c1",
                seq=2,
                trigger="manual",
                summary="s",
                first_kept_seq=2,
                tokens_before=9,
                tokens_after=3,
                model_id=None,
                created_at="",
            ),
            Usage(input_tokens=5),
        )
        home.record_change("b", "model", "openai/gpt-5.2")
        home.record_usage("a", Usage(input_tokens=7, output_tokens=2), None, None)
        with PostgresStore(postgres_url) as target:
            first = copy_sessions(home, target)
            assert (first.sessions, first.messages, first.compactions, first.attachments) == (2, 3, 1, 1)
            again = copy_sessions(home, target)
            assert (again.sessions, again.messages, again.compactions, again.attachments) == (0, 0, 0, 0)
            home.save_message(text_message("a4", 4, "a"))
            third = copy_sessions(home, target)
            assert (third.sessions, third.messages) == (0, 1)
            for session_id in ("a", "b"):
                assert target.get_messages(session_id) == home.get_messages(session_id)
                assert target.get_session(session_id) == home.get_session(session_id)
                assert target.get_compactions(session_id) == home.get_compactions(session_id)
                assert target.get_changes(session_id) == home.get_changes(session_id)
            assert target.get_attachment("a", "sha-1") == ("image/png", b"\x89PNG...")


def test_no_credential_in_the_connection_string_reaches_an_error(postgres_server: ThrowawayPostgres) -> None:
    # psycopg's own error for a bad URL may quote it: the store's sentence never does.
    with pytest.raises(psycopg.Error):
        psycopg.connect(f"postgresql://u:{PASSWORD}@/x?host=/nonexistent&sslmode=bogus")
    store = open_store(f"postgresql://u:{PASSWORD}@/x?host=/nonexistent&sslmode=bogus")
    assert store.problem is not None and PASSWORD not in store.problem
    store.close()


def test_change_feed_reports_other_stores_commits_and_resyncs_after_a_cut(postgres_url: str, opened) -> None:
    mine, theirs = opened(postgres_url), opened(postgres_url)
    feed = mine.change_feed()
    try:
        assert feed.wait(0.05) == []  # connects and listens
        mine.create_session(session("own"))  # this store's own writes are not reported back to it
        theirs.create_session(session("s1"))
        theirs.save_message(text_message("m1", 1))
        theirs.update_session("s1", title="t")
        sent = time.monotonic()
        theirs.create_session(session("s2"))
        got = feed.wait(2.0)
        got += feed.wait(0.2)
        assert time.monotonic() - sent < 1.0
        assert {(c.kind, c.session_id) for c in got} == {("updated", "s1"), ("updated", "s2")}
        theirs.delete_session("s2")
        assert [(c.kind, c.session_id) for c in feed.wait(2.0)] == [("deleted", "s2")]
        # The feed's connection is cut: it connects again and says changes may have been missed.
        listener = theirs._read(
            lambda db: db.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE application_name = 'ponder-listen' AND datname = current_database()"
            ).fetchall()
        )
        for (pid,) in listener:
            theirs._read(lambda db, pid=pid: db.execute("SELECT pg_terminate_backend(?)", (pid,)).fetchone())
        seen: list = []
        deadline = time.monotonic() + 5
        while not any(c.kind == "resync" for c in seen) and time.monotonic() < deadline:
            seen += feed.wait(0.2)
        assert any(c.kind == "resync" for c in seen)
        theirs.update_session("s1", title="after the cut")
        assert [(c.kind, c.session_id) for c in feed.wait(2.0)] == [("updated", "s1")]
    finally:
        feed.close()


def test_a_url_that_names_no_postgresql_server_is_one_sentence() -> None:
    store = open_store("sqlite:///home/me/sessions.db")
    assert store.problem == "The store URL must name a PostgreSQL server (postgresql://… or libpq's key=value form)."
    for _ in range(2):
        with pytest.raises(StoreUnavailable, match="must name a PostgreSQL server"):
            store.get_session("s1")
        time.sleep(0.6)  # never tried: no psycopg error quoting the URL later either
    store.close()
