"""``session/resume`` of a long history, answered in pieces while it is encoded (``framing.Pieces``),
through a real daemon on each transport: stdio, a Unix socket and a WebSocket. The answer is one
line (on a WebSocket: made whole, one text frame) whose bytes are exactly the whole answer's
encoding, also for a client that reads slowly; what follows it comes after it, never inside; a
client that goes away in the middle of it costs the daemon nothing; and one that stops reading in
the middle of it is dropped once what waits for it passes its bound, while the others go on."""

import os
import socket
import subprocess
from pathlib import Path

import anyio
import msgspec
import pytest

from daemon.conversation import ChatMessage, Part
from daemon.jsonrpc.client import daemon_command
from daemon.jsonrpc.framing import PER_PIECE
from daemon.store import SessionRow, Store
from protocol import methods as m
from protocol.objects import Usage
from tests.support.harness import subprocess_env
from tests.support.listening import listening_daemon, read_token, short_socket_dir, unix_client, ws_client

pytestmark = pytest.mark.anyio

SESSION = "ses_long_history"
MESSAGES = 4 * PER_PIECE + 37  # five pieces of each list
# Text the pieces must carry as it is: quotes, a backslash, NUL (the mark the answer is cut at,
# escaped inside a string), U+2028, a character outside the BMP, and JSON-looking text.
AWKWARD = 'say "hi" \\ \x00 \u2028 \U0001f600 ],"items":[{"kind":"message"}'


class Answer(msgspec.Struct):
    jsonrpc: str
    id: int
    result: m.SessionResumeResult


def _seed(home: Path) -> list[str]:
    """A session of ``MESSAGES`` messages (text, thinking, tool calls and results); its message ids."""
    ids = []
    with Store(home / "sessions.db") as store:
        store.create_session(SessionRow(id=SESSION, cwd=str(home), model_id="mock/echo", thinking_level="medium"))
        for seq in range(1, MESSAGES + 1):
            message_id = f"msg_{seq:05d}"
            ids.append(message_id)
            if seq % 2:
                parts = [Part(type="text", text=f"{seq} {AWKWARD}")]
                store.save_message(
                    ChatMessage(message_id=message_id, session_id=SESSION, seq=seq, role="user", parts=parts)
                )
                continue
            parts = [
                Part(type="thinking", text=f"thinking {seq} {AWKWARD}", provider="anthropic", model="m", signature="s"),
                Part(type="text", text="answer " * 600),  # ~4 MB in all: more than a pipe or socket holds
                Part(type="tool_call", call_id=f"c{seq}", name="read_file", arguments={"path": AWKWARD, "n": [seq]}),
            ]
            store.save_message(
                ChatMessage(
                    message_id=message_id,
                    session_id=SESSION,
                    seq=seq,
                    role="assistant",
                    parts=parts,
                    model_id="mock/echo",
                    stop_reason="tool_use",
                    usage=Usage(input_tokens=seq, output_tokens=7),
                )
            )
    return ids


def _check_answer(line: bytes, request_id: int, ids: list[str]) -> None:
    """``line`` is the whole answer: it decodes as one, and encoding that gives the same bytes back."""
    answer = msgspec.json.decode(line, type=Answer)
    assert answer.id == request_id
    assert [message.message_id for message in answer.result.messages] == ids
    assert [item.message_id for item in answer.result.items] == ids  # type: ignore[union-attr]
    assert answer.result.messages[0].content[0].text.endswith(AWKWARD)  # type: ignore[union-attr]
    assert msgspec.json.encode(answer) == line, "exactly the whole answer's bytes"


def _request(request_id: int, method: str, params: dict | None = None) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}) + b"\n"


INITIALIZE = _request(1, "initialize", {"protocol_version": 1})
RESUME = _request(2, "session/resume", {"session_id": SESSION})
PING = _request(3, "ping")


