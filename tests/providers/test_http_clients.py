"""An adapter's httpx clients (``providers/http.LazyClient``): one stream after another goes
through the first client (its kept-alive connections are reused); streams open at once are
spread over clients carrying at most ``STREAMS_PER_CLIENT`` each, so that no connection pool
grows to hundreds of connections (httpcore goes over all of a pool's connections per request).

A streamed POST (``Route.post_streaming``) goes straight to the client's transport when httpx's
client has nothing to add: what reaches the server is what ``client.send`` sends, cookies a
server set are sent back, and a proxy named in the environment is used (``no_proxy`` alone names
none: the direct way stays, and the hosts it names skip a proxy that is named)."""

import httpx
import pytest

from daemon.errors import ProviderError
from daemon.providers.http import STREAMS_PER_CLIENT, LazyClient, open_stream, proxy_named
from tests.support.replay import ReplayServer, ScriptedResponse

pytestmark = pytest.mark.anyio

ADAPTER_HEADERS = {"Content-Type": "application/json", "x-api-key": "sk-test", "Accept": "text/event-stream"}
BODY = b'{"model":"m","stream":true}'


def _unexpected(response: httpx.Response, body: bytes) -> ProviderError:
    return ProviderError(f"unexpected {response.status_code}: {body!r}", provider="test")


async def _post(clients: LazyClient, url: str) -> tuple[int, bytes, httpx.Request]:
    async with open_stream(
        clients, url, provider="test", headers=ADAPTER_HEADERS, content=BODY, map_error=_unexpected
    ) as response:
        return response.status_code, await response.aread(), response.request


async def test_streams_one_after_another_reuse_the_first_client() -> None:
    clients = LazyClient()
    try:
        seen = set()
        for _ in range(3 * STREAMS_PER_CLIENT):
            with clients.lease() as route:
                seen.add(id(route.client))
        assert len(seen) == 1
    finally:
        await clients.aclose()


async def test_streams_open_at_once_spread_over_clients_and_come_back_to_the_first() -> None:
    clients = LazyClient()
    try:
        leases = [clients.lease() for _ in range(2 * STREAMS_PER_CLIENT + 1)]
        held = [lease.__enter__().client for lease in leases]
        first, second, third = held[0], held[STREAMS_PER_CLIENT], held[-1]
        assert held[:STREAMS_PER_CLIENT] == [first] * STREAMS_PER_CLIENT
        assert held[STREAMS_PER_CLIENT:-1] == [second] * STREAMS_PER_CLIENT
        assert len({id(first), id(second), id(third)}) == 3
        leases[3].__exit__(None, None, None)  # a stream of the first client ends
        with clients.lease() as route:
            assert route.client is first  # the first client with room, not the newest
        for lease in leases[:3] + leases[4:]:
            lease.__exit__(None, None, None)
        with clients.lease() as route:
            assert route.client is first
    finally:
        await clients.aclose()
    assert first.is_closed and second.is_closed and third.is_closed


async def test_a_streamed_post_sends_what_httpx_would_send(replay_server: ReplayServer) -> None:
    answer = b'data: {"type":"ping"}\n\n'
    replay_server.responses.extend(ScriptedResponse(body=answer) for _ in range(3))
    clients = LazyClient()
    try:
        status, body, request = await _post(clients, f"{replay_server.url}/v1/messages")
        again = await _post(clients, f"{replay_server.url}/v1/messages")  # its URL and headers as built the first time
        with clients.lease() as route:
            timeouts = route.client.timeout.as_dict()
            # The same request the whole httpx way, for comparison.
            built = route.client.build_request(
                "POST", f"{replay_server.url}/v1/messages", headers=ADAPTER_HEADERS, content=BODY
            )
            whole = await route.client.send(built, stream=True)
            await whole.aread()
            await whole.aclose()
    finally:
        await clients.aclose()
    assert (status, body) == (200, answer) and again[:2] == (200, answer)
    assert request.extensions["timeout"] == timeouts  # the client's timeouts hold for the request
    direct, direct_again, by_httpx = replay_server.requests
    assert (direct.method, direct.path, direct.body) == ("POST", "/v1/messages", BODY)
    assert direct.headers == by_httpx.headers
    assert (direct_again.path, direct_again.body, direct_again.headers) == (direct.path, BODY, by_httpx.headers)
    assert direct.headers["accept"] == "text/event-stream"  # the adapter's header over the client's default
    assert direct.headers["accept-encoding"] == "gzip, deflate"  # the client's defaults are kept
    assert direct.headers["content-length"] == str(len(BODY))


