"""Fixtures of the ACP tests that drive ``ponder acp`` with the ACP client library."""

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def daemon_backend(request: pytest.FixtureRequest) -> str:
    """The spawned daemon's backend, where the test's own side (the client library) runs on asyncio only."""
    return request.param
