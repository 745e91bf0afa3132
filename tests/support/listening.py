"""A real ``ponder serve --listen`` subprocess for a test, and clients that connect to it over its
Unix socket (``RpcClient``s reading the socket in a task of their own)."""

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from daemon.jsonrpc.client import RpcClient
from daemon.jsonrpc.framing import LineSplitter
from tests.support.harness import subprocess_env
from tests.support.wire import validate_message


class ListeningDaemon:
    def __init__(self, process: subprocess.Popen[bytes], stderr_path: Path, endpoint: str) -> None:
        self.process = process
        self.stderr_path = stderr_path
        self.endpoint = endpoint

    @property
    def socket(self) -> Path:
        assert self.endpoint.startswith("unix:")
        return Path(self.endpoint.removeprefix("unix:"))

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def short_socket_dir() -> Path:
    """A private directory with a short path (a socket path holds about 100 bytes)."""
    return Path(tempfile.mkdtemp(prefix="p33-"))


@contextmanager
def listening_daemon(
    home: Path, listen: str, *, backend: str = "asyncio", env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> Iterator[ListeningDaemon]:
    """``ponder serve --listen LISTEN`` until it says it listens; SIGTERM (then kill) afterwards."""
    stderr_path = home.parent / f"serve-{time.monotonic_ns()}.stderr"
    full_env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend, **(env or {})})}
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "daemon", "serve", "--listen", listen, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=full_env,
        )
    daemon = ListeningDaemon(process, stderr_path, "")
    try:
        deadline = time.monotonic() + 30
        while True:
            text = daemon.stderr()
            marker = "ponder: listening on "
            if marker in text:
                daemon.endpoint = text.split(marker, 1)[1].splitlines()[0].strip()
                break
            if process.poll() is not None:
                raise AssertionError(f"ponder serve --listen exited {process.returncode}: {text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"ponder serve --listen did not start: {text}")
            time.sleep(0.05)
        yield daemon
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@asynccontextmanager
async def _driven(
    send_line: Callable[[bytes], Awaitable[None]],
    read: Callable[[RpcClient], Coroutine[Any, Any, None]],
    role: str | None,
    permission_requests: bool,
    name: str,
    initialize: bool,
) -> AsyncIterator[RpcClient]:
    """An ``RpcClient`` sending with ``send_line`` while ``read`` feeds it in a task of its own."""
    client = RpcClient(send_line)
    client.on_message = validate_message
    async with anyio.create_task_group() as tg:
        client.task_group = tg
        tg.start_soon(read, client)
        try:
            if initialize:
                capabilities: dict[str, Any] = {"permission_requests": permission_requests}
                if role is not None:
                    capabilities["role"] = role
                await client.request(
                    "initialize",
                    {"protocol_version": 1, "client_info": {"name": name}, "capabilities": capabilities},
                )
            yield client
        finally:
            client.notifications.close()
            tg.cancel_scope.cancel()


@asynccontextmanager
async def unix_client(
    path: Path,
    *,
    role: str | None = None,
    permission_requests: bool = False,
    name: str = "tests",
    initialize: bool = True,
) -> AsyncIterator[RpcClient]:
    """An ``RpcClient`` on the daemon's socket (initialized unless told not to)."""
    stream = await anyio.connect_unix(path)
    lock = anyio.Lock()

    async def send_line(line: bytes) -> None:
        async with lock:
            await stream.send(line + b"\n")

    async def read(client: RpcClient) -> None:
        splitter = LineSplitter()
        try:
            while True:
                chunk = await stream.receive()
                for line in splitter.feed(chunk):
                    assert isinstance(line, bytes)
                    await client.dispatch(line)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            client.notify_send.close()

    # Closed on the way out, a failing test's too: its socket is not left to the garbage collector.
    async with stream, _driven(send_line, read, role, permission_requests, name, initialize) as client:
        yield client


def read_token(home: Path) -> str:
    return (home / "serve.token").read_text().strip()


@asynccontextmanager
async def ws_client(
    url: str,
    token: str | None,
    *,
    role: str | None = None,
    permission_requests: bool = False,
    name: str = "tests",
    initialize: bool = True,
) -> AsyncIterator[RpcClient]:
    """An ``RpcClient`` over a real third-party WebSocket client (``websockets``' threaded one,
    driven from worker threads so that it runs under asyncio and trio alike)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    # Entered as its context manager wants (websockets warns otherwise), left with close() below.
    connection = await anyio.to_thread.run_sync(
        lambda: connect(url, additional_headers=headers, max_size=None).__enter__()
    )
    lock = anyio.Lock()

    async def send_line(line: bytes) -> None:
        async with lock:
            await anyio.to_thread.run_sync(connection.send, line.decode())

    async def read(client: RpcClient) -> None:
        try:
            while True:
                message = await anyio.to_thread.run_sync(connection.recv, abandon_on_cancel=True)
                await client.dispatch(message.encode() if isinstance(message, str) else message)
        except ConnectionClosed:
            pass
        finally:
            client.notify_send.close()

    try:
        async with _driven(send_line, read, role, permission_requests, name, initialize) as client:
            yield client
    finally:  # a failing test's connection too: not left to the garbage collector
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(connection.close)


async def burst_to_two_readers(driver: RpcClient, watcher: RpcClient, words: int = 12_000) -> None:
    """A turn of ``words`` events in a fraction of a second (mock/echo at 0 ms: a delta a word, a
    yield every 64), more than 4,096 messages, which a listening daemon's queue per client once
    held: ``driver`` prompts it, ``watcher`` subscribes; both read all along and get every event,
    in order, and stay connected. They do not check each message against the schema, so they
    read about as fast as a client in a compiled language would relative to this daemon."""
    driver.on_message = watcher.on_message = None
    session_id = (await driver.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]
    await watcher.request("session/subscribe", {"session_id": session_id})
    text = " ".join(f"w{j}" for j in range(words))
    turn = await driver.request("session/prompt", {"session_id": session_id, "text": text})
    with anyio.fail_after(120):
        seen = [await client.collect_turn(turn["turn_id"]) for client in (driver, watcher)]
    for events in seen:
        assert events[-1]["type"] == "turn_end" and events[-1]["stop_reason"] == "end_turn"
        seqs = [e["seq"] for e in events]
        assert len(seqs) > words and seqs == list(range(seqs[0], seqs[0] + len(seqs))), "whole, in order"
        assert "".join(e["delta"] for e in events if e["type"] == "text_delta").split() == text.split()
    assert seen[0] == seen[1]
    assert await watcher.request("ping") == {} and await driver.request("ping") == {}
