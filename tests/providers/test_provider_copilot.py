"""Copilot: GitHub device-flow sign-in over the protocol, token storage, the Copilot token
exchange and its refresh, and streams through ``CopilotProvider``.

Everything runs offline against a fake of GitHub's and Copilot's endpoints served by the
real replay HTTP server on 127.0.0.1 (``FakeGitHub`` installs its routes); tokens are fake.
The daemon runs in-process over the real protocol, so every message it writes is also
checked against the schema, and we check that no token ever appears in one.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import stat
import threading
from typing import Any

import anyio
import msgspec
import pytest

from daemon.config.settings import ProviderConfig, load_config
from daemon.config.stored_login import load_github_token, save_github_token, token_path
from daemon.conversation import Part
from daemon.errors import ProviderAuthError, ProviderError
from daemon.jsonrpc.client import RpcError
from daemon.providers.copilot import CopilotProvider, CopilotTokens
from daemon.util.secret import Secret
from daemon.vendors.table import GITHUB_CLIENT_ID
from protocol.errors import ErrorCode
from tests.support.fake_github import COPILOT_TOKEN, DEVICE_CODE, GITHUB_TOKEN, FakeGitHub, _json
from tests.support.harness import in_memory_daemon
from tests.support.provider_streams import assistant, collect, enqueue_local, make_request, tool_results, user
from tests.support.replay import RecordedRequest, ScriptedResponse, fixture_request

pytestmark = pytest.mark.anyio

SECRETS = (GITHUB_TOKEN, COPILOT_TOKEN, DEVICE_CODE)


@pytest.fixture
def github(replay_server):
    return FakeGitHub(replay_server)


class Recorder:
    """Keeps every message the daemon writes (after the schema check) and its log lines."""

    def __init__(self, client: Any) -> None:
        self.messages: list[Any] = []
        validate = client.on_message

        def on_message(message: Any, methods: dict[Any, str]) -> None:
            validate(message, methods)
            self.messages.append(message)

        client.on_message = on_message

    def assert_no_secrets(self, caplog: pytest.LogCaptureFixture | None = None) -> None:
        wire = json.dumps(self.messages)
        logs = "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records) if caplog else ""
        for secret in SECRETS:
            assert secret not in wire, "a token reached the wire"
            assert secret not in logs, "a token reached the log"


async def next_notification(client: Any, method: str, timeout: float = 10.0) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        async for got, params in client.notifications:
            if got == method:
                return params
    raise AssertionError(f"no {method} notification")


async def no_notification(client: Any, method: str, wait: float) -> None:
    with anyio.move_on_after(wait):
        async for got, params in client.notifications:
            assert got != method, f"unexpected {method}: {params}"


async def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def copilot_settings(github: FakeGitHub, token: str | None = GITHUB_TOKEN, **kwargs: Any) -> ProviderConfig:
    settings = ProviderConfig(
        name="copilot",
        api="openai-chat",
        base_url="https://api.githubcopilot.com",
        api_key=Secret(token) if token else None,
        key_source="login" if token else None,
        endpoints={"github": github.url, "github_api": github.url},
        **kwargs,
    )
    return settings


def claude_request(messages: list | None = None):
    """The request that produces openai-chat/copilot-claude-reasoning.request.json."""
    body = fixture_request("openai-chat", "copilot-claude-reasoning")
    return make_request(
        "copilot",
        body["model"],
        messages or [user(body["messages"][0]["content"])],
        params={"thinking_budget": body["thinking_budget"]},
        max_output_tokens=body["max_tokens"],
    )


# --- sign-in over the protocol ---------------------------------------------------------


async def test_login_answers_at_once_and_completes_in_the_background(github, home, caplog):
    caplog.set_level(logging.DEBUG)
    github.release = threading.Event()
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        recorder = Recorder(client)
        status = await client.request("auth/status")
        assert {"provider": "copilot", "configured": False, "source": None} in status["providers"]

        with anyio.fail_after(2):
            result = await client.request("auth/login", {"provider": "copilot"})
        assert result == {
            "user_code": "WDJB-MJH1",
            "verification_uri": "https://github.com/login/device",
            "expires_in": 900,
        }

        # Polling goes on in the background (held at authorization_pending) while other
        # requests are answered at once.
        await wait_until(lambda: len(github.polls) >= 3)
        with anyio.fail_after(1):
            assert await client.request("ping") == {}
            models = await client.request("models/list", {"provider": "copilot"})
        assert models["models"] and not any(model["available"] for model in models["models"])
        assert not token_path(home).exists()

        github.release.set()
        completed = await next_notification(client, "auth/completed")
        assert completed == {"provider": "copilot", "ok": True, "error": None}

        # Stored, mode 0600, and in effect at once: configured by login, models available.
        path = token_path(home)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert load_github_token(home) == Secret(GITHUB_TOKEN)
        status = await client.request("auth/status")
        assert {"provider": "copilot", "configured": True, "source": "login"} in status["providers"]
        models = await client.request("models/list", {"provider": "copilot"})
        assert all(model["available"] for model in models["models"])
        recorder.assert_no_secrets(caplog)

    # What GitHub was sent: the device-flow form of the Copilot editors' OAuth app.
    device = next(r for r in github.server.requests if r.path == "/login/device/code")
    assert FakeGitHub.form(device) == {"client_id": GITHUB_CLIENT_ID, "scope": "read:user"}
    assert device.headers["accept"] == "application/json"
    _, form, headers = github.polls[-1]
    assert form == {
        "client_id": GITHUB_CLIENT_ID,
        "device_code": DEVICE_CODE,
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
    }
    assert headers["accept"] == "application/json"
    # A fresh daemon on the same home finds the sign-in.
    config = load_config(home, env={})
    assert config.providers["copilot"].configured and config.providers["copilot"].key_source == "login"


async def test_polling_waits_the_interval_and_slows_down_when_told(github, home):
    github.interval = 0.05
    github.poll_answers = [
        "authorization_pending",
        {"error": "slow_down", "interval": 0.4},
        "authorization_pending",
        "token",
    ]
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        await client.request("auth/login", {"provider": "copilot"})
        completed = await next_notification(client, "auth/completed")
    assert completed["ok"] is True
    times = [t for t, _, _ in github.polls]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 4
    assert gaps[0] >= 0.04  # the interval GitHub named
    assert gaps[1] >= 0.38 and gaps[2] >= 0.38  # the slower interval from slow_down, kept


@pytest.mark.parametrize(
    ("answer", "expires_in", "words"),
    [
        ("access_denied", 900, "denied"),
        ("expired_token", 900, "expired"),
        ("authorization_pending", 1, "expired"),  # nobody enters the code in time
        ({"error": "incorrect_client_credentials", "error_description": "The client_id is wrong."}, 900, "client_id"),
    ],
    ids=["denied", "expired-token", "never-entered", "other-error"],
)
async def test_login_failures_end_with_auth_completed_not_ok(github, home, caplog, answer, expires_in, words):
    github.expires_in = expires_in
    github.poll_answers = [answer]
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        recorder = Recorder(client)
        started = anyio.current_time()
        await client.request("auth/login", {"provider": "copilot"})
        completed = await next_notification(client, "auth/completed")
        assert completed["provider"] == "copilot" and completed["ok"] is False
        assert words in completed["error"] and "auth/login" in completed["error"]
        if expires_in == 1:
            assert anyio.current_time() - started >= 0.9
        status = await client.request("auth/status")
        assert {"provider": "copilot", "configured": False, "source": None} in status["providers"]
        recorder.assert_no_secrets(caplog)
    assert not token_path(home).exists()


async def test_polling_survives_transient_github_errors(github, home):
    github.poll_answers = [_json(502, {"message": "bad gateway"}), "authorization_pending", "token"]
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        await client.request("auth/login", {"provider": "copilot"})
        assert (await next_notification(client, "auth/completed"))["ok"] is True
    assert len(github.polls) == 3


async def test_a_second_login_replaces_the_pending_one(github, home):
    # The first device code is never approved; the second one is.
    github.poll_answers = [lambda form: "token" if form["device_code"].endswith("-2") else "authorization_pending"]
    github.release = threading.Event()
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        first = await client.request("auth/login", {"provider": "copilot"})
        await wait_until(lambda: len(github.polls) >= 2)
        second = await client.request("auth/login", {"provider": "copilot"})
        assert (first["user_code"], second["user_code"]) == ("WDJB-MJH1", "WDJB-MJH2")
        await wait_until(lambda: any(f["device_code"].endswith("-2") for _, f, _ in github.polls))
        github.release.set()
        completed = await next_notification(client, "auth/completed")
        assert completed["ok"] is True
        # The replaced login ends silently and stops polling.
        polls_of_first = len([1 for _, f, _ in github.polls if f["device_code"] == DEVICE_CODE])
        await no_notification(client, "auth/completed", 0.2)
        assert len([1 for _, f, _ in github.polls if f["device_code"] == DEVICE_CODE]) == polls_of_first


async def test_shutdown_during_a_pending_login_is_prompt(github, home):
    github.release = threading.Event()  # never set
    with anyio.fail_after(5):
        async with in_memory_daemon(home, env=github.env()) as (client, _):
            await client.request("auth/login", {"provider": "copilot"})
            await wait_until(lambda: len(github.polls) >= 1)
            await client.request("shutdown")


async def test_login_for_a_provider_without_device_flow_is_invalid_params(github, home):
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        for provider, hint in (
            ("anthropic", "ANTHROPIC_API_KEY"),
            ("ollama", "needs no sign-in"),
            ("nonesuch", "auth/status"),
        ):
            with pytest.raises(RpcError) as caught:
                await client.request("auth/login", {"provider": provider})
            assert caught.value.code == ErrorCode.INVALID_PARAMS
            assert "no device login" in caught.value.message and hint in caught.value.message
            assert caught.value.data["allowed"] == ["copilot"]
    assert github.device_codes == 0


async def test_github_unreachable_or_refusing_is_a_clear_error(github, home):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with in_memory_daemon(home, env={"PONDER_COPILOT_GITHUB_URL": closed}) as (client, _):
        with pytest.raises(RpcError) as caught:
            await client.request("auth/login", {"provider": "copilot"})
        assert caught.value.code == ErrorCode.PROVIDER_NOT_CONFIGURED
        assert "could not reach GitHub" in caught.value.message
        assert caught.value.data["provider"] == "copilot"
    github.device_code_status = 400
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        with pytest.raises(RpcError) as caught:
            await client.request("auth/login", {"provider": "copilot"})
        assert caught.value.code == ErrorCode.PROVIDER_NOT_CONFIGURED
        assert "Nope" in caught.value.message


# --- auth/status and the token file ---------------------------------------------------------


async def test_auth_status_names_every_source_and_never_a_secret(home):
    (home / "config.toml").write_text('[providers.deepseek]\napi_key = "sk-config-secret-0123456789"\n')
    save_github_token(home, Secret(GITHUB_TOKEN))
    env = {"ANTHROPIC_API_KEY": "sk-ant-env-secret-0123456789"}
    async with in_memory_daemon(home, env=env) as (client, _):
        status = await client.request("auth/status")
    by_name = {p["provider"]: p for p in status["providers"]}
    assert "mock" not in by_name
    assert set(by_name) >= {"anthropic", "openai", "copilot", "gemini", "ollama", "deepseek", "dashscope", "openrouter"}
    assert by_name["anthropic"] == {"provider": "anthropic", "configured": True, "source": "env"}
    assert by_name["deepseek"] == {"provider": "deepseek", "configured": True, "source": "config"}
    assert by_name["copilot"] == {"provider": "copilot", "configured": True, "source": "login"}
    assert by_name["openai"] == {"provider": "openai", "configured": False, "source": None}
    text = json.dumps(status)
    assert "secret" not in text and GITHUB_TOKEN not in text


async def test_auth_status_sees_a_sign_in_made_elsewhere(home):
    async with in_memory_daemon(home) as (client, _):
        before = {p["provider"]: p for p in (await client.request("auth/status"))["providers"]}
        save_github_token(home, Secret(GITHUB_TOKEN))  # e.g. another daemon on this home
        after = {p["provider"]: p for p in (await client.request("auth/status"))["providers"]}
        token_path(home).unlink()
        signed_out = {p["provider"]: p for p in (await client.request("auth/status"))["providers"]}
    assert before["copilot"]["configured"] is False
    assert after["copilot"] == {"provider": "copilot", "configured": True, "source": "login"}
    assert signed_out["copilot"]["configured"] is False


def test_token_file_is_created_private_and_replaced_atomically(home):
    old_umask = os.umask(0)  # even with a permissive umask
    try:
        save_github_token(home, Secret("gho_first_token_0123456789"))
        save_github_token(home, Secret(GITHUB_TOKEN))
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(token_path(home)).st_mode) == 0o600
    assert load_github_token(home) == Secret(GITHUB_TOKEN)
    assert [p.name for p in home.iterdir()] == ["copilot.json"]  # no temporary files left
    token_path(home).write_text("{not json")
    assert load_github_token(home) is None


def test_config_endpoints_and_precedence(home):
    (home / "config.toml").write_text(
        '[providers.copilot]\ngithub_url = "http://gh.test"\ngithub_api_url = "http://api.gh.test"\n'
    )
    save_github_token(home, Secret(GITHUB_TOKEN))
    copilot = load_config(home, env={}).providers["copilot"]
    assert copilot.endpoints == {"github": "http://gh.test", "github_api": "http://api.gh.test"}
    assert copilot.base_url == "https://api.githubcopilot.com"
    assert (copilot.configured, copilot.key_source, copilot.api_key) == (True, "login", Secret(GITHUB_TOKEN))
    env = {
        "PONDER_COPILOT_GITHUB_URL": "http://127.0.0.1:1",
        "PONDER_COPILOT_GITHUB_API_URL": "http://127.0.0.1:2",
        "PONDER_COPILOT_API_URL": "http://127.0.0.1:3",
    }
    copilot = load_config(home, env=env).providers["copilot"]
    assert copilot.endpoints == {"github": "http://127.0.0.1:1", "github_api": "http://127.0.0.1:2"}
    assert copilot.base_url == "http://127.0.0.1:3"
    # A token in config.toml wins over the stored sign-in, as config wins elsewhere.
    (home / "config.toml").write_text('[providers.copilot]\napi_key = "gho_from_config_0123456789"\n')
    copilot = load_config(home, env={}).providers["copilot"]
    assert (copilot.key_source, copilot.api_key) == ("config", Secret("gho_from_config_0123456789"))


# --- the Copilot token ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_token_exchange_caches_and_refreshes_before_expiry(github, home):
    clock = github.clock = Clock()
    tokens = CopilotTokens(copilot_settings(github), home, clock=clock)
    try:
        first = await tokens.get()
        assert first.value == Secret(f"{COPILOT_TOKEN};n=1")
        assert first.api_url == github.url
        assert (await tokens.get()) is first and len(github.exchanges) == 1

        clock.now += 1499  # refresh_in is 1500 s
        assert (await tokens.get()) is first
        clock.now += 2
        second = await tokens.get()
        assert second.value == Secret(f"{COPILOT_TOKEN};n=2") and len(github.exchanges) == 2

        # Without refresh_in: 60 s before expires_at.
        github.refresh_in = None
        github.token_lifetime_s = 600
        clock.now = second.refresh_at + 1
        third = await tokens.get()
        clock.now += 600 - 61
        assert (await tokens.get()) is third
        clock.now += 2
        assert (await tokens.get()).value == Secret(f"{COPILOT_TOKEN};n=4")
    finally:
        await tokens.aclose()
    request = github.exchanges[0]
    assert request.method == "GET" and request.path == "/copilot_internal/v2/token"
    assert request.headers["authorization"] == f"token {GITHUB_TOKEN}"
    assert request.headers["editor-version"].startswith("vscode/")
    assert request.headers["editor-plugin-version"].startswith("copilot-chat/")


async def test_concurrent_requests_share_one_exchange(github, home):
    tokens = CopilotTokens(copilot_settings(github), home)
    got = []
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(lambda: _append(got, tokens.get()))
    finally:
        await tokens.aclose()
    assert len(github.exchanges) == 1 and len({id(t) for t in got}) == 1


async def _append(into: list, awaitable) -> None:
    into.append(await awaitable)


async def test_a_new_sign_in_is_exchanged_afresh(github, home):
    settings = copilot_settings(github)
    tokens = CopilotTokens(settings, home)
    try:
        await tokens.get()
        settings.api_key = Secret("gho_another_account_0123456789")  # what auth/login does
        await tokens.get()
    finally:
        await tokens.aclose()
    assert [r.headers["authorization"] for r in github.exchanges] == [
        f"token {GITHUB_TOKEN}",
        "token gho_another_account_0123456789",
    ]


async def test_exchange_401_asks_to_sign_in_again_without_echoing_the_token(github, home):
    github.exchange_answers = [_json(401, {"message": f"Bad credentials: {GITHUB_TOKEN}"})]
    tokens = CopilotTokens(copilot_settings(github), home)
    try:
        with pytest.raises(ProviderAuthError) as caught:
            await tokens.get()
    finally:
        await tokens.aclose()
    error = caught.value
    assert error.status == 401 and error.code == ErrorCode.PROVIDER_NOT_CONFIGURED
    assert "sign in again with auth/login" in error.message
    assert GITHUB_TOKEN not in error.message and GITHUB_TOKEN not in repr(error.data)


async def test_exchange_403_says_the_account_has_no_copilot(github, home):
    github.exchange_answers = [_json(403, {"message": "Resource not accessible by integration"})]
    tokens = CopilotTokens(copilot_settings(github), home)
    try:
        with pytest.raises(ProviderAuthError) as caught:
            await tokens.get()
    finally:
        await tokens.aclose()
    assert "Copilot subscription" in caught.value.message and caught.value.status == 403


async def test_a_failed_early_refresh_keeps_the_still_valid_token(github, home):
    clock = github.clock = Clock()
    tokens = CopilotTokens(copilot_settings(github), home, clock=clock)
    try:
        first = await tokens.get()
        clock.now += 1501  # past refresh_in, still far from expires_at
        github.exchange_answers = [_json(503, {"message": "unavailable"})]
        assert (await tokens.get()) is first
        clock.now = first.expires_at  # expired now: the failure must surface
        github.exchange_answers = [_json(503, {"message": "unavailable"}, {"retry-after": "7"})]
        with pytest.raises(ProviderError) as caught:
            await tokens.get()
    finally:
        await tokens.aclose()
    assert caught.value.retryable and caught.value.retry_after == 7
    assert not isinstance(caught.value, ProviderAuthError)


async def test_not_signed_in_is_provider_not_configured_with_the_hint(github, home):
    adapter = CopilotProvider(copilot_settings(github, token=None), "openai-chat", home)
    try:
        got = await collect(adapter, claude_request())
    finally:
        await adapter.aclose()
    assert isinstance(got.error, ProviderAuthError)
    assert got.error.code == ErrorCode.PROVIDER_NOT_CONFIGURED
    assert "sign in with auth/login" in got.error.message
    assert github.exchanges == []


async def test_the_token_file_is_used_when_the_settings_carry_none(github, home):
    save_github_token(home, Secret(GITHUB_TOKEN))
    tokens = CopilotTokens(copilot_settings(github, token=None), home)
    try:
        await tokens.get()
    finally:
        await tokens.aclose()
    assert github.exchanges[0].headers["authorization"] == f"token {GITHUB_TOKEN}"


# --- streams through CopilotProvider ---------------------------------------------------------


async def test_streamed_chat_completion_carries_the_copilot_headers(github, replay_server, home, caplog):
    caplog.set_level(logging.DEBUG)
    meta = replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning", split_every=7)
    adapter = CopilotProvider(copilot_settings(github), "openai-chat", home)
    try:
        got = await collect(adapter, claude_request())
    finally:
        await adapter.aclose()
    assert got.error is None
    expected = meta["expected"]
    assert got.streamed("text") == expected["text"]
    assert got.streamed("thinking") == expected["thinking"]
    assert got.starts("text") == 1 and got.starts("thinking") == 1  # one message, not one per chunk

    sent = next(r for r in replay_server.requests if r.path == "/chat/completions")
    assert sent.json() == fixture_request("openai-chat", "copilot-claude-reasoning")
    headers = sent.headers
    assert headers["authorization"] == f"Bearer {COPILOT_TOKEN};n=1"
    assert headers["copilot-integration-id"] == "vscode-chat"
    assert headers["editor-version"].startswith("vscode/")
    assert headers["editor-plugin-version"].startswith("copilot-chat/")
    assert headers["user-agent"].startswith("GitHubCopilotChat/")
    assert headers["openai-intent"] == "conversation-panel"
    assert headers["x-initiator"] == "user"
    assert GITHUB_TOKEN not in json.dumps(headers)  # the GitHub token stays with GitHub
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert COPILOT_TOKEN not in logs and GITHUB_TOKEN not in logs


async def test_follow_ups_after_tool_results_are_agent_initiated(github, replay_server, home):
    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    adapter = CopilotProvider(copilot_settings(github), "openai-chat", home)
    call = Part(type="tool_call", call_id="call_1", name="read_file", arguments={"path": "a.txt"})
    history = [user("Read a.txt"), assistant([call]), tool_results(("call_1", "hello"))]
    try:
        assert (await collect(adapter, claude_request(history))).error is None
        assert (await collect(adapter, claude_request())).error is None
    finally:
        await adapter.aclose()
    chats = [r for r in replay_server.requests if r.path == "/chat/completions"]
    assert [r.headers["x-initiator"] for r in chats] == ["agent", "user"]
    assert len(github.exchanges) == 1  # the cached token served both


async def test_a_401_from_copilot_exchanges_a_new_token_once(github, replay_server, home):
    replay_server.enqueue(_json(401, {"error": {"message": "token expired", "type": "unauthorized"}}))
    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    adapter = CopilotProvider(copilot_settings(github), "openai-chat", home)
    try:
        got = await collect(adapter, claude_request())
        # Refused twice running: reported, not retried forever.
        replay_server.enqueue(_json(401, {"error": {"message": "token expired", "type": "unauthorized"}}))
        replay_server.enqueue(_json(401, {"error": {"message": "token expired", "type": "unauthorized"}}))
        refused = await collect(adapter, claude_request())
    finally:
        await adapter.aclose()
    assert got.error is None
    chats = [r for r in replay_server.requests if r.path == "/chat/completions"]
    assert [r.headers["authorization"] for r in chats[:2]] == [
        f"Bearer {COPILOT_TOKEN};n=1",
        f"Bearer {COPILOT_TOKEN};n=2",
    ]
    assert isinstance(refused.error, ProviderAuthError) and "auth/login" in refused.error.message
    assert len(github.exchanges) == 3


async def test_responses_models_go_to_the_responses_endpoint(github, replay_server, home):
    replay_server.enqueue_fixture("openai-responses", "reasoning-summary-text")
    adapter = CopilotProvider(copilot_settings(github), "openai-responses", home)
    try:
        got = await collect(adapter, make_request("copilot", "gpt-5.2", [user("Merge sort or quicksort?")]))
    finally:
        await adapter.aclose()
    assert got.error is None and got.streamed("text")
    sent = next(r for r in replay_server.requests if r.method == "POST")
    assert sent.path == "/responses"
    assert sent.headers["authorization"] == f"Bearer {COPILOT_TOKEN};n=1"
    assert sent.headers["copilot-integration-id"] == "vscode-chat"


async def test_base_url_override_and_configured_headers(github, replay_server, home):
    """PONDER_COPILOT_API_URL / base_url wins over the token's endpoint; a configured
    header overrides our default but never the bearer token."""
    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    settings = copilot_settings(
        github, headers={"Editor-Version": "vscode/9.9.9", "Authorization": "Bearer nope-nope-nope"}
    )
    settings.base_url = replay_server.url
    original = github._exchange

    def exchange_naming_elsewhere(request: RecordedRequest) -> ScriptedResponse:
        response = original(request)
        body = json.loads(response.body)
        body["endpoints"]["api"] = "http://127.0.0.1:9"
        return _json(200, body)

    replay_server.route("GET", "/copilot_internal/v2/token", exchange_naming_elsewhere)
    adapter = CopilotProvider(settings, "openai-chat", home)
    try:
        assert (await collect(adapter, claude_request())).error is None
    finally:
        await adapter.aclose()
    sent = next(r for r in replay_server.requests if r.path == "/chat/completions")
    assert sent.headers["editor-version"] == "vscode/9.9.9"
    assert sent.headers["authorization"] == f"Bearer {COPILOT_TOKEN};n=1"


# --- end to end: sign in, then a turn on a Copilot model ---------------------------------------


async def test_sign_in_then_prompt_a_copilot_model(github, replay_server, home, caplog):
    caplog.set_level(logging.DEBUG)
    meta = replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    async with in_memory_daemon(home, env=github.env()) as (client, _):
        recorder = Recorder(client)
        await client.request("auth/login", {"provider": "copilot"})
        assert (await next_notification(client, "auth/completed"))["ok"] is True
        started = await client.request(
            "session/start", {"model_id": "copilot/claude-sonnet-4.5", "thinking_level": "medium", "cwd": str(home)}
        )
        turn = await client.request("session/prompt", {"session_id": started["session"]["session_id"], "text": "Hi"})
        events = await client.collect_turn(turn["turn_id"])
        recorder.assert_no_secrets(caplog)
    end = events[-1]
    assert end["type"] == "turn_end" and end["stop_reason"] == "end_turn", end
    text = "".join(e["delta"] for e in events if e["type"] == "text_delta")
    assert text == meta["expected"]["text"]
    sent = next(r for r in replay_server.requests if r.path == "/chat/completions")
    assert sent.headers["authorization"].startswith(f"Bearer {COPILOT_TOKEN}")
    assert sent.json()["model"] == "claude-sonnet-4.5"
    assert github.exchanges[0].headers["authorization"] == f"token {GITHUB_TOKEN}"


async def test_responses_phase_goes_back_through_copilot(github, replay_server, home):
    """Copilot's gpt-5.x answer on /responses with phase too: it goes back on the message."""
    meta = enqueue_local(replay_server, "openai-responses", "phase-final-answer")
    replay_server.enqueue_fixture("openai-responses", "reasoning-summary-text")
    adapter = CopilotProvider(copilot_settings(github), "openai-responses", home)
    try:
        got = await collect(adapter, make_request("copilot", "gpt-5.3-codex", [user("Fix it.")]))
        history = [user("Fix it."), got.reply(), user("Thanks!")]
        await collect(adapter, make_request("copilot", "gpt-5.3-codex", history))
    finally:
        await adapter.aclose()
    posts = [r for r in replay_server.requests if r.method == "POST" and r.path == "/responses"]
    assert posts[1].json()["input"][1] == meta["expected"]["assistant_items_for_roundtrip"][0]


