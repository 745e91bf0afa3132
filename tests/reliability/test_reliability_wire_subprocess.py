"""The wire's crash classes against real ``ponder serve`` and ``ponder acp`` subprocesses, on
both backends: invalid UTF-8 inside a JSON string, and ``$/cancelRequest`` (ACP:
``$/cancel_request``) whose id is a list, an object or ``true``, alone and in a batch.

Each hostile line is followed by a probe request; the replies up to the probe's are checked,
and at the end the daemon must exit 0 on end of input with no traceback in its log.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import subprocess_env

pytestmark = pytest.mark.slow

DIALECTS: dict[str, dict[str, Any]] = {
    "serve": {
        "initialize": {"protocol_version": 1},
        "cancel": ("$/cancelRequest", "id"),
        "probe": "ping",
        "probe_result": {},
        "prompt": b'{"jsonrpc":"2.0","id":"p","method":"session/prompt","params":{"session_id":"x","text":"caf\xe9"}}',
    },
    "acp": {
        "initialize": {"protocolVersion": 1},
        "cancel": ("$/cancel_request", "requestId"),
        "probe": "session/list",
        "probe_result": {"sessions": []},
        "prompt": (
            b'{"jsonrpc":"2.0","id":"p","method":"session/prompt",'
            b'"params":{"sessionId":"x","prompt":[{"type":"text","text":"caf\xe9"}]}}'
        ),
    },
}


class LineDaemon:
    """A daemon subprocess fed raw lines; its stdout lines are decoded on a thread."""

    def __init__(self, mode: str, home: Path, backend: str) -> None:
        self.stderr_path = home.parent / "stderr.log"
        self._stderr = open(self.stderr_path, "wb")
        env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend})}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daemon", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.replies: queue.Queue[Any] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            message = json.loads(raw)
            if isinstance(message, dict) and "method" in message and "id" not in message:
                continue  # notifications are not replies
            self.replies.put(message)
        self.replies.put(None)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def replies_until(self, probe_id: str, others: int) -> list[Any]:
        """The replies other than the probe's (which must be a result), once the probe's and at
        least ``others`` more have come: requests are handled concurrently (PROTOCOL.md,
        "Framing"), so the probe sent after a batch may be answered before it."""
        got = []
        probed = False
        while not probed or len(got) < others:
            reply = self.replies.get(timeout=15)
            assert reply is not None, f"the daemon died: {self.stderr_path.read_text(errors='replace')[-3000:]}"
            if isinstance(reply, dict) and reply.get("id") == probe_id:
                assert "result" in reply, reply
                probed = True
                continue
            got.append(reply)
        return got

    def rest(self) -> list[Any]:
        """The replies still queued once the daemon has exited (its stdout ended)."""
        rest = []
        while (reply := self.replies.get_nowait()) is not None:
            rest.append(reply)
        return rest

    def close(self) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=20)
        self._reader.join(10)  # it has read everything the daemon wrote
        self.process.stdout.close()
        self._stderr.close()
        return code

    def assert_exited_cleanly(self, code: int) -> None:
        """Once closed: it exited 0, with no reply left unread and no traceback in its log."""
        log = self.stderr_path.read_text(errors="replace")
        assert code == 0, log[-3000:]
        assert self.rest() == []
        assert "Traceback" not in log, log[-3000:]


def _cases(mode: str, kind: str) -> list[tuple[bytes, list[Any]]]:
    """Hostile lines of one kind, each with the replies it must get (before the next probe)."""
    dialect = DIALECTS[mode]
    if kind == "invalid_utf8":
        parse_error = {"code": -32700, "message": "Parse error: the line is not valid UTF-8.", "data": {}}
        in_key = b'{"jsonrpc":"2.0","id":"q","method":"' + dialect["probe"].encode() + b'","params":{"\xff":1}}'
        return [(line, [{"jsonrpc": "2.0", "id": None, "error": parse_error}]) for line in (dialect["prompt"], in_key)]
    cancel_method, id_field = dialect["cancel"]
    in_batch = {"jsonrpc": "2.0", "id": "in-batch", "method": dialect["probe"], "params": {}}
    cases: list[tuple[bytes, list[Any]]] = []
    for bad_id in ([1], {"id": 1}, True, [[]]):
        cancel = {"jsonrpc": "2.0", "method": cancel_method, "params": {id_field: bad_id}}
        cases.append((json.dumps(cancel).encode(), []))
        answer = {"jsonrpc": "2.0", "id": "in-batch", "result": dialect["probe_result"]}
        cases.append((json.dumps([cancel, in_batch]).encode(), [[answer]]))
    return cases


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("mode", ["serve", "acp"])
@pytest.mark.parametrize("kind", ["invalid_utf8", "cancel_ids"])
def test_hostile_lines_that_used_to_kill_it_are_answered_and_it_goes_on(tmp_path, kind, mode, backend):
    dialect = DIALECTS[mode]
    daemon = LineDaemon(mode, tmp_path / "home", backend)

    def probe(n: int) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": f"probe-{n}", "method": dialect["probe"], "params": {}}).encode()

    try:
        initialize = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": dialect["initialize"]}
        daemon.send(json.dumps(initialize).encode())
        daemon.send(probe(0))
        assert daemon.replies_until("probe-0", 1)[0]["id"] == "init"
        for n, (line, expected) in enumerate(_cases(mode, kind), start=1):
            daemon.send(line)
            daemon.send(probe(n))
            # Exactly the expected replies: one too many shows up among the next probe's (or below).
            assert daemon.replies_until(f"probe-{n}", len(expected)) == expected, line
    finally:
        code = daemon.close()
    daemon.assert_exited_cleanly(code)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("mode", ["serve", "acp"])
def test_lines_that_arrive_in_one_read_are_answered_in_line_order(tmp_path, mode, backend):
    """The lines of one read are dispatched together (``Connection.serve``): a cancel right behind
    its request still cancels it, a second request with an id in flight is still a duplicate, and
    each of many requests is answered exactly once."""
    dialect = DIALECTS[mode]
    cancel_method, id_field = dialect["cancel"]
    daemon = LineDaemon(mode, tmp_path / "home", backend)

    def request(request_id: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "method": dialect["probe"], "params": {}}

    def one_write(*messages: dict[str, Any]) -> bytes:
        return b"\n".join(json.dumps(message).encode() for message in messages)  # send() adds the last newline

    try:
        initialize = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": dialect["initialize"]}
        daemon.send(one_write(initialize, request("probe-0")))
        assert daemon.replies_until("probe-0", 1)[0]["id"] == "init"

        # session/list waits for the store (ping, which does not wait, would be answered first).
        listing = {"jsonrpc": "2.0", "id": "c", "method": "session/list", "params": {}}
        cancel = {"jsonrpc": "2.0", "method": cancel_method, "params": {id_field: "c"}}
        daemon.send(one_write(listing, cancel, request("probe-1")))
        (cancelled,) = daemon.replies_until("probe-1", 1)
        assert cancelled["id"] == "c" and cancelled["error"]["code"] == -32800, cancelled

        listing["id"] = "d"
        daemon.send(one_write(listing, listing, request("probe-2")))
        answers = sorted(daemon.replies_until("probe-2", 2), key=lambda reply: "error" in reply)
        assert answers[0]["id"] == "d" and "sessions" in answers[0]["result"], answers[0]
        assert answers[1]["id"] == "d" and answers[1]["error"]["data"]["reason"] == "duplicate_id", answers[1]

        many = [request(f"m{n}") for n in range(300)]
        daemon.send(one_write(*many, request("probe-3")))
        replies = daemon.replies_until("probe-3", len(many))
        assert sorted(reply["id"] for reply in replies) == sorted(message["id"] for message in many)
        assert all(reply.get("result") == dialect["probe_result"] for reply in replies)
    finally:
        code = daemon.close()
    daemon.assert_exited_cleanly(code)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_prompts_that_arrive_in_one_read_queue_in_the_order_sent(tmp_path, backend):
    """Lines dispatched together still begin in line order (trio runs a round's new tasks in
    either order): twelve prompts to one session in one write are stored in the order sent."""
    daemon = LineDaemon("serve", tmp_path / "home", backend)

    def call(request_id: str, method: str, params: dict[str, Any]) -> Any:
        daemon.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode())
        while True:
            reply = daemon.replies.get(timeout=15)
            assert reply is not None, daemon.stderr_path.read_text(errors="replace")[-3000:]
            if reply.get("id") == request_id:
                return reply["result"]

    try:
        call("init", "initialize", {"protocol_version": 1})
        session_id = call("start", "session/start", {"model_id": "mock/echo"})["session"]["session_id"]
        texts = [f"q{n}" for n in range(12)]
        prompts = [
            {
                "jsonrpc": "2.0",
                "id": text,
                "method": "session/prompt",
                "params": {"session_id": session_id, "text": text},
            }
            for text in texts
        ]
        daemon.send(b"\n".join(json.dumps(prompt).encode() for prompt in prompts))
        replies = {reply["id"]: reply["result"] for reply in (daemon.replies.get(timeout=15) for _ in texts)}
        assert [replies[text]["queued"] for text in texts] == [False] + [True] * 11
        for attempt in range(200):
            stored = call(f"messages-{attempt}", "session/messages", {"session_id": session_id})["messages"]
            if len(stored) == 2 * len(texts):
                break
            time.sleep(0.05)
        assert [m["content"][0]["text"] for m in stored if m["role"] == "user"] == texts
    finally:
        code = daemon.close()
    assert code == 0, daemon.stderr_path.read_text(errors="replace")[-3000:]
