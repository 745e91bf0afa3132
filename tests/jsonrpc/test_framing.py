"""NDJSON framing: the splitter on its own, and a real ``ponder serve`` subprocess fed raw bytes."""

import functools
import os
import subprocess
import sys
import time

import anyio
import msgspec
import pytest

from daemon.jsonrpc.framing import BIG_MESSAGE, OVERLONG, LineSplitter, Outgoing, Written
from daemon.jsonrpc.stdio import _Drain, _pump_output, _write_all, _write_nonblocking, _writes
from tests.support.harness import subprocess_env
from tests.support.wire import validate_message


def test_splits_on_newline_only_and_tolerates_crlf():
    splitter = LineSplitter()
    text = '{"a":"x\u2028y"}\r\n\n   \n{"b":1}\n'.encode()
    assert splitter.feed(text) == ['{"a":"x\u2028y"}'.encode(), b'{"b":1}']


def test_lines_split_across_chunks_in_any_place():
    data = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n{"x":"\xc3\xa9"}\n'
    for cut in range(len(data)):
        splitter = LineSplitter()
        out = splitter.feed(data[:cut]) + splitter.feed(data[cut:]) + splitter.finish()
        assert out == [b'{"jsonrpc":"2.0","id":1,"method":"ping"}', b'{"x":"\xc3\xa9"}']


def test_overlong_line_is_discarded_without_buffering_it():
    splitter = LineSplitter(max_line_bytes=100)
    out = []
    for _ in range(50):  # 50 KiB in 1 KiB chunks, no newline yet
        out += splitter.feed(b"x" * 1024)
        assert len(splitter._buffer) <= 100
    out += splitter.feed(b"tail\n{}\n")
    assert out == [OVERLONG, b"{}"]


def test_final_line_without_newline_counts():
    splitter = LineSplitter()
    assert splitter.feed(b'{"a":1}') == []
    assert splitter.finish() == [b'{"a":1}']


def _run_daemon(tmp_path, stdin: bytes, *args: str, timeout: float = 30) -> tuple[list, subprocess.CompletedProcess]:
    home = tmp_path / "home"
    env = {**os.environ, **subprocess_env(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "daemon", "serve", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout,
    )
    messages = [msgspec.json.decode(line) for line in proc.stdout.split(b"\n") if line]
    return messages, proc


@pytest.mark.slow
def test_subprocess_answers_garbage_and_keeps_serving(tmp_path):
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}',
        b"this is not json",
        b'{"jsonrpc":"2.0","id":2,"method":"ping"',
        b"\xc3\x28",
        b"[]",
        b"17",
        b'{"id":3,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":4,"method":"what/ever"}',
        b'{"jsonrpc":"2.0","id":5,"method":"session/list","params":{"limit":"x"}}',
        b'{"jsonrpc":"2.0","method":"ping"}',
        b'[{"jsonrpc":"2.0","id":6,"method":"ping"},{"jsonrpc":"2.0","id":7,"method":"ping"}]',
        b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"note":"line\\u2028sep \xe2\x80\xa8 raw"}}\r',
        b"",
        b'{"jsonrpc":"2.0","id":9,"method":"ping"}',
    ]
    messages, proc = _run_daemon(tmp_path, b"\n".join(lines) + b"\n")
    assert proc.returncode == 0, proc.stderr.decode()
    for message in messages:
        validate_message(message, {1: "initialize", 6: "ping", 7: "ping", 8: "ping", 9: "ping"})
    singles = [m for m in messages if isinstance(m, dict)]
    codes = [m["error"]["code"] for m in singles if "error" in m]
    assert codes == [-32700, -32700, -32700, -32600, -32600, -32600, -32601, -32602]
    ok_ids = [m["id"] for m in singles if "result" in m]
    assert ok_ids == [1, 8, 9]
    [batch] = [m for m in messages if isinstance(m, list)]
    assert sorted(item["id"] for item in batch) == [6, 7]
    assert proc.stdout.endswith(b"\n") and b"\r" not in proc.stdout