def test_a_sign_in_that_makes_the_home_makes_it_owner_only(tmp_path):
    home = tmp_path / "new" / "home"
    save_github_token(home, Secret(GITHUB_TOKEN))
    assert home.stat().st_mode & 0o777 == 0o700
    assert token_path(home).stat().st_mode & 0o777 == 0o600


async def test_an_image_goes_to_copilot_as_chat_and_responses_content(github, replay_server, home):
    # Copilot speaks OpenAI Chat (Claude, GPT-4.1, Gemini) and Responses (GPT-5): the image goes
    # in each API's own form, as a data URL (what the agent fills in for an image it sends).
    image = Part(type="image", attachment_id="att_x", mime_type="image/png", width=1, height=1, size=4, data=b"\x89PNG")
    url = "data:image/png;base64,iVBORw=="
    message = msgspec.structs.replace(user("What is this?"), parts=[Part(type="text", text="What is this?"), image])
    replay_server.enqueue_fixture("openai-chat", "copilot-claude-reasoning")
    replay_server.enqueue_fixture("openai-responses", "reasoning-summary-text")
    for api, model in (("openai-chat", "claude-sonnet-4.5"), ("openai-responses", "gpt-5.2")):
        adapter = CopilotProvider(copilot_settings(github), api, home)
        try:
            got = await collect(adapter, make_request("copilot", model, [message]))
        finally:
            await adapter.aclose()
        assert got.error is None
    chat, responses = [r.json() for r in replay_server.requests if r.method == "POST"]
    assert chat["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}],
    }
    assert responses["input"][-1] == {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": url, "detail": "auto"},
        ],
    }
