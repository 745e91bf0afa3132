"""The PostgreSQL store behind a real PgBouncer in transaction mode (``tests/support/pgbouncer``,
a pool smaller than the clients, so each transaction may run on another server connection):
an undeclared pooler is one sentence (nothing written, no hang); declared, no statement is
prepared, migrations raced through the pooler run once, the URL's ``search_path`` is set in
each transaction, a crashed holder's lease lapses after the heartbeat stops (and not while it
beats), fencing refuses a stalled holder, a daemon stopped inside a write holds no one's writes up
(the server ends its idle transaction), the change feed listens on ``listen_url`` and leaves the
store's own writes out, and without it says notifications are off. The conformance suite runs
through the pooler too (``tests/store/conftest.py``, backend ``pgbouncer``)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from daemon.errors import LeaseLost, StoreUnavailable
from daemon.store import SessionRow, new_lease_owner
from daemon.store.pg_migrations import PG_MIGRATIONS
from daemon.store.postgres import (
    IDLE_IN_TRANSACTION_TIMEOUT_MS,
    POOLED_LEASE_TTL_S,
    PoolerNotDeclared,
    PostgresStore,
    open_store,
)
from tests.store.test_store_postgres import session, text_message
from tests.support.pgbouncer import ThrowawayPgBouncer
from tests.support.postgres import PASSWORD, PASSWORD_ROLE, ThrowawayPostgres


class Schema:
    """One test's schema, reached directly and through the pooler."""

    def __init__(self, server: ThrowawayPostgres, bouncer: ThrowawayPgBouncer) -> None:
        self.name = server.new_schema()
        self.direct = server.url(self.name)
        self.pooled = bouncer.url(self.name)


@pytest.fixture
def schema(postgres_server: ThrowawayPostgres, pgbouncer_server: ThrowawayPgBouncer) -> Schema:
    return Schema(postgres_server, pgbouncer_server)


def tables_in(url: str, schema: str) -> list[str]:
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
        ).fetchall()
    return [str(row[0]) for row in rows]


def test_an_undeclared_transaction_pooler_is_one_sentence_and_nothing_is_written(
    schema: Schema, pgbouncer_server: ThrowawayPgBouncer
) -> None:
    started = time.monotonic()
    with pytest.raises(PoolerNotDeclared, match=r'connection pooler .* set \[store\] pooler = "transaction"'):
        PostgresStore(schema.pooled)
    store = open_store(schema.pooled)
    try:
        assert store.problem is not None and "PONDER_STORE_POOLER" in store.problem
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="reached through a connection pooler"):
                store.get_session("s1")
        assert time.monotonic() - started < 10
    finally:
        store.close()
    assert tables_in(schema.direct, schema.name) == []  # no migration ran through the undeclared pooler
    # With a password in the URL: the sentence names the user and the socket, never the password.
    with_password = pgbouncer_server.url(user=PASSWORD_ROLE, password=PASSWORD)
    refused = open_store(with_password)
    try:
        assert refused.problem is not None and "ponder_pw@" in refused.problem and PASSWORD not in refused.problem
    finally:
        refused.close()


def test_many_daemons_migrate_once_through_the_pooler_beside_direct_ones(schema: Schema) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def start(url: str, pooled: bool) -> None:
        try:
            barrier.wait()
            stores.append(PostgresStore(url, pooler="transaction" if pooled else None))
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=start, args=(schema.pooled if index % 4 else schema.direct, bool(index % 4)))
        for index in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert len(stores) == 8
        pooled = next(store for store in stores if store.pooler == "transaction")
        status = pooled.status()
        assert (status.schema_version, status.schema_latest, status.pooler) == (
            len(PG_MIGRATIONS),
            len(PG_MIGRATIONS),
            "transaction",
        )
        assert pooled.schema == schema.name  # the URL's search_path, set in each transaction
        assert pooled._read(lambda db: db.execute("SELECT count(*) FROM ponder_schema").fetchone()) == (1,)
        assert "sessions" in tables_in(schema.direct, schema.name)
        stores[1].create_session(session())
        assert all(store.get_session("s1") is not None for store in stores)
    finally:
        for store in stores:
            store.close()


