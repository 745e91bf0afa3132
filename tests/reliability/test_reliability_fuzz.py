"""Hostile client input, property-based: random bytes, random JSON, well-formed requests
with wrong params, byte-level mutations of real request lines, batches and cancel
notifications of every shape, thrown at one long-lived ``ponder serve`` subprocess per backend.

For every line an oracle written from PROTOCOL.md predicts the replies: how many, to which
id, with which error code. The daemon must answer every request exactly once with that
code (never ``internal_error``), write nothing but schema-valid JSON-RPC lines, stay alive,
log no traceback, and keep its memory bounded (also under overlong and deeply nested lines).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.harness import subprocess_env
from tests.support.wire import SCHEMA_PATH, member_pointer, validate_message

pytestmark = pytest.mark.slow

MAX_LINE = 1 << 20  # --max-line-bytes for the fuzzed daemon: overlong lines are cheap to make
MAX_BATCH = 1000  # daemon.jsonrpc.connection.MAX_BATCH, restated from PROTOCOL.md's point of view
ANY = "any"  # a result or a domain error: anything but a protocol-level or internal error
NOT_ALLOWED_FOR_VALID = {-32700, -32600, -32601, -32603}
_UNSET = object()


@cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _methods() -> dict[str, Any]:
    """The schema's table of client → daemon methods: name → {"$ref": its {method, params, result} type}."""
    return _schema()["$defs"]["Methods"]["properties"]


@cache
def _params_validator(method: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**_schema(), "$ref": member_pointer("Methods", method, "params")})


@cache
def _param_names(method: str) -> tuple[str, ...]:
    entry = _schema()["$defs"][_methods()[method]["$ref"].rsplit("/", 1)[1]]
    ref = entry["properties"]["params"]["$ref"].rsplit("/", 1)[1]
    return tuple(_schema()["$defs"][ref].get("properties", {}))


# ``shutdown`` would end the run; ``auth/login`` for copilot starts a device flow.
METHODS = sorted(m for m in _methods() if m != "shutdown")


# --- the oracle ------------------------------------------------------------------------------


@dataclass
class Expect:
    """One reply the daemon owes: ``codes`` is a set of error codes, or ANY."""

    id: Any
    codes: set[int] | str
    duplicate: bool = False  # its id is used twice in one batch: -32600 duplicate_id is fine too


@dataclass
class Batch:
    items: list[Expect] = field(default_factory=list)


def expected_for_bytes(data: bytes) -> list[Expect | Batch]:
    """What the daemon owes for ``data`` sent as it is plus a newline: a mutation may hold newlines."""
    return [expected for line in data.split(b"\n") for expected in expected_for_line(line)]


def expected_for_line(line: bytes) -> list[Expect | Batch]:
    if not line.rstrip(b"\r").strip():
        return []  # blank lines are ignored
    if len(line) > MAX_LINE:
        return [Expect(None, {-32600})]
    try:
        message = json.loads(line.decode("utf-8"), parse_constant=_reject, parse_float=_finite)
        _no_lone_surrogates(message)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return [Expect(None, {-32700})]
    return expected_for_message(message)


def _reject(name: str) -> Any:
    raise ValueError(name)


