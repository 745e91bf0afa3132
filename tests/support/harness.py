"""Run the daemon for a test: in-process over memory streams, or as a real subprocess.

Every message the daemon writes is validated against ``schemas/protocol.json``.
Provider credentials from the developer's environment never leak into a test: the
in-process daemon sees only the environment a test passes, and subprocesses get the
provider variables blanked.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from daemon.config.settings import load_config
from daemon.jsonrpc.client import RequestHandler, RpcClient, connect_memory, spawn_daemon
from daemon.server import Daemon, serve
from tests.support.wire import validate_message

PROVIDER_VARS = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_BASE_URL",
    "DEEPSEEK_API_KEY",
    "DEEPSEEK_BASE_URL",
    "DASHSCOPE_API_KEY",
    "DASHSCOPE_BASE_URL",
    "OPENROUTER_API_KEY",
    "OPENROUTER_BASE_URL",
    "OLLAMA_HOST",
    "PONDER_HOME",
]


async def initialize(client: RpcClient, *, permission_requests: bool = False) -> dict[str, Any]:
    return await client.request(
        "initialize",
        {
            "protocol_version": 1,
            "client_info": {"name": "tests", "version": "0"},
            "capabilities": {"permission_requests": permission_requests},
        },
    )


@asynccontextmanager
async def in_memory_daemon(
    home: Path,
    *,
    env: dict[str, str] | None = None,
    permission_requests: bool = False,
    on_request: RequestHandler | None = None,
    configure: Any = None,
) -> AsyncIterator[tuple[RpcClient, Daemon]]:
    config = load_config(home, env={"PONDER_MOCK_DELAY_MS": "0", "OLLAMA_HOST": "http://127.0.0.1:9", **(env or {})})
    if configure is not None:
        configure(config)
    to_daemon, daemon_in = anyio.create_memory_object_stream[Any](1000)
    daemon_out, from_daemon = anyio.create_memory_object_stream[bytes](100_000)
    ready: list[Daemon] = []
    stopped = anyio.Event()

    async def run_daemon() -> None:
        async with daemon_out:  # like the stdio writer: output ends when the daemon does
            await serve(config, daemon_in, daemon_out, on_ready=ready.append)
        stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_daemon)
        async with connect_memory(to_daemon, from_daemon) as client:
            client.on_message = validate_message
            client.on_request = on_request
            await initialize(client, permission_requests=permission_requests)
            yield client, ready[0]
            await to_daemon.aclose()  # end of input: the daemon shuts down
            with anyio.fail_after(10):
                await stopped.wait()


def subprocess_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {var: "" for var in PROVIDER_VARS}
    env.update({"PONDER_MOCK_DELAY_MS": "0", "OLLAMA_HOST": "http://127.0.0.1:9", "PONDER_HOME": str(home)})
    env.update(extra or {})
    return env


@asynccontextmanager
async def subprocess_daemon(
    home: Path,
    *,
    env: dict[str, str] | None = None,
    backend: str = "asyncio",
    permission_requests: bool = False,
    on_request: RequestHandler | None = None,
    serve_args: tuple[str, ...] = (),
) -> AsyncIterator[RpcClient]:
    async with spawn_daemon(
        home=home,
        env=subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend, **(env or {})}),
        on_request=on_request,
        serve_args=serve_args,
    ) as client:
        client.on_message = validate_message
        await initialize(client, permission_requests=permission_requests)
        yield client


def process_of(client: RpcClient) -> anyio.abc.Process:
    assert client.process is not None, "the client has no process: it was not made by spawn_daemon"
    return client.process
