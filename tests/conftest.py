"""Shared test fixtures: every async test runs on asyncio and on trio."""

import logging

import pytest

from tests.support.replay import ReplayServer


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
