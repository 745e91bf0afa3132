"""Shared test fixtures: every async test runs on asyncio and on trio."""

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
