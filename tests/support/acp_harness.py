"""Run ``ponder acp`` in-process over memory streams for a test, every message validated.

The client is the reference JSON-RPC client (``daemon.jsonrpc.client.RpcClient``): ACP is plain
JSON-RPC, so it can speak it; ``session/update`` notifications queue on
``client.notifications``. Every message the daemon writes is checked against the
vendored ACP schema before the client sees it.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from daemon.acp import serve_acp
from daemon.config.settings import load_config
from daemon.jsonrpc.client import RequestHandler, RpcClient, connect_memory
from daemon.server import Daemon
from tests.support.acp_wire import validate_agent_message


async def acp_initialize(client: RpcClient) -> dict[str, Any]:
    return await client.request(
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
            "clientInfo": {"name": "tests", "version": "0"},
        },
    )


@asynccontextmanager
async def acp_daemon(
    home: Path,
    *,
    env: dict[str, str] | None = None,
    on_request: RequestHandler | None = None,
    log: list[Any] | None = None,
) -> AsyncIterator[tuple[RpcClient, Daemon]]:
    """Yield an initialized client and the daemon; ``log`` collects every message ponder wrote."""
    config = load_config(home, env={"PONDER_MOCK_DELAY_MS": "0", "OLLAMA_HOST": "http://127.0.0.1:9", **(env or {})})
    to_daemon, daemon_in = anyio.create_memory_object_stream[Any](1000)
    daemon_out, from_daemon = anyio.create_memory_object_stream[bytes](100_000)
    ready: list[Daemon] = []
    stopped = anyio.Event()

    async def run_daemon() -> None:
        async with daemon_out:
            await serve_acp(config, daemon_in, daemon_out, on_ready=ready.append)
        stopped.set()

    def on_message(message: Any, method_of_id: dict[Any, str]) -> None:
        validate_agent_message(message, method_of_id)
        if log is not None:
            log.append(message)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_daemon)
        async with connect_memory(to_daemon, from_daemon) as client:
            client.on_message = on_message
            client.on_request = on_request
            client.to_daemon = to_daemon  # type: ignore[attr-defined]
            await acp_initialize(client)
            yield client, ready[0]
            await to_daemon.aclose()
            with anyio.fail_after(10):
                await stopped.wait()


def drain(client: RpcClient) -> list[tuple[str, Any]]:
    """The notifications received so far (all of a prompt's updates, once it was answered)."""
    out: list[tuple[str, Any]] = []
    while True:
        try:
            out.append(client.notifications.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return out


def updates(notifications: list[tuple[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    """The ``update`` objects of ``session/update`` notifications (of one ``sessionUpdate`` kind)."""
    found = [params["update"] for method, params in notifications if method == "session/update"]
    return [u for u in found if kind is None or u["sessionUpdate"] == kind]


def text_by_message(items: list[dict[str, Any]]) -> dict[str, str]:
    """Chunks joined per ``messageId``, in order of first appearance."""
    joined: dict[str, str] = {}
    for update in items:
        joined[update["messageId"]] = joined.get(update["messageId"], "") + update["content"]["text"]
    return joined
