"""Shared test fixtures: every async test runs on asyncio and on trio."""

import compileall
import logging
import os
from pathlib import Path

import pytest

from tests.support.replay import ReplayServer


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """Captured output and logs kept as valid UTF-8 (a lone surrogate, such as a file name that
    is not UTF-8, as a backslash escape): pytest-xdist's workers send reports as UTF-8, and one
    such character would otherwise crash the worker instead of showing the test's output."""
    report: pytest.TestReport = yield
    report.sections = [(title, text.encode("utf-8", "backslashreplace").decode()) for title, text in report.sections]
    return report


ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """ponder's sources compiled to bytecode before the run (by the controller, not each xdist
    worker): the tests spawn hundreds of daemons, and where PYTHONDONTWRITEBYTECODE is set (as on
    these machines) each would otherwise compile every module it imports from source, ~0.25 s a
    start. An installed ponder runs from bytecode too. Up-to-date files are only checked."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        for package in ("daemon", "protocol", "tests/support"):
            compileall.compile_dir(ROOT / package, quiet=1)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def replay_server():
    with ReplayServer() as server:
        yield server


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def restore_logging():
    """For a test that calls ``setup_logging``: the root logger (yielded) gets its handlers
    and level back afterwards, and the handlers the test added are closed."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def postgres_server():
    """One throwaway PostgreSQL server for the whole test run (``tests/support/postgres``); each
    test makes its own schema. Skips where PostgreSQL cannot be started, except in CI: fails there."""
    from tests.support.postgres import PostgresUnavailable, ThrowawayPostgres, required

    try:
        server = ThrowawayPostgres()
    except (PostgresUnavailable, OSError) as error:
        if required():
            pytest.fail(f"PostgreSQL is required here (CI) but could not be started: {error}")
        pytest.skip(f"PostgreSQL could not be started: {error}")
    yield server
    server.close()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A PostgreSQL store URL on a schema of this test's own."""
    return postgres_server.url(postgres_server.new_schema())


@pytest.fixture(scope="session")
def pgbouncer_server(postgres_server):
    """A throwaway PgBouncer in transaction mode in front of ``postgres_server``
    (``tests/support/pgbouncer``). Skips where PgBouncer cannot be started, except in CI: fails there."""
    from tests.support.pgbouncer import PgBouncerUnavailable, ThrowawayPgBouncer
    from tests.support.postgres import required

    try:
        bouncer = ThrowawayPgBouncer(postgres_server)
    except (PgBouncerUnavailable, OSError) as error:
        if required():
            pytest.fail(f"PgBouncer is required here (CI) but could not be started: {error}")
        pytest.skip(f"PgBouncer could not be started: {error}")
    yield bouncer
    bouncer.close()


@pytest.fixture
def pgbouncer_url(postgres_server, pgbouncer_server) -> str:
    """A PostgreSQL store URL through PgBouncer (transaction mode) on a schema of this test's own."""
    return pgbouncer_server.url(postgres_server.new_schema())