def test_no_statement_is_prepared_for_a_pooled_server_connection(schema: Schema, opened) -> None:
    # Six stores, four server connections: each transaction may land on another one. The same
    # queries, many times over, on each store (psycopg would prepare them after five).
    stores = [opened(schema.pooled, pooler="transaction") for _ in range(6)]
    for index, store in enumerate(stores):
        store.create_session(SessionRow(id=f"s{index}", cwd="/w", model_id="mock/echo", thinking_level="off"))
    for seq in range(1, 13):
        for index, store in enumerate(stores):
            store.save_message(text_message(f"m{index}-{seq}", seq, session_id=f"s{index}"))
            assert len(store.get_messages(f"s{index}")) == seq
    # A pooler declared as a session pool (statements prepared) through this transaction pool:
    # the lost prepared statement is a sentence saying which setting is needed, not a crash.
    misdeclared = [opened(schema.pooled, pooler="session") for _ in range(3)]
    with pytest.raises(StoreUnavailable, match='transaction mode; set \\[store\\] pooler = "transaction"'):
        for _ in range(12):
            for store in misdeclared:
                store.get_session("s0")
                store.get_messages("s0")


def test_a_crashed_holder_behind_the_pooler_is_taken_over_once_its_heartbeat_lapses(schema: Schema, opened) -> None:
    holder = opened(schema.pooled, pooler="transaction")
    other = opened(schema.pooled, pooler="transaction")
    holder.create_session(session())
    assert holder.acquire_lease("s1", new_lease_owner(), 3600)
    # Alive (its heartbeat renews the lease every second): not taken over past the lease's length.
    deadline = time.monotonic() + POOLED_LEASE_TTL_S + 1.5
    while time.monotonic() < deadline:
        assert not other.acquire_lease("s1", new_lease_owner(), 30)
        time.sleep(0.25)
    holder.close()  # a crash, as the store sees it: the lease is not given back, the heartbeat stops
    stopped = time.monotonic()
    while not other.acquire_lease("s1", new_lease_owner(), 30):
        assert time.monotonic() - stopped < POOLED_LEASE_TTL_S + 1.0, "not taken over after the heartbeat lapsed"
        time.sleep(0.05)


def test_a_direct_holders_lease_is_free_at_once_for_a_pooled_daemon(schema: Schema, opened) -> None:
    holder = opened(schema.direct)
    other = opened(schema.pooled, pooler="transaction")
    holder.create_session(session())
    assert holder.acquire_lease("s1", new_lease_owner(), 3600)
    assert not other.acquire_lease("s1", new_lease_owner(), 30)
    holder.close()  # its backend connection goes: pg_stat_activity (read through the pooler) says so
    started = time.monotonic()
    while not other.acquire_lease("s1", new_lease_owner(), 30):
        assert time.monotonic() - started < 1.0
        time.sleep(0.02)


def test_a_stalled_holder_behind_the_pooler_is_fenced_out(schema: Schema, opened) -> None:
    holder = opened(schema.pooled, pooler="transaction")
    other = opened(schema.pooled, pooler="transaction")
    holder.create_session(session())
    assert holder.admit(text_message("m1", 1), new_lease_owner(), 3600, known_count=0).saved
    # The holder stalls (its store's lock held: no heartbeat gets through) until the lease lapses
    # and another daemon takes the session over.
    with holder._lock:
        stalled = time.monotonic()
        while not other.acquire_lease("s1", new_lease_owner(), 30):
            assert time.monotonic() - stalled < POOLED_LEASE_TTL_S + 2.0
            time.sleep(0.1)
    with pytest.raises(LeaseLost, match="Another daemon took session 's1' over"):
        holder.save_message(text_message("m2", 2))
    assert [m.message_id for m in other.get_messages("s1")] == ["m1"]


