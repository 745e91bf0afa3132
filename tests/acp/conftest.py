"""Fixtures of the ACP tests that drive ``ponder acp`` with the ACP client library."""

from pathlib import Path

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def daemon_backend(request: pytest.FixtureRequest) -> str:
    """The spawned daemon's backend, where the test's own side (the client library) runs on asyncio only."""
    return request.param


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The session's working directory."""
    path = tmp_path / "work"
    path.mkdir()
    return path
