"""An adapter's httpx clients (``providers/http.LazyClient``): one stream after another goes
through the first client (its kept-alive connections are reused); streams open at once are
spread over clients carrying at most ``STREAMS_PER_CLIENT`` each, so that no connection pool
grows to hundreds of connections (httpcore goes over all of a pool's connections per request)."""

import pytest

from daemon.providers.http import STREAMS_PER_CLIENT, LazyClient

pytestmark = pytest.mark.anyio


async def test_streams_one_after_another_reuse_the_first_client():
    clients = LazyClient()
    try:
        seen = set()
        for _ in range(3 * STREAMS_PER_CLIENT):
            with clients.lease() as client:
                seen.add(id(client))
        assert len(seen) == 1
    finally:
        await clients.aclose()


async def test_streams_open_at_once_spread_over_clients_and_come_back_to_the_first():
    clients = LazyClient()
    try:
        leases = [clients.lease() for _ in range(2 * STREAMS_PER_CLIENT + 1)]
        held = [lease.__enter__() for lease in leases]
        first, second, third = held[0], held[STREAMS_PER_CLIENT], held[-1]
        assert held[:STREAMS_PER_CLIENT] == [first] * STREAMS_PER_CLIENT
        assert held[STREAMS_PER_CLIENT:-1] == [second] * STREAMS_PER_CLIENT
        assert len({id(first), id(second), id(third)}) == 3
        leases[3].__exit__(None, None, None)  # a stream of the first client ends
        with clients.lease() as client:
            assert client is first  # the first client with room, not the newest
        for lease in leases[:3] + leases[4:]:
            lease.__exit__(None, None, None)
        with clients.lease() as client:
            assert client is first
    finally:
        await clients.aclose()
    assert first.is_closed and second.is_closed and third.is_closed
