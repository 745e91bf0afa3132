"""A real ``ponder acp`` subprocess driven by the reference JSON-RPC client, its wire recorded.

ACP is plain JSON-RPC, so ``daemon.jsonrpc.client.RpcClient`` speaks it; ``wire`` holds every
message the daemon wrote, in the order it wrote them (tests check ordering on it), each one
validated against the vendored ACP schema as it arrives (``tests.support.acp_wire``).
"""

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from daemon.jsonrpc.client import RequestHandler, RpcClient, spawn_daemon
from tests.support.acp_wire import validate_agent_message
from tests.support.harness import subprocess_env

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Wire:
    """What the daemon wrote, in order, and what did not fit ACP's schema."""

    messages: list[Any] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def record(self, message: Any, method_of_id: dict[Any, str]) -> None:
        self.messages.append(message)
        try:
            validate_agent_message(message, method_of_id)
        except AssertionError as exc:
            self.failures.append(str(exc))

    def updates(self, session_id: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """The ``update`` of every ``session/update`` (of one session, of one kind), in wire order."""
        return [
            m["params"]["update"]
            for m in self.messages
            if isinstance(m, dict)
            and m.get("method") == "session/update"
            and (session_id is None or m["params"]["sessionId"] == session_id)
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)
        ]


def initialize_params(fs: dict[str, bool] | None = None) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"fs": fs or {"readTextFile": False, "writeTextFile": False}}
    return {"protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": {"name": "tests", "version": "0"}}


def start_acp(home: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m daemon --home HOME acp`` with the test environment (started without a loop,
    as ``daemon.jsonrpc.spawn.start_daemon`` starts ``serve``; ``spawn_daemon`` then connects)."""
    return subprocess.Popen(
        [sys.executable, "-m", "daemon", "--home", str(home), "--log-level", "warning", "acp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, **subprocess_env(home, env)},
        cwd=REPO,
    )


@asynccontextmanager
async def acp_subprocess(
    home: Path,
    backend: str,
    *,
    fs: dict[str, bool] | None = None,
    on_request: RequestHandler | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[tuple[RpcClient, Wire, dict[str, Any]]]:
    """``ponder acp`` initialized with ``fs`` as the client's file-system capabilities; yields
    the client, the recorded wire and the ``initialize`` answer. The daemon must exit 0 on end
    of input and every message must fit the schema."""
    popen = start_acp(home, {"PONDER_ASYNC_BACKEND": backend, **(env or {})})
    wire = Wire()
    async with spawn_daemon(started=popen, on_request=on_request) as client:
        client.on_message = wire.record
        init = await client.request("initialize", initialize_params(fs))
        yield client, wire, init
    with anyio.fail_after(10):
        while popen.poll() is None:
            await anyio.sleep(0.05)
    assert popen.returncode == 0
    assert wire.failures == []