def _finite(text: str) -> float:
    """``1e400``: Python reads infinity, msgspec (rightly) calls the number out of range."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def _no_lone_surrogates(value: Any) -> None:
    """``"\\ud800"``: Python reads a lone surrogate, msgspec (rightly) calls it malformed."""
    if isinstance(value, str):
        value.encode("utf-8")  # UnicodeEncodeError is a ValueError
    elif isinstance(value, list):
        for item in value:
            _no_lone_surrogates(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_lone_surrogates(key)
            _no_lone_surrogates(item)


def expected_for_message(message: Any) -> list[Expect | Batch]:
    if isinstance(message, list):
        if not message or len(message) > MAX_BATCH:
            return [Expect(None, {-32600})]
        items: list[Expect] = []
        for item in message:
            if isinstance(item, dict) and "method" not in item and "id" in item:
                continue  # an answer to a request of ours (none is pending): ignored
            items += _expected_single(item)
        ids = [(type(e.id), e.id) for e in items if e.id is not None]
        for e in items:  # the same id twice in one batch: the later one may be refused
            e.duplicate = e.id is not None and ids.count((type(e.id), e.id)) > 1
        return [Batch(items)] if items else []
    if (
        isinstance(message, dict)
        and "method" not in message
        and "id" in message
        and ("result" in message or "error" in message)
    ):
        return []
    return list(_expected_single(message))


def _expected_single(message: Any) -> list[Expect]:
    if not isinstance(message, dict):
        return [Expect(None, {-32600})]
    request_id = message.get("id", _UNSET)
    if request_id is not _UNSET and (
        isinstance(request_id, bool) or not isinstance(request_id, (str, int, type(None)))
    ):
        return [Expect(None, {-32600})]
    reply_id = None if request_id is _UNSET else request_id
    if message.get("jsonrpc") != "2.0":
        return [Expect(reply_id, {-32600})]
    method = message.get("method")
    if not isinstance(method, str):
        return [Expect(reply_id, {-32600})]
    if method == "$/cancelRequest" or request_id is _UNSET:
        return []  # notifications are never answered
    if method not in _methods():
        return [Expect(request_id, {-32601})]
    params = message.get("params", _UNSET)
    if params is _UNSET or params is None:
        params = {}
    if not isinstance(params, dict) or not _params_validator(method).is_valid(params):
        return [Expect(request_id, {-32602})]
    return [Expect(request_id, ANY)]


# --- the daemon under test ----------------------------------------------------------------


class FuzzedDaemon:
    """``ponder serve`` with raw pipes: lines in, every output line checked as it arrives."""

    def __init__(self, home: Path, backend: str, workdir: Path) -> None:
        self.stderr_path = home / "stderr.log"
        self._stderr = open(self.stderr_path, "wb")
        env = {
            **os.environ,
            **subprocess_env(
                home, {"PONDER_ASYNC_BACKEND": backend, "PONDER_COPILOT_GITHUB_URL": "http://127.0.0.1:9"}
            ),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daemon", "--log-level", "info", "serve", "--max-line-bytes", str(MAX_LINE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=str(workdir),
        )
        self.replies: queue.Queue[Any] = queue.Queue()
        self.problems: list[str] = []
        self.lines_out = 0
        self.hostile_lines = 0  # lines sent by exchange(), the sentinels not counted
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines_out += 1
            try:
                message = json.loads(raw)
            except ValueError:
                self.problems.append(f"non-JSON line on stdout: {raw[:200]!r}")
                continue
            items = message if isinstance(message, list) else [message]
            if not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in items):
                self.problems.append(f"not a JSON-RPC 2.0 message: {raw[:200]!r}")
                continue
            # JSON-RPC 2.0 allows a request with "id": null and its result echoes it, but
            # schemas/protocol.json's result envelope wants a string or integer id: a gap in
            # the schema (reported), not in the daemon.
            fixed = [{**m, "id": 0} if "result" in m and m.get("id") is None else m for m in items]
            checked = fixed if isinstance(message, list) else fixed[0]
            try:
                validate_message(checked, {})
            except AssertionError as exc:
                self.problems.append(str(exc)[:500])
            if isinstance(message, dict) and "method" in message and "id" not in message:
                continue  # notifications (session/updated, ...) are not replies
            self.replies.put(message)
        self.replies.put(None)  # EOF

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        assert self.process.poll() is None, f"the daemon exited; stderr: {self.stderr_tail()}"
        with open(self.stderr_path.with_name("transcript.log"), "ab") as f:
            f.write(repr(line[:500]).encode() + b"\n")
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def exchange(self, line: bytes, timeout: float = 10.0) -> None:
        """Send ``line`` and a sentinel ping; check the replies against the oracle."""
        try:
            self._exchange(line, timeout)
        except AssertionError:
            self._drain()  # so that late replies are not blamed on the next example
            raise

    def _drain(self) -> None:
        while True:
            try:
                if self.replies.get(timeout=0.3) is None:
                    return
            except queue.Empty:
                return

    def _exchange(self, line: bytes, timeout: float) -> None:
        expected = expected_for_bytes(line)
        with open(self.stderr_path.with_name("transcript.log"), "ab") as f:
            f.write(b"EXPECT " + repr(expected).encode() + b"\n")
        sentinel = f"sentinel-{uuid.uuid4().hex}"
        self.hostile_lines += line.count(b"\n") + 1
        self.send(line)
        self.send(json.dumps({"jsonrpc": "2.0", "id": sentinel, "method": "ping"}).encode())
        singles = [e for e in expected if isinstance(e, Expect)]
        batches = [e for e in expected if isinstance(e, Batch)]
        got_sentinel = False
        deadline = time.monotonic() + timeout
        while not got_sentinel or singles or batches:
            remaining = deadline - time.monotonic()
            try:
                reply = self.replies.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise AssertionError(
                    f"no reply within {timeout} s; still owed {singles} {batches} for {line[:300]!r}"
                ) from None
            assert reply is not None, f"the daemon died; stderr: {self.stderr_tail()}"
            if isinstance(reply, dict) and reply.get("id") == sentinel:
                assert reply.get("result") == {}, reply
                got_sentinel = True
                continue
            if isinstance(reply, list):
                assert batches, f"an unexpected batch reply {reply!r} to {line[:300]!r}"
                _match_batch(batches.pop(0), reply, line)
                continue
            _match_one(singles, reply, line)
        assert not self.problems, self.problems

    def rss_kib(self) -> int:
        for row in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if row.startswith("VmRSS:"):
                return int(row.split()[1])
        return 0

    def stderr_tail(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=10)
        self._reader.join(timeout=5)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._stderr.close()
        return code


def _match_one(owed: list[Expect], reply: dict[str, Any], line: bytes) -> None:
    for i, expect in enumerate(owed):
        if expect.id == reply.get("id") and type(expect.id) is type(reply.get("id")):
            owed.pop(i)
            _check_code(expect, reply, line)
            return
    raise AssertionError(f"unexpected or duplicate reply {reply!r} to {line[:300]!r}")


def _match_batch(batch: Batch, replies: list[Any], line: bytes) -> None:
    owed = list(batch.items)
    for reply in replies:
        _match_one(owed, reply, line)
    assert not owed, f"the batch reply {replies!r} lacks answers for {owed} ({line[:300]!r})"


def _check_code(expect: Expect, reply: dict[str, Any], line: bytes) -> None:
    code = reply["error"]["code"] if "error" in reply else None
    if expect.duplicate and code == -32600 and reply["error"]["data"] == {"reason": "duplicate_id"}:
        pass
    elif expect.codes == ANY:
        assert code not in NOT_ALLOWED_FOR_VALID, f"{reply!r} for valid params in {line[:300]!r}"
    else:
        assert code in expect.codes, f"expected an error in {expect.codes}, got {reply!r} for {line[:300]!r}"
    if code is not None:
        message = reply["error"]["message"]
        assert message and "Traceback" not in message and "\n" not in message


# --- strategies -------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=8) | st.sampled_from(["jsonrpc", "id", "method", "params"]), children, max_size=4
        )
    ),
    max_leaves=12,
)
ids = (
    st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=10)
    | st.none()
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.lists(st.integers(), max_size=2)
)
method_names = st.sampled_from(METHODS) | st.text(max_size=15) | st.integers() | st.none()


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """JSON-RPC-shaped objects with any of their members missing or wrong."""
    message: dict[str, Any] = {}
    if draw(st.booleans()) or draw(st.booleans()):
        message["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "1.0", 2.0, None, ""]))
    if draw(st.booleans()):
        message["id"] = draw(ids)
    if draw(st.integers(0, 5)):
        message["method"] = draw(method_names)
    if draw(st.booleans()):
        message["params"] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        message[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return message


@st.composite
def wrong_params(draw: st.DrawFn) -> dict[str, Any]:
    """Well-formed requests to real methods with params that are mostly wrong."""
    method = draw(st.sampled_from(METHODS))
    names = _param_names(method)
    params: Any
    shape = draw(st.integers(0, 3))
    if shape == 0:
        params = draw(json_values)
    elif shape == 1 and names:
        params = {draw(st.sampled_from(names)): draw(json_values)}
    else:
        fields = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
        params = {
            name: draw(json_values | st.sampled_from(["", "ses_nope", "/", "off", "max", "x" * 300])) for name in fields
        }
        if draw(st.booleans()):
            params[draw(st.text(max_size=8))] = draw(json_values)
    if method == "auth/login" and isinstance(params, dict) and params.get("provider") == "copilot":
        params["provider"] = "copilot-not-really"
    return {
        "jsonrpc": "2.0",
        "id": draw(st.integers(0, 10**6) | st.text(max_size=8)),
        "method": method,
        "params": params,
    }


lines = st.one_of(
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"{", b"[", b'{"jsonrpc": "2.0"', b"\xef\xbb\xbf", b"\r", b" "]).flatmap(
        lambda start: st.binary(max_size=60).map(lambda b: start + b.replace(b"\n", b""))
    ),
    json_values.map(lambda v: json.dumps(v).encode()),
    envelopes().map(lambda v: json.dumps(v).encode()),
    st.lists(envelopes() | wrong_params(), max_size=4).map(lambda v: json.dumps(v).encode()),
    wrong_params().map(lambda v: json.dumps(v, ensure_ascii=False).encode()),
)


# Real traffic, as an editor sends it, for byte-level mutation: multi-byte UTF-8 to cut in
# half, numbers to overflow, strings to unterminate, batches and cancels to break.
REAL_LINES = [
    json.dumps(message, ensure_ascii=False).encode()
    for message in [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "m-2", "method": "initialize", "params": {"protocol_version": 1, "client_info": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {"limit": 5, "cwd": "/tmp"}},
        {
            "jsonrpc": "2.0",
            "id": "m-4",
            "method": "session/prompt",
            "params": {"session_id": "s", "text": "café ☕ 😀"},
        },
        {"jsonrpc": "2.0", "id": 5, "method": "session/messages", "params": {"session_id": "s", "after_seq": 3}},
        {"jsonrpc": "2.0", "id": 6, "method": "models/list", "params": {"provider": "mock"}},
        {"jsonrpc": "2.0", "id": 7, "method": "session/start", "params": {"model_id": "mock/x", "cwd": "/nowhere-ü"}},
        {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 5}},
        {"jsonrpc": "2.0", "id": "ponder-1", "result": {"decision": "deny"}},
        [
            {"jsonrpc": "2.0", "id": 8, "method": "ping"},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 8}},
            {"jsonrpc": "2.0", "id": 9, "method": "session/get", "params": {"session_id": "ses_x"}},
        ],
    ]
]
HOSTILE_BYTES = st.sampled_from(
    [
        b"\xe9",
        b"\xff",
        b"\xc3",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xc0\x80",
        b"\x00",
        b'"',
        b"\\",
        b"{",
        b"[",
        b"]",
        b",",
        b"\n",
        b"\r",
        b"\xe2\x80\xa8",
        b"1e400",
        b"99999999999999999999",
    ]
) | st.binary(min_size=1, max_size=3)


@st.composite
def mutated_lines(draw: st.DrawFn) -> bytes:
    """A real request line with 1-4 byte-level mutations (a newline inserted makes two lines)."""
    line = bytearray(draw(st.sampled_from(REAL_LINES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "replace", "insert", "delete", "truncate", "duplicate"]))
        at = draw(st.integers(0, max(len(line) - 1, 0)))
        if op == "flip" and line:
            line[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "replace" and line:
            line[at : at + 1] = draw(HOSTILE_BYTES)
        elif op == "insert":
            line[at:at] = draw(HOSTILE_BYTES)
        elif op == "delete":
            del line[at : at + draw(st.integers(1, 4))]
        elif op == "truncate":
            del line[at:]
        elif op == "duplicate":
            line[at:at] = line[at : at + draw(st.integers(1, 16))]
    return bytes(line)


cancel_ids = json_values | st.lists(st.integers(), max_size=2) | st.dictionaries(st.sampled_from(["id", "a"]), ids)
real_messages = st.sampled_from([json.loads(line) for line in REAL_LINES[:8]])
cancels = st.builds(
    lambda params, request_id: {
        "jsonrpc": "2.0",
        "method": "$/cancelRequest",
        **({} if params is None else {"params": params}),
        **({} if request_id is None else {"id": request_id}),
    },
    st.builds(lambda i: {"id": i}, cancel_ids) | json_values | st.none(),
    st.none() | st.none() | ids,
)
# Batches at the cap and just beyond it: cancels get no answer, so size costs little.
CAP_CANCEL = b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":[1]}}'
cap_batches = st.integers(MAX_BATCH - 2, MAX_BATCH + 2).map(lambda n: b"[" + b",".join([CAP_CANCEL] * n) + b"]")
wire_shapes = st.one_of(
    mutated_lines(),
    cancels.map(lambda v: json.dumps(v).encode()),
    st.lists(cancels | envelopes() | wrong_params() | real_messages, min_size=1, max_size=8).map(
        lambda v: json.dumps(v).encode()
    ),
    cap_batches,
)


# --- the tests ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    daemon = FuzzedDaemon(home, request.param, tmp_path_factory.mktemp("cwd"))
    daemon.exchange(b'{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocol_version": 1}}')
    daemon.baseline_rss = daemon.rss_kib()  # type: ignore[attr-defined]
    yield daemon
    if daemon.process.poll() is None:
        assert daemon.close() == 0


@settings(
    max_examples=600,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(line=lines)
def test_hostile_lines_are_answered_exactly_once_with_the_right_code(fuzzed: FuzzedDaemon, line: bytes) -> None:
    fuzzed.exchange(line)


@settings(
    max_examples=2000,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(line=wire_shapes)
def test_mutated_traffic_batches_and_cancel_shapes_are_answered_exactly_once(fuzzed: FuzzedDaemon, line: bytes) -> None:
    fuzzed.exchange(line)


def test_overlong_and_deeply_nested_lines_keep_memory_bounded(fuzzed: FuzzedDaemon) -> None:
    overlong = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"a" * (3 * MAX_LINE) + b'"}}'
    nested = b"[" * 200_000 + b"]" * 200_000
    near_limit = json.dumps(
        {"jsonrpc": "2.0", "id": "big", "method": "session/get", "params": {"session_id": "x" * (MAX_LINE - 200)}}
    ).encode()
    for _ in range(10):
        fuzzed.exchange(overlong)
        fuzzed.exchange(nested)  # too deep for the decoder: a parse error, not a crash
        fuzzed.exchange(near_limit)  # -32001, with the id echoed
    # flood: many requests at once, answered each exactly once
    burst = [
        json.dumps({"jsonrpc": "2.0", "id": f"b{n}", "method": "session/list", "params": {"limit": 1}}).encode()
        for n in range(300)
    ]
    fuzzed.send(b"\n".join(burst))
    answered = set()
    while len(answered) < 300:
        reply = fuzzed.replies.get(timeout=10)
        assert reply is not None and reply["id"] not in answered and "result" in reply, reply
        answered.add(reply["id"])
    fuzzed.exchange(b"")  # and nothing more
    assert answered == {f"b{n}" for n in range(300)}


def test_the_daemon_survived_with_bounded_memory(fuzzed: FuzzedDaemon) -> None:
    # runs last for its backend (module order): after every hostile example
    fuzzed.exchange(b'{"jsonrpc": "2.0", "id": "alive", "method": "session/list", "params": {}}')
    grown_mib = (fuzzed.rss_kib() - fuzzed.baseline_rss) / 1024  # type: ignore[attr-defined]
    print(f"{fuzzed.hostile_lines} hostile lines; RSS {fuzzed.baseline_rss // 1024} -> {fuzzed.rss_kib() // 1024} MiB")
    assert grown_mib < 64, f"RSS grew by {grown_mib:.0f} MiB"
    assert fuzzed.process.poll() is None
    assert fuzzed.close() == 0
    assert not fuzzed.problems, fuzzed.problems
    log = fuzzed.stderr_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