@pytest.mark.parametrize("pooled", [True, False], ids=["pooled", "direct"])
def test_a_daemon_stopped_inside_a_write_holds_no_other_daemons_writes_up(schema: Schema, opened, pooled: bool) -> None:
    options = {"pooler": "transaction"} if pooled else {}
    stopped = opened(schema.pooled if pooled else schema.direct, **options)
    other = opened(schema.pooled if pooled else schema.direct, **options)
    stopped.create_session(session())
    inside, resumed = threading.Event(), threading.Event()
    runs: list[int] = []
    failures: list[BaseException] = []

    def write_then_stop(db) -> None:
        runs.append(len(runs) + 1)
        inside.set()
        # A process stopped (SIGSTOP, a paused VM) between two statements: its transaction sits
        # idle on the server, holding the store's write lock.
        resumed.wait(30)
        stopped._save_message_body(text_message("m1", 1))(db)

    def run() -> None:
        try:
            stopped._write(write_then_stop)
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert inside.wait(10)
        started = time.monotonic()
        # Without the server ending the idle transaction, this waits LOCK_TIMEOUT_MS and fails:
        # "another daemon held its lock for more than 5 s".
        other.save_message(text_message("m2", 2))
        assert time.monotonic() - started < IDLE_IN_TRANSACTION_TIMEOUT_MS / 1000 + 2.0
    finally:
        resumed.set()
        thread.join(30)
    # The stopped daemon's transaction was rolled back; its call ran once more on a new connection.
    assert failures == [] and runs == [1, 2]
    assert [m.message_id for m in other.get_messages("s1")] == ["m1", "m2"]


def test_the_change_feed_listens_on_the_direct_url_and_leaves_its_own_writes_out(schema: Schema, opened) -> None:
    mine = opened(schema.pooled, pooler="transaction", listen_url=schema.direct)
    theirs = opened(schema.pooled, pooler="transaction")
    assert mine.notice is None and mine.status().notifications.startswith("LISTEN at ")
    # Without a listen_url behind a transaction pooler: no feed, and it says so.
    assert theirs.change_feed() is None
    assert theirs.notice is not None and "Cross-daemon notifications are off" in theirs.notice
    assert theirs.status().notifications.startswith("off")
    feed = mine.change_feed()
    assert feed is not None
    try:
        assert feed.wait(0.05) == []  # connects and listens
        # Both stores' transactions run on the same few pooled server connections: the feed tells
        # its own store's writes apart by their origin, not by the backend that sent them.
        for index in range(5):
            mine.create_session(session(f"own{index}"))
        theirs.create_session(session("s1"))
        sent = time.monotonic()
        theirs.update_session("s1", title="t")
        got = feed.wait(2.0)
        got += feed.wait(0.3)
        assert time.monotonic() - sent < 1.5
        assert {(c.kind, c.session_id) for c in got} == {("updated", "s1")}
        theirs.delete_session("s1")
        assert [(c.kind, c.session_id) for c in feed.wait(2.0)] == [("deleted", "s1")]
    finally:
        feed.close()


def test_a_password_through_the_pooler_logs_in_and_a_wrong_one_is_a_sentence_without_it(
    pgbouncer_server: ThrowawayPgBouncer, opened
) -> None:
    store = opened(pgbouncer_server.url(user=PASSWORD_ROLE, password=PASSWORD), pooler="transaction")
    store.create_session(
        SessionRow(id=f"pw-{time.monotonic_ns()}", cwd="/w", model_id="mock/echo", thinking_level="off")
    )
    assert PASSWORD not in store.status().location
    wrong = open_store(pgbouncer_server.url(user=PASSWORD_ROLE, password=PASSWORD + "-wrong"), pooler="transaction")
    try:
        assert wrong.problem is not None and "refused the login" in wrong.problem
        assert PASSWORD not in wrong.problem and "ponder_pw@" in wrong.problem
    finally:
        wrong.close()


def test_options_a_pooler_cannot_take_are_one_sentence(schema: Schema) -> None:
    url = schema.pooled.replace("options=", "options=-Xbogus+")
    store = open_store(url, pooler="transaction")
    try:
        assert store.problem is not None and "only -c name=value settings" in store.problem
        with pytest.raises(StoreUnavailable, match="only -c name=value"):
            store.get_session("s1")
    finally:
        store.close()
