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
from tests.support.listening import burst_to_two_readers, listening_daemon, read_token, ws_client

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

            # 10,000 guesses on one backend (the issue's figure); the same handshake code on the
            # other gets 1,000: each guess is a connection, ~1 ms of the daemon's CPU.
            guesses = 10_000 if anyio_backend == "asyncio" else 1_000
            with anyio.fail_after(300):
                async with anyio.create_task_group() as tg:
                    for _ in range(20):
                        tg.start_soon(guess, guesses // 20)
            assert wrong == guesses
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


class _Attached:
    """A ``ponder attach`` subprocess, driven line by line (its stdout read on a worker thread)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daemon", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )

    async def send(self, message: dict) -> None:
        import json

        assert self.process.stdin is not None
        await anyio.to_thread.run_sync(self.process.stdin.write, (json.dumps(message) + "\n").encode())
        await anyio.to_thread.run_sync(self.process.stdin.flush)

    async def receive(self) -> dict:
        import json

        assert self.process.stdout is not None
        with anyio.fail_after(30):
            line = await anyio.to_thread.run_sync(self.process.stdout.readline, abandon_on_cancel=True)
        assert line, (
            "ponder attach ended early: " + (self.process.stderr.read() if self.process.stderr else b"").decode()
        )
        return json.loads(line)

    async def answer(self, request_id: int) -> dict:
        while True:
            message = await self.receive()
            if message.get("id") == request_id and "method" not in message:
                return message


def _attach_once(args: list[str], env: dict[str, str], lines: list[dict]) -> subprocess.CompletedProcess[str]:
    import json

    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


async def test_ponder_attach_url_relays_stdio_and_says_why_it_is_refused(home, anyio_backend, tmp_path):
    import json

    env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend})}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend) as d:
        url = d.endpoint
        # The home's token, found by itself; a turn's events come through, and a second client sees them too.
        attached = _Attached(["attach", "--url", url], env)
        try:
            await attached.send({**initialize, "params": {"protocol_version": 1, "client_info": {"name": "relay"}}})
            assert (await attached.answer(1))["result"]["capabilities"]["transport"]["kind"] == "websocket"
            await attached.send(
                {"jsonrpc": "2.0", "id": 2, "method": "session/start", "params": {"model_id": "mock/echo"}}
            )
            session_id = (await attached.answer(2))["result"]["session"]["session_id"]
            async with ws_client(url, read_token(home), role="observer") as watcher:
                await watcher.request("session/subscribe", {"session_id": session_id})
                prompt = {"session_id": session_id, "text": "hello over the relay"}
                await attached.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt})
                relayed = []
                while not relayed or relayed[-1].get("type") != "turn_end":
                    message = await attached.receive()
                    if message.get("method") == "agent/event":
                        relayed.append(message["params"])
                with anyio.fail_after(30):
                    watched = await watcher.collect_turn(relayed[0]["turn_id"])
            assert relayed[-1]["stop_reason"] == "end_turn"
            assert [e["seq"] for e in watched] == [e["seq"] for e in relayed]
            # The end of stdin: the relay's last request is answered, then it exits 0.
            await attached.send(ping | {"id": 4})
            assert attached.process.stdin is not None
            attached.process.stdin.close()
            with anyio.fail_after(30):
                code = await anyio.to_thread.run_sync(attached.process.wait)
            assert code == 0
            assert attached.process.stdout is not None
            rest = [json.loads(line) for line in attached.process.stdout.read().splitlines()]
            assert {"jsonrpc": "2.0", "id": 4, "result": {}} in rest
        finally:
            if attached.process.poll() is None:
                attached.process.kill()
            attached.process.wait()
            for pipe in (attached.process.stdin, attached.process.stdout, attached.process.stderr):
                if pipe is not None:
                    pipe.close()

        # From another home (no serve.token there): the token from a file, or from the environment.
        other = tmp_path / "elsewhere"
        other.mkdir()
        token_file = tmp_path / "token"
        token_file.write_text(read_token(home) + "\n")
        for extra, more_env in (
            (["--token-file", str(token_file)], {}),
            ([], {"PONDER_SERVE_TOKEN": read_token(home)}),
        ):
            done = await anyio.to_thread.run_sync(
                _attach_once,
                ["--home", str(other), "attach", "--url", url, *extra],
                {**env, **more_env},
                [initialize, ping],
            )
            assert done.returncode == 0, done.stderr
            answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines()) if "id" in m}
            assert answers[2]["result"] == {}

        # Refusals: no token, a wrong one (401), a Host the daemon does not serve (403).
        none = await anyio.to_thread.run_sync(_attach_once, ["--home", str(other), "attach", "--url", url], env, [ping])
        assert none.returncode == 1 and "(401)" in none.stderr and "no token was found" in none.stderr, none.stderr
        assert not none.stdout
        wrong = await anyio.to_thread.run_sync(
            _attach_once, ["attach", "--url", url], {**env, "PONDER_SERVE_TOKEN": "guess"}, [ping]
        )
        assert wrong.returncode == 1 and "refused the token (401)" in wrong.stderr, wrong.stderr
        # 127.1 reaches 127.0.0.1, but it is not a Host name the daemon takes for loopback.
        odd_host = url.replace("127.0.0.1", "127.1")
        forbidden = await anyio.to_thread.run_sync(_attach_once, ["attach", "--url", odd_host], env, [ping])
        assert forbidden.returncode == 1 and "refused the connection (403)" in forbidden.stderr, forbidden.stderr
        assert d.process.poll() is None
    gone = await anyio.to_thread.run_sync(_attach_once, ["attach", "--url", url], env, [ping])
    assert gone.returncode == 1 and "cannot reach a daemon" in gone.stderr, gone.stderr


async def test_a_websocket_client_that_never_reads_is_dropped_and_the_others_go_on(home, anyio_backend):
    env = {"PONDER_MOCK_DELAY_MS": "0"}
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend, env=env) as d:
        token = read_token(home)
        port = int(d.endpoint.rsplit(":", 1)[1])
        async with ws_client(d.endpoint, token, name="driver") as driver:
            session_id = (await driver.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]
            # A real WebSocket client that subscribes, then never reads again: a small receive
            # buffer, and the library stops reading its socket once a message is waiting.
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.connect(("127.0.0.1", port))
            stuck = await anyio.to_thread.run_sync(
                lambda: connect(
                    d.endpoint, sock=raw, additional_headers={"Authorization": f"Bearer {token}"}, max_queue=1
                ).__enter__()
            )
            try:
                stuck.send('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}')
                stuck.send(
                    '{"jsonrpc":"2.0","id":2,"method":"session/subscribe","params":{"session_id":"' + session_id + '"}}'
                )
                await anyio.sleep(0.3)
                # Each turn echoes 1 MB in 200 deltas (some MB on the wire with its ends): the
                # loopback socket's buffers (a few MB) fill within a few turns, then what waits for
                # the stuck client passes its bound (4 MiB). The driver reads every turn meanwhile.
                log_path = home / "logs" / "ponder.log"
                turns = 0
                with anyio.fail_after(300):
                    while "does not read its messages" not in log_path.read_text():
                        assert turns < 60, "the client that never reads was not dropped"
                        text = f"{turns} " + ("y" * 5000 + " ") * 200
                        turn = await driver.request("session/prompt", {"session_id": session_id, "text": text})
                        events = await driver.collect_turn(turn["turn_id"])
                        assert events[-1]["stop_reason"] == "end_turn"
                        turns += 1
                    for _ in range(2):  # and the turns after it go on as before
                        turn = await driver.request("session/prompt", {"session_id": session_id, "text": "after"})
                        assert (await driver.collect_turn(turn["turn_id"]))[-1]["stop_reason"] == "end_turn"
                log = log_path.read_text()
                assert log.count("does not read its messages") == 2  # dropping it, then its connection closed
                assert "connection c2 closed: the client does not read its messages" in log
                # What reached it, then the end of the connection (a close frame, if it got through).
                from websockets.exceptions import ConnectionClosed

                def drain() -> int:
                    received = 0
                    try:
                        while True:
                            stuck.recv(timeout=20)
                            received += 1
                    except ConnectionClosed:
                        return received

                received = await anyio.to_thread.run_sync(drain)
                assert received < turns * 205
            finally:
                await anyio.to_thread.run_sync(stuck.close)
            assert await driver.request("ping") == {}
        assert d.process.poll() is None


async def test_a_burst_longer_than_4096_messages_reaches_every_reading_websocket_client(home, anyio_backend):
    env = {"PONDER_MOCK_DELAY_MS": "0"}
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend, env=env) as d:
        token = read_token(home)
        async with ws_client(d.endpoint, token, name="driver") as driver, ws_client(d.endpoint, token) as watcher:
            await burst_to_two_readers(driver, watcher)
        assert "does not read its messages" not in (home / "logs" / "ponder.log").read_text()
        assert d.process.poll() is None


async def test_500_websocket_connections_opened_and_dropped_disturb_no_client(home, anyio_backend):
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend) as d:
        token = read_token(home)
        port = int(d.endpoint.rsplit(":", 1)[1])
        upgrade = (
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n\r\n"
        )
        async with ws_client(d.endpoint, token) as steady:
            session_id = (await steady.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]

            async def churn(start: int) -> None:
                for i in range(start, 500, 10):
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                    async with stream:
                        if i % 4 == 0:
                            await stream.send(upgrade[:40])  # gone in the middle of the handshake
                        elif i % 4 == 1:
                            await stream.send(b"\x16\x03\x01 not http at all\r\n\r\n")
                        elif i % 4 >= 2:
                            await stream.send(upgrade)
                            assert (await stream.receive()).startswith(b"HTTP/1.1 101")
                            if i % 4 == 3:  # a masked text frame of a subscribe, then gone without a close
                                payload = (
                                    '{"jsonrpc":"2.0","id":1,"method":"session/subscribe","params":{"session_id":"'
                                    + session_id
                                    + '"}}'
                                ).encode()
                                mask = b"\x01\x02\x03\x04"
                                masked = bytes(b ^ mask[k % 4] for k, b in enumerate(payload))
                                assert len(payload) < 126
                                await stream.send(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
                                subscribed = await stream.receive()
                                assert b'"replay"' in subscribed, subscribed[:200]

            with anyio.fail_after(240):
                async with anyio.create_task_group() as tg:
                    for start in range(10):
                        tg.start_soon(churn, start)
                    turn = await steady.request("session/prompt", {"session_id": session_id, "text": "still here"})
                    events = await steady.collect_turn(turn["turn_id"])
            assert events[-1]["stop_reason"] == "end_turn"
            assert await steady.request("ping") == {}
            [row] = (await steady.request("session/list", {}))["sessions"]
            assert row["subscribers"] == 1, "the connections that went away follow nothing"
        assert d.process.poll() is None


async def test_attach_over_wss_trusts_the_certificates_ssl_cert_file_names(home, anyio_backend, tmp_path):
    import json

    import trustme

    authority = trustme.CA()
    served = tmp_path / "served.pem"  # the key and the chain, in one file
    authority.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(served))
    trusted = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(trusted))
    tls = ("--tls-cert", str(served), "--tls-key", str(served))
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    env.update(subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend}))
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    with listening_daemon(home, "wss://127.0.0.1:0", backend=anyio_backend, args=tls) as d:
        assert d.endpoint.startswith("wss://127.0.0.1:")
        done = await anyio.to_thread.run_sync(
            _attach_once, ["attach", "--url", d.endpoint], {**env, "SSL_CERT_FILE": str(trusted)}, lines
        )
        assert done.returncode == 0, done.stderr
        answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
        assert answers[1]["result"]["capabilities"]["transport"]["kind"] == "websocket"
        assert answers[2]["result"] == {}
        untrusted = await anyio.to_thread.run_sync(_attach_once, ["attach", "--url", d.endpoint], env, lines)
        assert untrusted.returncode == 1 and "cannot set up TLS" in untrusted.stderr, untrusted.stderr
        assert not untrusted.stdout
        assert d.process.poll() is None
