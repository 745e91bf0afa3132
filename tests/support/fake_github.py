"""A fake of github.com's device flow and api.github.com's Copilot token endpoint, as routes
of the real replay server (``tests.support.replay``); every token is fake."""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import parse_qs

from tests.support.replay import RecordedRequest, ScriptedResponse

GITHUB_TOKEN = "gho_fakeGitHubToken0123456789abcdefXYZ"
COPILOT_TOKEN = "tid=fakecopilot;exp=9999999999;sku=free_limited;8kp=1:0123456789abcdef"
DEVICE_CODE = "fake-device-code-3584d83530557fdd1f46af8289938c8ef79f9dc5"


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> ScriptedResponse:
    return ScriptedResponse(
        status=status, headers={"content-type": "application/json", **(headers or {})}, body=json.dumps(body).encode()
    )


class FakeGitHub:
    """github.com's device flow and api.github.com's Copilot token endpoint, scripted.

    ``poll_answers`` is consumed one per poll (the last one repeats); an answer of
    ``"token"`` hands out ``GITHUB_TOKEN``. ``release`` (when set) holds every poll at
    ``authorization_pending`` until the test sets it.
    """

    def __init__(self, server: Any, *, interval: float = 0.02, expires_in: int = 900) -> None:
        self.server = server
        self.url = server.url
        self.interval = interval
        self.expires_in = expires_in
        self.device_codes = 0
        self.poll_answers: list[Any] = ["token"]
        self.release: threading.Event | None = None
        self.polls: list[tuple[float, dict[str, str], dict[str, str]]] = []  # (time, form, headers)
        self.exchanges: list[RecordedRequest] = []
        self.exchange_answers: list[ScriptedResponse] = []  # consumed first; then a good token
        self.token_lifetime_s = 1800
        self.refresh_in: int | None = 1500
        self.clock = time.time
        self.device_code_status = 200
        server.route("POST", "/login/device/code", self._device_code)
        server.route("POST", "/login/oauth/access_token", self._poll)
        server.route("GET", "/copilot_internal/v2/token", self._exchange)

    def env(self) -> dict[str, str]:
        return {"PONDER_COPILOT_GITHUB_URL": self.url, "PONDER_COPILOT_GITHUB_API_URL": self.url}

    @staticmethod
    def form(request: RecordedRequest) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(request.body.decode()).items()}

    def _device_code(self, request: RecordedRequest) -> ScriptedResponse:
        self.device_codes += 1
        if self.device_code_status != 200:
            return _json(self.device_code_status, {"error": "unauthorized_client", "error_description": "Nope."})
        suffix = "" if self.device_codes == 1 else f"-{self.device_codes}"
        return _json(
            200,
            {
                "device_code": DEVICE_CODE + suffix,
                "user_code": f"WDJB-MJH{self.device_codes}",
                "verification_uri": "https://github.com/login/device",
                "expires_in": self.expires_in,
                "interval": self.interval,
            },
        )

    def _poll(self, request: RecordedRequest) -> ScriptedResponse:
        self.polls.append((time.monotonic(), self.form(request), request.headers))
        if self.release is not None and not self.release.is_set():
            return _json(200, {"error": "authorization_pending"})
        answer = self.poll_answers.pop(0) if len(self.poll_answers) > 1 else self.poll_answers[0]
        if callable(answer):
            answer = answer(self.form(request))
        if answer == "token":
            return _json(200, {"access_token": GITHUB_TOKEN, "token_type": "bearer", "scope": "read:user"})
        if isinstance(answer, ScriptedResponse):
            return answer
        return _json(200, answer if isinstance(answer, dict) else {"error": answer})

    def _exchange(self, request: RecordedRequest) -> ScriptedResponse:
        self.exchanges.append(request)
        if self.exchange_answers:
            return self.exchange_answers.pop(0)
        now = self.clock()
        body: dict[str, Any] = {
            "token": f"{COPILOT_TOKEN};n={len(self.exchanges)}",
            "expires_at": int(now + self.token_lifetime_s),
            "endpoints": {"api": self.url, "proxy": "https://proxy.example.invalid"},
            "chat_enabled": True,
        }
        if self.refresh_in is not None:
            body["refresh_in"] = self.refresh_in
        return _json(200, body)
