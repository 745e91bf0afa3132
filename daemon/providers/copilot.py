"""GitHub Copilot: the OpenAI chat or responses adapter, fed Copilot's short-lived token.

Owns:

* ``CopilotTokens``: exchanges the stored GitHub token (``daemon.config.stored_login``) for a Copilot
  token at ``GET {github_api}/copilot_internal/v2/token`` (``authorization: token ...``),
  keeps it in memory only, and fetches a new one before it expires (at ``refresh_in``, or
  60 s before ``expires_at``, whichever is sooner). The token names the API base URL for
  this account (``endpoints.api``, e.g. a business host); ``https://api.githubcopilot.com``
  otherwise. A new sign-in (another GitHub token) is noticed and exchanged afresh.
* ``CopilotProvider``: the adapter the registry creates for provider "copilot". It wraps
  ``OpenAIChatProvider`` or ``OpenAIResponsesProvider`` (per model, as the catalogue says)
  and supplies, per request, ``authorization: Bearer <copilot token>`` plus the editor
  headers Copilot requires. The GitHub token itself never reaches the Copilot API.

Failures: no stored sign-in, or a GitHub token that GitHub no longer accepts (401), is a
``ProviderAuthError`` (wire code provider_not_configured) telling the person to sign in
with ``auth/login``; no Copilot access for the account (403/404) says so; 5xx/429 and
network failures are retryable ``ProviderError``s. No message carries a token.

Wire reference: ``tests/fixtures/providers/WIRE-FORMATS.md`` (GitHub Copilot proxy).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec

from daemon.config.settings import ProviderConfig
from daemon.config.stored_login import load_github_token
from daemon.errors import ProviderAuthError, ProviderError, ProviderNotConfigured
from daemon.providers.base import Provider, ProviderEvent, ProviderRequest
from daemon.providers.device_login import github_api_url
from daemon.providers.http import error_message_from_body, parse_retry_after
from daemon.providers.openai_chat import OpenAIChatProvider
from daemon.providers.openai_common import OpenAIStyleProvider
from daemon.providers.openai_responses import OpenAIResponsesProvider
from daemon.util.redact import scrub
from daemon.util.secret import Secret
from daemon.vendors.table import PROVIDERS
from protocol.objects import Thinking

DEFAULT_API_URL = PROVIDERS["copilot"].base_url
REFRESH_MARGIN_S = 60.0
# What VS Code's Copilot Chat sends; the proxy rejects requests without an editor and
# integration id. A [providers.copilot] headers table overrides any of these.
EDITOR_VERSION = "vscode/1.107.0"
EDITOR_PLUGIN_VERSION = "copilot-chat/0.35.0"
USER_AGENT = "GitHubCopilotChat/0.35.0"
COPILOT_HEADERS = {
    "editor-version": EDITOR_VERSION,
    "editor-plugin-version": EDITOR_PLUGIN_VERSION,
    "copilot-integration-id": "vscode-chat",
    "user-agent": USER_AGENT,
    "openai-intent": "conversation-panel",
}


@dataclass(frozen=True)
class CopilotToken:
    value: Secret
    expires_at: float  # Unix time, as GitHub says
    refresh_at: float  # Unix time after which we fetch a new one
    api_url: str | None  # endpoints.api, when the token names one
    github_token: Secret  # the sign-in it was exchanged from


# The token and x-initiator of the request being opened. A context variable, not an
# attribute: one adapter serves every session's turns concurrently.
_REQUEST: contextvars.ContextVar[tuple[CopilotToken, str] | None] = contextvars.ContextVar(
    "copilot_request", default=None
)


class CopilotTokens:
    """The in-memory Copilot token of one provider config, refreshed before it expires.

    ``clock`` (Unix time) is injectable so tests can step past expiry.
    """

    def __init__(self, settings: ProviderConfig, home: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.home = home
        self.clock = clock
        self.exchanges = 0  # how many tokens were fetched (tests and logs)
        self._token: CopilotToken | None = None
        self._lock: anyio.Lock | None = None
        self._client: httpx.AsyncClient | None = None

    @property
    def provider(self) -> str:
        return self.settings.name

    def github_token(self) -> Secret:
        """The GitHub sign-in: from the provider config (kept current by ``auth/login``)
        or, for a provider made without one, the token file."""
        token = self.settings.api_key or load_github_token(self.home)
        if token is None:
            raise ProviderAuthError(
                f"{self.provider} is not signed in: {self.settings.key_hint}.",
                provider=self.provider,
                kind="not_signed_in",
            )
        return token

    def _usable(self, token: CopilotToken | None, github: Secret) -> bool:
        return token is not None and token.github_token == github and self.clock() < token.refresh_at

    async def get(self) -> CopilotToken:
        """A Copilot token valid for a while yet; exchanges one when needed."""
        github = self.github_token()
        if self._usable(self._token, github):
            return self._token  # type: ignore[return-value]
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:  # concurrent turns share one exchange
            current = self._token
            if self._usable(current, github):
                return current  # type: ignore[return-value]
            try:
                self._token = await self._exchange(github)
            except ProviderError as exc:
                # Refreshing early failed for a passing reason: the old token still works.
                still_valid = (
                    current is not None and current.github_token == github and self.clock() < current.expires_at - 5
                )
                if exc.retryable and still_valid:
                    return current  # type: ignore[return-value]
                raise
            return self._token

    def invalidate(self, token: CopilotToken) -> None:
        """Forget ``token`` (the API refused it), so the next request exchanges anew."""
        if self._token is token:
            self._token = None

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _exchange(self, github: Secret) -> CopilotToken:
        url = f"{github_api_url(self.settings)}/copilot_internal/v2/token"
        headers = {
            "authorization": f"token {github.reveal()}",
            "accept": "application/json",
            "editor-version": EDITOR_VERSION,
            "editor-plugin-version": EDITOR_PLUGIN_VERSION,
            "user-agent": USER_AGENT,
        }
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0), follow_redirects=False)
        try:
            response = await self._client.get(url, headers=headers)
        except httpx.RequestError as exc:
            raise ProviderError(
                f"Could not reach GitHub to get a Copilot token: {type(exc).__name__}.",
                provider=self.provider,
                retryable=True,
                kind="connection_error",
            ) from None
        self.exchanges += 1
        if response.status_code != 200:
            # Masked: the body becomes the error message, and a server may echo the token.
            raise self._exchange_error(response, scrub(response.content, (github.reveal(),)))
        try:
            data: Any = response.json()
        except ValueError:
            data = None
        value = data.get("token") if isinstance(data, dict) else None
        if not isinstance(value, str) or not value:
            raise ProviderError(
                f"GitHub's Copilot token answer holds no token (HTTP {response.status_code}); try again later.",
                provider=self.provider,
                status=response.status_code,
                retryable=True,
                kind="invalid_response",
            )
        now = self.clock()
        expires_at = data.get("expires_at")
        refresh_in = data.get("refresh_in")
        # Tokens last about 30 minutes; guess that much if GitHub does not say.
        expires = float(expires_at) if _is_number(expires_at) else now + 1800.0
        refresh_at = expires - REFRESH_MARGIN_S
        if _is_number(refresh_in) and refresh_in > 0:
            refresh_at = min(refresh_at, now + float(refresh_in))
        endpoints = data.get("endpoints")
        api = endpoints.get("api") if isinstance(endpoints, dict) else None
        return CopilotToken(
            value=Secret(value),
            expires_at=expires,
            refresh_at=refresh_at,
            api_url=api if isinstance(api, str) and api.startswith(("https://", "http://")) else None,
            github_token=github,
        )

    def _exchange_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        status = response.status_code
        message, _ = error_message_from_body(body)
        detail = f" ({message.rstrip('.')})" if message else ""
        if status == 401:
            return ProviderAuthError(
                f"GitHub no longer accepts the stored sign-in for {self.provider} (HTTP 401{detail}); "
                "sign in again with auth/login.",
                provider=self.provider,
                status=status,
                kind="github_token_rejected",
            )
        if status in (403, 404):
            return ProviderAuthError(
                f"GitHub gives this account no Copilot token (HTTP {status}{detail}); check that it has a "
                "Copilot subscription, or sign in with another account via auth/login.",
                provider=self.provider,
                status=status,
                kind="no_copilot_access",
            )
        retryable = status == 429 or status >= 500
        return ProviderError(
            f"GitHub's Copilot token exchange failed with HTTP {status}{detail}.",
            provider=self.provider,
            status=status,
            retryable=retryable,
            retry_after=parse_retry_after(response.headers) if retryable else None,
            kind="token_exchange_failed",
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class CopilotProvider(Provider):
    """Provider "copilot": one wire API (``openai-chat`` or ``openai-responses``)."""

    def __init__(
        self, settings: ProviderConfig, api: str, home: Path, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self.api = api
        self.tokens = CopilotTokens(settings, home, clock=clock)
        # A private copy of the settings: the inner adapter must never send the GitHub
        # token (api_key) itself, its base_url follows the Copilot token, and a 401 from
        # the API means signing in again.
        inner = msgspec.structs.replace(settings, api=api, api_key=None, headers={})  # key_hint: signing in
        adapters: dict[str, type[OpenAIStyleProvider]] = {
            "openai-chat": OpenAIChatProvider,
            "openai-responses": OpenAIResponsesProvider,
        }
        if api not in adapters:
            raise ProviderNotConfigured(
                settings.name, f"Copilot speaks openai-chat or openai-responses, not {api!r}; fix config.toml"
            )
        self.inner = adapters[api](inner, extra_headers=self._headers)

    def api_url(self, token: CopilotToken) -> str:
        """Where requests go: a base_url set by config or PONDER_COPILOT_API_URL, else the
        token's own endpoint, else the public one."""
        configured = self.settings.base_url.rstrip("/")
        if configured and configured != DEFAULT_API_URL:
            return configured
        return (token.api_url or DEFAULT_API_URL).rstrip("/")

    async def _headers(self) -> dict[str, str]:
        current = _REQUEST.get()
        token, initiator = current if current is not None else (await self.tokens.get(), "user")
        headers = {**COPILOT_HEADERS, "x-initiator": initiator}
        headers.update({k.lower(): v for k, v in self.settings.headers.items()})
        headers["authorization"] = f"Bearer {token.value.reveal()}"
        return headers

    def adjust_thinking(self, request: ProviderRequest) -> Thinking | None:
        return self.inner.adjust_thinking(request)  # the wire API's rules are Copilot's too

    @asynccontextmanager
    async def stream(self, request: ProviderRequest) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
        # Copilot bills a request the person started ("user") differently from the
        # follow-ups an agent makes on its own after tool results ("agent").
        last = request.messages[-1].role if request.messages else "user"
        initiator = "user" if last == "user" else "agent"
        async with AsyncExitStack() as stack:
            for attempt in range(2):
                token = await self.tokens.get()
                self.inner.config.base_url = self.api_url(token)
                reset = _REQUEST.set((token, initiator))
                try:
                    events = await stack.enter_async_context(self.inner.stream(request))
                except ProviderAuthError as exc:
                    # A revoked or expired-early Copilot token: exchange a new one, once.
                    self.tokens.invalidate(token)
                    if attempt == 0 and exc.status == 401:
                        continue
                    raise
                finally:
                    _REQUEST.reset(reset)
                break
            yield events

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            await self.tokens.aclose()


__all__ = ["COPILOT_HEADERS", "DEFAULT_API_URL", "CopilotProvider", "CopilotToken", "CopilotTokens"]
