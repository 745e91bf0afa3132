"""The conformance fixtures: ``store`` is the same store on each backend (``store_backend``:
SQLite in a temporary home, PostgreSQL in a schema of the test's own, and that PostgreSQL
reached through PgBouncer in transaction mode, declared with ``pooler="transaction"``), with a
fake clock for the rows' timestamps; ``reopen`` opens another connection to the same store
(another daemon)."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from daemon.store import Store
from daemon.store.store import StoreQueries

if TYPE_CHECKING:
    from daemon.store.postgres import PostgresStore


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "sessions.db"


@pytest.fixture(params=["sqlite", "postgresql", "pgbouncer"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_location(store_backend: str, db_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's store is: the SQLite file, or the PostgreSQL URL of the test's schema."""
    if store_backend == "sqlite":
        return str(db_path)
    if store_backend == "pgbouncer":
        return str(request.getfixturevalue("pgbouncer_url"))
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def reopen(store_backend: str, store_location: str) -> Iterator[Callable[..., StoreQueries]]:
    """Open (another connection to) the test's store; each is closed after the test."""
    opened: list[StoreQueries] = []

    def open_one(**options: object) -> StoreQueries:
        if store_backend == "sqlite":
            one: StoreQueries = Store(store_location, **options)  # type: ignore[arg-type]
        else:
            from daemon.store.postgres import PostgresStore

            if store_backend == "pgbouncer":
                options.setdefault("pooler", "transaction")
            one = PostgresStore(store_location, **options)  # type: ignore[arg-type]
        opened.append(one)
        return one

    yield open_one
    for one in opened:
        one.close()


@pytest.fixture
def store(reopen: Callable[..., StoreQueries], clock: FakeClock) -> StoreQueries:
    return reopen(clock=clock)


@pytest.fixture
def opened() -> Iterator[Callable[..., "PostgresStore"]]:
    """Opens PostgreSQL stores (URL, options) and closes them after the test."""
    from daemon.store.postgres import PostgresStore

    stores: list[PostgresStore] = []

    def open_one(url: str, **options: object) -> PostgresStore:
        store = PostgresStore(url, **options)  # type: ignore[arg-type]
        stores.append(store)
        return store

    yield open_one
    for store in stores:
        store.close()
