"""Providers over HTTPS, as every hosted provider is: a real ``ponder ask`` (its daemon on asyncio,
where requests go through ``asyncio_net``, and on trio, through httpx's own transport) against a
replay server with a certificate from a throwaway authority. Trusted through ``SSL_CERT_FILE``,
the reply streams; not trusted, the prompt fails at once with an error that names the fix, and
nothing reaches the server."""

import os
import ssl
import subprocess
import sys

import pytest
import trustme

from tests.support.harness import subprocess_env
from tests.support.replay import ReplayServer

ASK = ("ask", "--model", "anthropic/claude-sonnet-4-5", "--thinking", "off", "Where should I have coffee?")


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(authority):
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost", "127.0.0.1").configure_cert(served)
    with ReplayServer(tls=served) as server:
        yield server


def _ask(home, tmp_path, server: ReplayServer, backend: str, ca_file: str | None):
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    extra = {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": server.url, "PONDER_ASYNC_BACKEND": backend}
    env.update({"PONDER_FORCE_TTY": "0", **subprocess_env(home, extra)})
    if ca_file is not None:
        env["SSL_CERT_FILE"] = ca_file
    return subprocess.run(
        [sys.executable, "-m", "daemon", *ASK], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_reply_streams_from_a_provider_over_https(home, tmp_path, authority, tls_server, backend):
    meta = tls_server.enqueue_fixture("anthropic", "thinking-text", split_every=64)
    ca_file = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    done = _ask(home, tmp_path, tls_server, backend, str(ca_file))
    assert done.returncode == 0, done.stderr
    assert meta["expected"]["text"] in done.stdout
    assert len(tls_server.requests) == 1 and tls_server.requests[0].path == "/v1/messages"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_certificate_nobody_trusts_fails_the_prompt_clearly(home, tmp_path, tls_server, backend):
    tls_server.enqueue_fixture("anthropic", "thinking-text")
    done = _ask(home, tmp_path, tls_server, backend, None)
    assert done.returncode != 0
    assert "Could not reach anthropic: ConnectError. Its TLS certificate is not trusted" in done.stderr, done.stderr
    assert "SSL_CERT_FILE" in done.stderr and "Retrying" not in done.stderr  # a setting to fix: not retried
    assert tls_server.requests == []
