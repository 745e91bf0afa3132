"""Signing in with an OAuth device flow (``ProviderInfo.login == "device"``): GitHub's, for
Copilot, and the stored GitHub token.

Owns:

* ``DeviceLogins``, behind ``auth/login``: it asks GitHub for a device code, answers at
  once with the code the person types at ``verification_uri``, and polls GitHub for the
  token in the background (every ``interval`` seconds, slower on ``slow_down``, until
  ``expires_in``), ending with exactly one ``auth/completed`` notification. A newer
  ``auth/login`` for the same provider replaces a pending one, which then ends silently.
* the GitHub URLs of the flow (overridable per ``ProviderConfig.endpoints``, which
  ``daemon.config.settings`` fills); the OAuth client id is ``daemon.vendors.table``'s.

The token file ``<home>/copilot.json`` is ``daemon.config.stored_login``'s, and
``daemon.config.settings.apply_stored_login`` makes the copilot provider ``configured``
(source ``login``) from it, unless an environment variable or config.toml already gives it
a token (those win, as everywhere else).

The GitHub token is a long-lived credential: it lives in a ``Secret``, goes to GitHub and
to the token file, and nowhere else: never into a log line, an error message or an event.
The short-lived Copilot token it is exchanged for is ``daemon.providers.copilot``'s business.

Wire reference: RFC 8628 (device authorization grant) as GitHub implements it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from daemon.config.stored_login import save_github_token
from daemon.errors import InvalidParams, ProviderNotConfigured, ShuttingDown
from daemon.util.secret import Secret
from daemon.vendors.table import DEVICE_LOGIN_PROVIDERS, GITHUB_CLIENT_ID
from protocol import methods as m
from protocol.events import AuthCompleted

if TYPE_CHECKING:
    import httpx
    from anyio.abc import TaskGroup

    from daemon.config.settings import Config, ProviderConfig

log = logging.getLogger("ponder.auth")

GITHUB_SCOPE = "read:user"
DEFAULT_GITHUB_URL = "https://github.com"
DEFAULT_GITHUB_API_URL = "https://api.github.com"

_DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
_DEFAULT_INTERVAL_S = 5.0  # RFC 8628 §3.2, when the server names none
_SLOW_DOWN_STEP_S = 5.0  # RFC 8628 §3.5
_HTTP_TIMEOUT_S = 30.0

Notify = Callable[[str, Any], Awaitable[None]]


# --- endpoints -------------------------------------------------------------------------


def github_url(settings: ProviderConfig) -> str:
    """Where the device flow runs (``/login/device/code``, ``/login/oauth/access_token``)."""
    return (settings.endpoints.get("github") or DEFAULT_GITHUB_URL).rstrip("/")


def github_api_url(settings: ProviderConfig) -> str:
    """Where the GitHub token is exchanged for a Copilot token (``/copilot_internal/v2/token``)."""
    return (settings.endpoints.get("github_api") or DEFAULT_GITHUB_API_URL).rstrip("/")


# --- the device flow -------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceCode:
    device_code: Secret  # with it anyone could collect the token: treat it as a credential
    user_code: str
    verification_uri: str
    expires_in: int
    interval: float


class LoginFailed(Exception):
    """The sign-in ended without a token; the message is for the person (no secrets)."""


def _client() -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(timeout=httpx.Timeout(_HTTP_TIMEOUT_S), follow_redirects=False)


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _describe(data: dict[str, Any], fallback: str) -> str:
    text = data.get("error_description") or data.get("error") or data.get("message") or fallback
    return str(text).strip().rstrip(".")[:200]


async def request_device_code(settings: ProviderConfig) -> DeviceCode:
    """Ask GitHub for a device code; raises ``ProviderNotConfigured`` saying what went wrong."""
    import httpx

    provider = settings.name
    try:
        async with _client() as client:
            response = await client.post(
                f"{github_url(settings)}/login/device/code",
                data={"client_id": GITHUB_CLIENT_ID, "scope": GITHUB_SCOPE},
                headers={"accept": "application/json"},
            )
    except httpx.RequestError as exc:
        raise ProviderNotConfigured(
            provider,
            f"could not reach GitHub to start the sign-in ({type(exc).__name__}); "
            "check the network and run auth/login again",
        ) from None
    data = _json_object(response)
    fields = ("device_code", "user_code", "verification_uri")
    if not response.is_success or "error" in data or not all(isinstance(data.get(f), str) for f in fields):
        reason = _describe(data, f"HTTP {response.status_code}")
        raise ProviderNotConfigured(
            provider, f"GitHub did not start the sign-in ({reason}); run auth/login again later"
        )
    interval = data.get("interval")
    expires_in = data.get("expires_in")
    return DeviceCode(
        device_code=Secret(data["device_code"]),
        user_code=data["user_code"],
        verification_uri=data["verification_uri"],
        expires_in=int(expires_in) if isinstance(expires_in, (int, float)) and expires_in > 0 else 900,
        interval=float(interval) if isinstance(interval, (int, float)) and interval >= 0 else _DEFAULT_INTERVAL_S,
    )


async def poll_for_token(settings: ProviderConfig, code: DeviceCode) -> Secret:
    """Poll GitHub until the person has entered the code; the GitHub token, or ``LoginFailed``.

    Transport failures and 5xx answers are retried at the next interval: a network blip
    should not cost the person the code they are typing.
    """
    import httpx

    url = f"{github_url(settings)}/login/oauth/access_token"
    form = {"client_id": GITHUB_CLIENT_ID, "device_code": code.device_code.reveal(), "grant_type": _DEVICE_GRANT}
    interval = code.interval
    deadline = anyio.current_time() + code.expires_in
    expired = LoginFailed("The sign-in code expired before it was entered; run auth/login again.")
    async with _client() as client:
        while True:
            # RFC 8628 §3.4: wait the interval before the first poll too.
            await anyio.sleep(max(0.0, min(interval, deadline - anyio.current_time())))
            if anyio.current_time() >= deadline:
                raise expired
            try:
                response = await client.post(url, data=form, headers={"accept": "application/json"})
            except httpx.RequestError as exc:
                log.warning("copilot sign-in: polling GitHub failed (%s); trying again", type(exc).__name__)
                continue
            data = _json_object(response)
            token = data.get("access_token")
            if isinstance(token, str) and token:
                return Secret(token)
            error = data.get("error")
            if error == "authorization_pending":
                continue
            if error == "slow_down":
                # GitHub says the new interval; otherwise RFC 8628 says add five seconds.
                new = data.get("interval")
                interval = float(new) if isinstance(new, (int, float)) and new > 0 else interval + _SLOW_DOWN_STEP_S
                continue
            if error == "expired_token":
                raise expired
            if error == "access_denied":
                raise LoginFailed("The sign-in was denied on GitHub; run auth/login again to retry.")
            if error is None and (response.status_code >= 500 or response.status_code == 429):
                log.warning(
                    "copilot sign-in: GitHub answered HTTP %s while polling; trying again", response.status_code
                )
                continue
            reason = _describe(data, f"HTTP {response.status_code}")
            raise LoginFailed(f"GitHub refused the sign-in ({reason}); run auth/login again.")


class DeviceLogins:
    """The device-flow logins of one daemon: at most one pending per provider.

    ``task_group`` returns the task group the background polls run in (None once the
    daemon is shutting down); they are cancelled with it, silently.
    """

    def __init__(self, config: Config, notify: Notify, task_group: Callable[[], TaskGroup | None]) -> None:
        self.config = config
        self._notify = notify
        self._task_group = task_group
        self._pending: dict[str, anyio.CancelScope] = {}

    async def start(self, provider: str) -> m.AuthLoginResult:
        """Start a sign-in: the code to show at once; the outcome comes as ``auth/completed``."""
        settings = self.config.providers.get(provider)
        if provider not in DEVICE_LOGIN_PROVIDERS or settings is None:
            if settings is None:
                how = "see auth/status for the providers there are"
            elif not settings.needs_key:
                how = "it needs no sign-in"
            else:
                how = f"configure it instead: {settings.key_hint}"
            raise InvalidParams(
                f"Provider {provider!r} has no device login; {how}.",
                argument="provider",
                allowed=list(DEVICE_LOGIN_PROVIDERS),
            )
        if self._task_group() is None:
            raise ShuttingDown()
        code = await request_device_code(settings)
        task_group = self._task_group()
        if task_group is None:
            raise ShuttingDown()
        # Replace a pending login only now that the new one has really started.
        previous = self._pending.pop(provider, None)
        if previous is not None:
            log.info("%s sign-in: a newer auth/login replaces the pending one", provider)
            previous.cancel()
        scope = self._pending[provider] = anyio.CancelScope()
        task_group.start_soon(self._complete, settings, code, scope)
        log.info("%s sign-in: waiting for the code to be entered at %s", provider, code.verification_uri)
        return m.AuthLoginResult(
            user_code=code.user_code, verification_uri=code.verification_uri, expires_in=code.expires_in
        )

    async def _complete(self, settings: ProviderConfig, code: DeviceCode, scope: anyio.CancelScope) -> None:
        # This runs in a task group shared with the session actors: it must never raise,
        # or it would take them down with it.
        provider = settings.name
        with scope:
            try:
                token = await poll_for_token(settings, code)
                await anyio.to_thread.run_sync(save_github_token, self.config.home, token)
                if settings.key_source in ("env", "config"):
                    log.warning(
                        "%s sign-in stored, but the token from %s still takes precedence", provider, settings.key_source
                    )
                else:
                    settings.api_key, settings.key_source = token, "login"
                error = None
            except LoginFailed as exc:
                error = str(exc)
            except OSError as exc:
                error = (
                    f"Could not store the sign-in in {self.config.home} ({exc.strerror or type(exc).__name__}); "
                    "fix the folder and run auth/login again."
                )
            except Exception:  # a bug: log it (no secrets reach exceptions here), report plainly
                log.exception("%s sign-in failed", provider)
                error = "The sign-in failed inside the daemon (details are in its log); run auth/login again."
            finally:
                if self._pending.get(provider) is scope:
                    del self._pending[provider]
            if error is None:
                log.info("%s sign-in completed", provider)
            else:
                log.warning("%s sign-in failed: %s", provider, error)
            await self._notify("auth/completed", AuthCompleted(provider=provider, ok=error is None, error=error))


__all__ = [
    "DeviceCode",
    "DeviceLogins",
    "LoginFailed",
    "github_api_url",
    "github_url",
    "poll_for_token",
    "request_device_code",
]
