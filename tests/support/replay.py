"""A real HTTP server on 127.0.0.1 that replays provider fixtures and records requests.

It runs in its own thread (stdlib ``http.server``), so it serves tests on either anyio
backend alike. Queue responses with ``server.enqueue(...)`` (or ``enqueue_fixture``);
each incoming request takes the next one, unless ``server.route(method, path, answer)``
claimed its path: a route answers by request, for clients that send several at once.
Bodies are written in chunks at the given byte offsets (offsets inside multi-byte
characters included) with an optional delay.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The provider wire fixtures the tests replay, carried in the repository (tests/fixtures/README.md).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"


def fixtures_dir() -> Path:
    """The provider fixtures folder (``tests/fixtures/providers``)."""
    return FIXTURES


@dataclass
class ScriptedResponse:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    split_at: list[int] = field(default_factory=list)  # byte offsets to cut chunks at
    chunk_delay_s: float = 0.0
    hang_after_s: float | None = None  # keep the connection open silently this long at the end
    # Declared content-length when it should differ from the body (a larger value makes the
    # client see the connection drop mid-body).
    content_length: int | None = None
    headers_delay_s: float = 0.0  # wait this long before the status line (a server that hangs)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float = field(default_factory=time.monotonic)  # when its body had been read

    def json(self) -> Any:
        return json.loads(self.body)


def load_fixture(provider: str, name: str) -> tuple[dict[str, Any], bytes]:
    """(meta, body bytes) of ``fixtures/<provider>/<name>``; body from .sse, .ndjson or .json."""
    folder = fixtures_dir() / provider
    meta = json.loads((folder / f"{name}.meta.json").read_text(encoding="utf-8"))
    for suffix in (".sse", ".ndjson", ".json"):
        path = folder / f"{name}{suffix}"
        if path.exists():
            return meta, path.read_bytes()
    raise FileNotFoundError(f"no body for fixture {provider}/{name}")


def fixture_request(provider: str, name: str) -> Any:
    return json.loads((fixtures_dir() / provider / f"{name}.request.json").read_text(encoding="utf-8"))


class ReplayServer:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: serve HTTPS with this server-side context (the URL then names ``localhost``)."""
        self.responses: deque[ScriptedResponse] = deque()
        self.requests: list[RecordedRequest] = []
        self.routes: dict[tuple[str, str], Callable[[RecordedRequest], ScriptedResponse]] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                recorded = RecordedRequest(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with server._lock:
                    server.requests.append(recorded)
                    answer = server.routes.get((self.command, self.path))
                    scripted = server.responses.popleft() if answer is None and server.responses else None
                if answer is not None:
                    scripted = answer(recorded)
                if scripted is None:
                    scripted = ScriptedResponse(
                        status=500, body=b'{"error":{"message":"replay server: no response queued"}}'
                    )
                if scripted.headers_delay_s:
                    time.sleep(scripted.headers_delay_s)
                self.send_response(scripted.status)
                for key, value in scripted.headers.items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("connection", "close")
                length = len(scripted.body) if scripted.content_length is None else scripted.content_length
                self.send_header("content-length", str(length))
                self.end_headers()
                cuts = sorted({c for c in scripted.split_at if 0 < c < len(scripted.body)})
                start = 0
                try:
                    for cut in [*cuts, len(scripted.body)]:
                        self.wfile.write(scripted.body[start:cut])
                        self.wfile.flush()
                        start = cut
                        if scripted.chunk_delay_s:
                            time.sleep(scripted.chunk_delay_s)
                    if scripted.hang_after_s:
                        time.sleep(scripted.hang_after_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            do_POST = _handle
            do_GET = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._tls = tls is not None
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        # A short poll interval keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"https://localhost:{port}" if self._tls else f"http://{host}:{port}"

    def enqueue(self, response: ScriptedResponse) -> None:
        with self._lock:
            self.responses.append(response)

    def route(self, method: str, path: str, answer: Callable[[RecordedRequest], ScriptedResponse]) -> None:
        """Answer every ``method path`` request with ``answer(request)`` instead of the queue."""
        with self._lock:
            self.routes[(method.upper(), path)] = answer

    def enqueue_fixture(
        self, provider: str, name: str, *, split_every: int | None = None, chunk_delay_s: float = 0.0
    ) -> dict[str, Any]:
        """Queue a fixture's response, cut at its UTF-8 split offsets (and every N bytes).

        A ``chunk_delay_s`` pause after each chunk keeps the kernel from coalescing them,
        so the client really receives the cuts as separate reads.
        """
        meta, body = load_fixture(provider, name)
        cuts = list(meta.get("replay", {}).get("utf8_split_offsets", []))
        if split_every:
            cuts += list(range(split_every, len(body), split_every))
        response = meta.get("response", {})
        self.enqueue(
            ScriptedResponse(
                status=int(response.get("status", 200)),
                headers=dict(response.get("headers", {})),
                body=body,
                split_at=cuts,
                chunk_delay_s=chunk_delay_s,
            )
        )
        return meta

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
