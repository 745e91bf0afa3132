"""``ponder serve --listen ws://127.0.0.1:PORT`` as a real subprocess, reached with a real
third-party WebSocket client (``websockets``): auth before anything else (401, 403), two clients
on one session, catch-up after a reconnect, bad frames, 10,000 wrong tokens."""

import os
import socket
import stat
import subprocess
import sys
from contextlib import aclosing

import anyio
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from daemon.jsonrpc.client import RpcError
from tests.support.harness import subprocess_env
from tests.support.listening import listening_daemon, read_token, ws_client

pytestmark = pytest.mark.anyio

LONG = {"model_id": "mock/thinker", "thinking_level": "max"}


def _status_of(url, headers=None, origin=None) -> int:
    try:
        with connect(url, additional_headers=headers or {}, origin=origin, open_timeout=10):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def _raw_handshake(port: int, host: str, token: str) -> bytes:
    request = (
        f"GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(request)
        return raw.recv(4096)


async def test_auth_comes_first_and_10000_wrong_tokens_change_nothing(home, anyio_backend):
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend) as daemon:
        url = daemon.endpoint
        port = int(url.rsplit(":", 1)[1])
        token = read_token(home)
        assert len(token) >= 43  # 256 bits, URL-safe base64
        assert stat.S_IMODE(os.stat(home / "serve.token").st_mode) == 0o600
        good = {"Authorization": f"Bearer {token}"}
        assert await anyio.to_thread.run_sync(_status_of, url) == 401
        assert await anyio.to_thread.run_sync(lambda: _status_of(url, {"Authorization": "Bearer nope"})) == 401
        assert await anyio.to_thread.run_sync(lambda: _status_of(url, good, "https://evil.example")) == 403
        assert (await anyio.to_thread.run_sync(_raw_handshake, port, "evil.example", token)).startswith(b"HTTP/1.1 403")
        assert (await anyio.to_thread.run_sync(_raw_handshake, port, f"localhost:{port}", token)).startswith(
            b"HTTP/1.1 101"
        )

        async with ws_client(url, token) as steady:
            wrong = 0

            async def guess(n: int) -> None:
                nonlocal wrong
                for i in range(n):
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                    async with stream:
                        await stream.send(
                            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                            b"Authorization: Bearer " + token[:-4].encode() + f"{i:04d}".encode() + b"\r\n\r\n"
                        )
                        answer = await stream.receive()
                        assert answer.startswith(b"HTTP/1.1 401"), answer[:100]
                        wrong += 1

            with anyio.fail_after(300):
                async with anyio.create_task_group() as tg:
                    for _ in range(20):
                        tg.start_soon(guess, 500)
            assert wrong == 10_000
            assert await steady.request("ping") == {}
        assert daemon.process.poll() is None


async def test_two_websocket_clients_share_a_session_and_catch_up(home, anyio_backend):
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "5"}) as d:
        token = read_token(home)
        async with ws_client(d.endpoint, token, name="driver") as driver:
            session_id = (await driver.request("session/start", LONG))["session"]["session_id"]
            async with ws_client(d.endpoint, token, role="observer") as watcher:
                await watcher.request("session/subscribe", {"session_id": session_id})
                with pytest.raises(RpcError) as refused:
                    await watcher.request("session/cancel", {"session_id": session_id})
                assert refused.value.code == -32008
                turn = await driver.request("session/prompt", {"session_id": session_id, "text": "Think long"})
                seen = []
                async with aclosing(watcher.events(turn["turn_id"])) as events:
                    async for event in events:
                        seen.append(event)
                        if len(seen) == 15:
                            break
            # The watcher left; it comes back and catches up from its last seq.
            async with ws_client(d.endpoint, token, role="observer") as back:
                answer = await back.request(
                    "session/subscribe", {"session_id": session_id, "after_seq": seen[-1]["seq"]}
                )
                assert answer["replay"] in ("events", "none")
                with anyio.fail_after(30):
                    rest = await back.collect_turn(turn["turn_id"])
            with anyio.fail_after(30):
                driven = await driver.collect_turn(turn["turn_id"])
        seqs = [e["seq"] for e in seen + rest]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "no gap, no duplicate across the reconnect"
        assert [e["seq"] for e in driven] == seqs, "driver and watcher saw the same events"
        assert rest[-1]["type"] == "turn_end" and rest[-1]["stop_reason"] == "end_turn"


async def test_bad_frames_are_answered_and_the_connection_stays(home, anyio_backend):
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend, args=("--max-line-bytes", "1048576")) as d:
        token = read_token(home)

        def exchange() -> list[str]:
            answers = []
            with connect(d.endpoint, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
                ws.send(b"\x00\x01binary")
                answers.append(ws.recv(timeout=10))
                ws.send("{not json")
                answers.append(ws.recv(timeout=10))
                ws.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + "x" * 3_000_000 + '"}}')
                answers.append(ws.recv(timeout=30))
                ws.send('{"jsonrpc":"2.0","id":2,"method":"ping"}')
                answers.append(ws.recv(timeout=10))
            return answers

        import json

        answers = [json.loads(a) for a in await anyio.to_thread.run_sync(exchange)]
        assert answers[0]["error"]["code"] == -32600 and answers[0]["error"]["data"]["reason"] == "binary_frame"
        assert answers[1]["error"]["code"] == -32700
        assert answers[2]["error"]["code"] == -32600 and answers[2]["error"]["data"]["reason"] == "line_too_long"
        assert answers[3] == {"jsonrpc": "2.0", "id": 2, "result": {}}
        assert d.process.poll() is None


async def test_a_100_mb_frame_is_refused_without_holding_it(home, anyio_backend):
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend) as d:
        token = read_token(home)

        def huge() -> str:
            with connect(d.endpoint, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
                ws.send("[" + " " * (100 * 1024 * 1024) + "]")
                return ws.recv(timeout=120)

        import json

        answer = json.loads(await anyio.to_thread.run_sync(huge))
        assert answer["error"]["data"]["reason"] == "line_too_long"
        async with ws_client(d.endpoint, token) as client:
            assert await client.request("ping") == {}


def test_listen_mistakes_are_usage_errors(home):
    env = {**os.environ, **subprocess_env(home)}

    def serve(*args):
        return subprocess.run(
            [sys.executable, "-m", "daemon", "serve", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    off_loopback = serve("--listen", "ws://0.0.0.0:0")
    assert off_loopback.returncode == 2 and "--allow-remote" in off_loopback.stderr
    plain_remote = serve("--listen", "ws://0.0.0.0:0", "--allow-remote")
    assert plain_remote.returncode == 2 and "wss://" in plain_remote.stderr
    nonsense = serve("--listen", "tcp://127.0.0.1:1")
    assert nonsense.returncode == 2 and "unix[:PATH]" in nonsense.stderr