@pytest.mark.slow
def test_subprocess_discards_a_40_mib_line_with_bounded_memory(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, **subprocess_env(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "serve", "--max-line-bytes", str(1 << 20)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    chunk = b"a" * (1 << 20)
    for _ in range(40):
        proc.stdin.write(chunk)
    proc.stdin.write(b'\n{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    proc.stdin.flush()
    first = msgspec.json.decode(proc.stdout.readline())
    second = msgspec.json.decode(proc.stdout.readline())
    with open(f"/proc/{proc.pid}/status") as status:
        peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0
    proc.stdout.close()
    assert first["error"]["code"] == -32600 and first["id"] is None
    assert first["error"]["data"]["reason"] == "line_too_long"
    assert second == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert peak_kib < 120 * 1024, f"peak RSS {peak_kib} KiB: the long line was buffered"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_and_eof_exit_zero(tmp_path, backend):
    import signal

    home = tmp_path / "home"
    env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}\n')
    proc.stdin.flush()
    assert msgspec.json.decode(proc.stdout.readline())["id"] == 1
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert time.monotonic() - started < 5
    proc.stdin.close()
    proc.stdout.close()
    proc.stderr.close()


def _hung_up_terminal() -> int:
    """The daemon's side of a terminal that was closed: every write fails with EIO."""
    controller, terminal = os.openpty()
    os.close(controller)
    return terminal


def test_a_batch_is_written_as_its_lines_with_large_messages_never_copied():
    big = b"B" * BIG_MESSAGE
    assert list(_writes([b"a"])) == [b"a\n"]
    assert list(_writes([b"a", b"b"])) == [b"a\nb\n"]
    assert list(_writes([b"a", big, b"b", b"c", big])) == [b"a\n", big, b"\n", b"b\nc\n", big, b"\n"]
    written = list(_writes([big, big]))
    assert written == [big, b"\n", big, b"\n"] and written[0] is big and written[2] is big, "written as it is"


def test_writing_to_a_hung_up_terminal_reports_the_client_gone_instead_of_raising():
    terminal = _hung_up_terminal()
    try:
        assert _write_all(terminal, b"{}\n") is False
        os.set_blocking(terminal, False)

        async def write_once() -> bool:
            return await _write_nonblocking(terminal, b"{}\n", _Drain())  # (a cancel scope needs the loop)

        assert anyio.run(write_once) is False
    finally:
        os.close(terminal)


@pytest.mark.anyio
async def test_the_writer_drains_everything_once_the_client_is_gone(anyio_backend):
    terminal = _hung_up_terminal()
    send, receive = anyio.create_memory_object_stream[bytes](10)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump_output, terminal, receive, _Drain())
            async with send:
                with anyio.fail_after(5):
                    for n in range(50):  # more than the queue holds: the writer must keep taking them
                        await send.send(b'{"n":%d}' % n)
    finally:
        os.close(terminal)


@pytest.mark.anyio
async def test_a_big_message_is_let_go_of_before_its_written_mark_is_set(anyio_backend):
    read_end, write_end = os.pipe()
    big = b'{"text":"' + b"x" * (2 * BIG_MESSAGE) + b'"}'
    expected = big + b'\n{"n":1}\n'
    received = bytearray()

    def read_all() -> None:
        while len(received) < len(expected):
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                return
            received.extend(chunk)

    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    written = Written()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump_output, write_end, receive, _Drain())
            tg.start_soon(functools.partial(anyio.to_thread.run_sync, read_all, abandon_on_cancel=True))
            async with send:
                send.send_nowait(big)
                send.send_nowait(written)
                with anyio.fail_after(10):
                    await written.wait()
                # Only this test's own reference (and getrefcount's argument) are left: the writer
                # holds no copy of a big message once its sender hears it was written.
                refs = sys.getrefcount(big)
                await send.send(b'{"n":1}')
    finally:
        os.close(write_end)
        os.close(read_end)
    assert refs == 2
    assert bytes(received) == expected