async def _slowly_with_a_ping_midway(send, receive) -> list[bytes]:
    """Ask for the long history and read three lines 16 KiB at a time, pausing every 8 reads (the
    daemon's pipe or socket fills and it waits for the client); once part of the long answer is in,
    ask for a ping, whose answer must come after the long one, not inside it."""
    await send(INITIALIZE + RESUME)
    buffer = bytearray()
    reads = 0
    pinged = False
    with anyio.fail_after(60):
        while buffer.count(b"\n") < 3:
            buffer += await receive(1 << 14)
            reads += 1
            if reads % 8 == 0:
                await anyio.sleep(0.002)
            if not pinged and len(buffer) - buffer.find(b"\n") > 256 << 10:
                await send(PING)
                pinged = True
    return bytes(buffer).split(b"\n")[:3]


async def test_on_stdio_a_slow_client_gets_the_long_answer_as_one_line_then_the_next(home, anyio_backend):
    ids = _seed(home)
    env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend})}
    async with await anyio.open_process(daemon_command(home, (), "info"), env=env) as process:
        assert process.stdin is not None and process.stdout is not None
        lines = await _slowly_with_a_ping_midway(process.stdin.send, process.stdout.receive)
        await process.stdin.aclose()
        with anyio.fail_after(30):
            assert await process.wait() == 0
    assert msgspec.json.decode(lines[0])["id"] == 1
    _check_answer(lines[1], 2, ids)
    assert msgspec.json.decode(lines[2]) == {"jsonrpc": "2.0", "id": 3, "result": {}}


def _spawn_on_pipes(home: Path, backend: str, stderr: Path) -> subprocess.Popen[bytes]:
    """``ponder serve`` on plain pipes: the client's end of stdout can really be closed midway."""
    env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend})}
    with open(stderr, "wb") as errors:
        return subprocess.Popen(
            daemon_command(home, (), "info"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env
        )


async def test_on_stdio_a_client_gone_in_the_middle_of_the_answer_costs_the_daemon_nothing(home, anyio_backend):
    _seed(home)
    stderr = home.parent / "stderr.log"
    process = _spawn_on_pipes(home, anyio_backend, stderr)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(INITIALIZE + RESUME)
        process.stdin.flush()
        got = 0
        with anyio.fail_after(60):
            while got < 1 << 20:  # the first megabyte of the answer, then the client goes away
                got += len(await anyio.to_thread.run_sync(os.read, process.stdout.fileno(), 1 << 16))
        process.stdout.close()
        process.stdin.write(PING)  # it goes on reading its input (its answers reach no one)
        process.stdin.flush()
        await anyio.sleep(0.5)
        assert process.poll() is None, "the daemon is still up"
        process.stdin.close()
        assert await anyio.to_thread.run_sync(process.wait, 30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in await anyio.Path(stderr).read_text(errors="replace")


def _raw_unix(path: Path, receive_buffer: int | None = None) -> socket.socket:
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if receive_buffer is not None:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    raw.connect(str(path))
    return raw


async def test_on_a_unix_socket_the_answer_is_one_line_for_a_slow_client_and_one_gone_midway(home, anyio_backend):
    ids = _seed(home)
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend) as daemon:
        # A client that leaves after the first megabyte of its answer.
        gone = _raw_unix(path)
        gone.sendall(INITIALIZE + RESUME)
        with anyio.fail_after(60):
            got = 0
            while got < 1 << 20:
                got += len(await anyio.to_thread.run_sync(gone.recv, 1 << 16))
        gone.close()
        # A slow one: small reads with pauses; the answer, then the ping's.
        stream = await anyio.connect_unix(path)
        async with stream:
            lines = await _slowly_with_a_ping_midway(stream.send, stream.receive)
        assert msgspec.json.decode(lines[0])["id"] == 1
        _check_answer(lines[1], 2, ids)
        assert msgspec.json.decode(lines[2]) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        # And one more, at full speed, through the project's own client.
        async with unix_client(path) as client:
            client.on_message = None
            resumed = await client.request("session/resume", {"session_id": SESSION})
            assert [message["message_id"] for message in resumed["messages"]] == ids
        assert daemon.process.poll() is None
    assert "Traceback" not in daemon.stderr()


async def test_a_unix_client_that_stops_reading_mid_answer_is_dropped_and_the_others_go_on(home, anyio_backend):
    _seed(home)
    # Above what a reading client's turns queue at once; below a piece of the long answer (~600 KB).
    (home / "config.toml").write_text(f"[serve]\nclient_queue_bytes = {256 << 10}\n")
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend) as daemon:
        log_path = home / "logs" / "ponder.log"
        async with unix_client(path) as driver:
            driver.on_message = None
            session_id = (await driver.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]
            # It asks for the long history and follows the driver's session too, then never reads.
            stuck = _raw_unix(path, receive_buffer=4096)
            stuck.sendall(INITIALIZE + RESUME)
            stuck.sendall(_request(4, "session/subscribe", {"session_id": session_id}))
            await anyio.sleep(0.5)
            with anyio.fail_after(120):
                # Each turn's events queue for the stuck client behind the answer it is not reading.
                for i in range(20):
                    turn = await driver.request("session/prompt", {"session_id": session_id, "text": f"turn {i}"})
                    assert (await driver.collect_turn(turn["turn_id"]))[-1]["stop_reason"] == "end_turn"
                    if "does not read its messages" in log_path.read_text():
                        break
                turn = await driver.request("session/prompt", {"session_id": session_id, "text": "after"})
                assert (await driver.collect_turn(turn["turn_id"]))[-1]["stop_reason"] == "end_turn"
        assert log_path.read_text().count("does not read its messages") == 2, "dropped (and closed): it alone"
        # Dropped: what reached it ends with the end of the stream, not with a whole answer.
        stuck.settimeout(10)
        received = bytearray()
        while chunk := await anyio.to_thread.run_sync(stuck.recv, 1 << 16):
            received += chunk
        stuck.close()
        *whole, partial = bytes(received).split(b"\n")
        assert sorted(msgspec.json.decode(line)["id"] for line in whole) == [1, 4], "initialize and subscribe"
        assert partial.startswith(b'{"jsonrpc":"2.0","id":2,"result":'), "and part of the long answer, not all of it"
        with pytest.raises(msgspec.DecodeError):
            msgspec.json.decode(partial)
        assert daemon.process.poll() is None
    assert "Traceback" not in daemon.stderr()