async def test_a_cookie_the_server_set_is_sent_back(replay_server: ReplayServer) -> None:
    replay_server.responses.append(ScriptedResponse(headers={"set-cookie": "__cf_bm=abc; Path=/"}, body=b"data: 1\n\n"))
    replay_server.responses.append(ScriptedResponse(body=b"data: 2\n\n"))
    clients = LazyClient()
    try:
        await _post(clients, f"{replay_server.url}/v1/messages")
        await _post(clients, f"{replay_server.url}/v1/messages")
    finally:
        await clients.aclose()
    first, second = replay_server.requests
    assert "cookie" not in first.headers
    assert second.headers["cookie"] == "__cf_bm=abc"


async def test_a_proxy_named_in_the_environment_carries_the_request(
    replay_server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", replay_server.url)
    replay_server.responses.append(ScriptedResponse(body=b"data: via the proxy\n\n"))
    clients = LazyClient()  # made after the variable is set, as an adapter's clients are
    try:
        status, body, _request = await _post(clients, "http://provider.invalid/v1/messages")
    finally:
        await clients.aclose()
    assert (status, body) == (200, b"data: via the proxy\n\n")
    (request,) = replay_server.requests
    assert request.path == "http://provider.invalid/v1/messages"  # the absolute form a proxy is sent


PROXY_VARIABLES = (
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
)


def _count_client_sends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs sent through ``httpx.AsyncClient.send`` (httpx's whole way) from now on."""
    sent: list[str] = []
    original = httpx.AsyncClient.send

    async def send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: object) -> httpx.Response:
        sent.append(str(request.url))
        return await original(self, request, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    return sent


def test_no_proxy_alone_names_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not proxy_named()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    assert not proxy_named()
    for name in ("ALL_PROXY", "https_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://proxy.invalid:3128")
        assert proxy_named(), name
        monkeypatch.delenv(name)


async def test_with_only_no_proxy_set_a_streamed_post_goes_the_direct_way(
    replay_server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    sent = _count_client_sends(monkeypatch)
    replay_server.responses.append(ScriptedResponse(body=b"data: direct\n\n"))
    clients = LazyClient()  # made after the variables are set, as an adapter's clients are
    try:
        status, body, _request = await _post(clients, f"{replay_server.url}/v1/messages")
    finally:
        await clients.aclose()
    assert (status, body) == (200, b"data: direct\n\n")
    assert sent == []  # not through client.send
    (request,) = replay_server.requests
    assert request.path == "/v1/messages"


async def test_a_host_no_proxy_names_skips_the_proxy_named(
    replay_server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # the discard port: a request sent there fails
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    sent = _count_client_sends(monkeypatch)
    replay_server.responses.append(ScriptedResponse(body=b"data: not via the proxy\n\n"))
    clients = LazyClient()
    try:
        status, body, _request = await _post(clients, f"{replay_server.url}/v1/messages")
    finally:
        await clients.aclose()
    assert (status, body) == (200, b"data: not via the proxy\n\n")
    assert sent == [f"{replay_server.url}/v1/messages"]  # httpx's way, which knows the exemptions
    (request,) = replay_server.requests
    assert request.path == "/v1/messages"  # the origin form: sent to the server itself


async def test_a_refused_connection_is_a_retryable_provider_error() -> None:
    clients = LazyClient()
    try:
        with pytest.raises(ProviderError) as caught:
            await _post(clients, "http://127.0.0.1:9/v1/messages")  # the discard port: nothing listens
    finally:
        await clients.aclose()
    assert caught.value.retryable and caught.value.kind == "connection_error"


async def test_a_route_sends_each_request_with_its_own_headers(replay_server: ReplayServer) -> None:
    """Headers are kept built by their values: a request whose headers differ (another key, a new
    header) is sent with its own, and the first ones again after that."""
    replay_server.responses.extend(ScriptedResponse(body=b"data: 1\n\n") for _ in range(3))
    url = f"{replay_server.url}/v1/messages"
    other = {**ADAPTER_HEADERS, "x-api-key": "sk-other", "anthropic-beta": "b1"}
    clients = LazyClient()
    try:
        for headers in (ADAPTER_HEADERS, other, ADAPTER_HEADERS):
            async with open_stream(
                clients, url, provider="test", headers=headers, content=BODY, map_error=_unexpected
            ) as response:
                await response.aread()
    finally:
        await clients.aclose()
    first, second, third = (request.headers for request in replay_server.requests)
    assert (first["x-api-key"], second["x-api-key"], third["x-api-key"]) == ("sk-test", "sk-other", "sk-test")
    assert "anthropic-beta" not in first and second["anthropic-beta"] == "b1" and "anthropic-beta" not in third
    assert first == third