async def test_on_a_websocket_the_answer_is_made_whole_and_goes_as_one_text_frame(home, anyio_backend):
    from websockets.sync.client import connect

    ids = _seed(home)
    with listening_daemon(home, "ws://127.0.0.1:0", backend=anyio_backend) as daemon:
        headers = {"Authorization": f"Bearer {read_token(home)}"}

        def exchange() -> tuple[list[str], int]:
            with connect(daemon.endpoint, additional_headers=headers, max_size=None) as connection:
                connection.send(INITIALIZE.decode())
                messages = [str(connection.recv())]
                connection.send(RESUME.decode())
                fragments = [str(fragment) for fragment in connection.recv_streaming()]  # its frames
                connection.send(PING.decode())
                messages += ["".join(fragments), str(connection.recv())]
                return messages, len(fragments)

        def leave_without_reading() -> None:
            with connect(daemon.endpoint, additional_headers=headers, max_size=None) as connection:
                connection.send(INITIALIZE.decode())
                connection.recv()
                connection.send(RESUME.decode())

        await anyio.to_thread.run_sync(leave_without_reading)
        messages, frames = await anyio.to_thread.run_sync(exchange)
        assert frames == 1, "one JSON-RPC message, one text frame (PROTOCOL.md)"
        assert msgspec.json.decode(messages[0])["id"] == 1
        _check_answer(messages[1].encode(), 2, ids)
        assert msgspec.json.decode(messages[2]) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        # The project's own WebSocket client gets it whole too.
        async with ws_client(daemon.endpoint, read_token(home)) as client:
            client.on_message = None
            resumed = await client.request("session/resume", {"session_id": SESSION})
            assert [message["message_id"] for message in resumed["messages"]] == ids
        assert daemon.process.poll() is None
    assert "Traceback" not in daemon.stderr()
