"""Hostile lines that killed or stalled the daemon, pinned as fast in-memory regressions: JSON
nested past the decoder's limit, answers and ``$/cancelRequest`` whose id is a list or an
object (unhashable), alone or inside a batch, invalid UTF-8 inside a string, a batch of 10^6
members; and the error boundary's edges: batches cut short by shutdown, errors the wire
cannot encode, handlers whose own tasks fail as shutdown cancels them."""

import anyio
import msgspec
import pytest

from daemon.errors import PonderError
from daemon.jsonrpc.client import RpcError
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


async def test_lines_that_used_to_kill_the_daemon_are_answered_and_it_goes_on(home):
    async with in_memory_daemon(home) as (client, _):
        seen = []
        validate = client.on_message

        def record(message, methods):
            validate(message, methods)
            seen.append(message)

        client.on_message = record
        await client.send_raw(b"[" * 100_000 + b"]" * 100_000)
        await client.send_raw(b'{"jsonrpc": "2.0", "id": [], "result": {}}')
        await client.send_raw(b'{"jsonrpc": "2.0", "id": {"a": 1}, "error": {"code": 1, "message": "x"}}')
        await client.send_raw(
            b'[{"jsonrpc": "2.0", "id": [1], "result": 1}, {"jsonrpc": "2.0", "id": 7, "method": "ping"}]'
        )
        with anyio.fail_after(5):
            assert await client.request("ping") == {}
            while len(seen) < 3:
                await anyio.sleep(0.01)
    [nested] = [m for m in seen if isinstance(m, dict) and "error" in m]
    assert nested["id"] is None and nested["error"]["code"] == -32700
    assert nested["error"]["message"] == "Parse error: the JSON is nested too deeply."
    [batch] = [m for m in seen if isinstance(m, list)]
    assert batch == [{"jsonrpc": "2.0", "id": 7, "result": {}}], (
        "the answer in the batch is ignored, the request answered"
    )
    assert len(seen) == 3, "the two stray answers got no reply"


def _record(client) -> list:
    """Every message the daemon writes from now on, in order (validated as before, except the
    results of the tests' own ``test/...`` methods, which the schema does not know)."""
    seen: list = []
    validate = client.on_message

    def record(message, methods):
        validate(message, {key: method for key, method in methods.items() if not method.startswith("test/")})
        seen.append(message)

    client.on_message = record
    return seen


async def _until(seen: list, predicate, timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not predicate(seen):
            await anyio.sleep(0.01)


async def test_invalid_utf8_inside_a_string_is_a_parse_error_and_the_daemon_goes_on(home):
    async with in_memory_daemon(home) as (client, _):
        seen = _record(client)
        started = await client.request("session/start", {"model_id": "mock/thinker"})
        session_id = started["session"]["session_id"]
        # cut short, a surrogate, an overlong encoding, beyond U+10FFFF
        for raw in (b"caf\xe9", b"\xed\xa0\x80", b"\xc0\x80", b"ok\xf4\x90\x80\x80"):
            await client.send_raw(
                b'{"jsonrpc":"2.0","id":"p","method":"session/prompt","params":{"session_id":"'
                + session_id.encode()
                + b'","text":"'
                + raw
                + b'"}}'
            )
        await client.send_raw(b'{"jsonrpc":"2.0","id":"k","method":"ping","params":{"\xe9":1}}')  # in a key
        assert await client.request("ping") == {}
        await _until(seen, lambda s: len([m for m in s if "error" in m]) == 5)
    errors = [m for m in seen if "error" in m]
    assert [(m["id"], m["error"]["code"], m["error"]["message"]) for m in errors] == [
        (None, -32700, "Parse error: the line is not valid UTF-8.")
    ] * 5


async def test_cancel_with_an_id_that_names_no_request_is_ignored_alone_and_in_a_batch(home):
    async with in_memory_daemon(home) as (client, daemon):
        seen = _record(client)
        started = anyio.Event()

        async def slow(params):
            started.set()
            await anyio.sleep(0.5)
            return {"finished": True}

        daemon.connection.register("test/slow", dict, slow)
        async with anyio.create_task_group() as tg:
            outcome = {}

            async def call_slow():
                outcome["result"] = await client.request("test/slow", {}, request_id=1)

            tg.start_soon(call_slow)
            await started.wait()
            for bad_id in ([1], {"id": 1}, [], {}, True, 1.0, None, [[1]]):
                cancel = msgspec.json.encode({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": bad_id}})
                await client.send_raw(cancel)
                await client.send_raw(b"[" + cancel + b',{"jsonrpc":"2.0","id":"b","method":"ping"}]')
            await client.send_raw(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":[1]}')
            await client.send_raw(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":"1"}')
            assert await client.request("ping") == {}
        assert outcome["result"] == {"finished": True}, "true and 1.0 are not the id 1"
        batches = [m for m in seen if isinstance(m, list)]
        assert batches == [[{"jsonrpc": "2.0", "id": "b", "result": {}}]] * 8


async def test_a_batch_longer_than_the_cap_is_refused_whole_and_stalls_nothing(home):
    async with in_memory_daemon(home) as (client, _):
        seen = _record(client)
        with anyio.fail_after(10):
            await client.send_raw(b"[" + b"0," * 999_999 + b"0]")  # 10^6 tiny "requests", 2 MB
            assert await client.request("ping") == {}
        await _until(seen, lambda s: any("error" in m for m in s if isinstance(m, dict)))
        [refused] = [m for m in seen if isinstance(m, dict) and "error" in m]
        assert refused["id"] is None and refused["error"]["code"] == -32600
        assert refused["error"]["data"] == {"reason": "batch_too_long"}
        assert "at most 1000" in refused["error"]["message"]
        full = [{"jsonrpc": "2.0", "id": f"n{n}", "method": "ping"} for n in range(1000)]
        await client.send_raw(msgspec.json.encode(full))  # exactly the cap is fine
        await _until(seen, lambda s: any(isinstance(m, list) for m in s))
        [answer] = [m for m in seen if isinstance(m, list)]
        assert sorted(m["id"] for m in answer) == sorted(f"n{n}" for n in range(1000))
        assert all(m["result"] == {} for m in answer)


async def _batch_cut_short_by(trigger: str, home) -> list:
    async with in_memory_daemon(home) as (client, daemon):
        seen = _record(client)
        started = anyio.Event()

        async def slow(params):
            started.set()
            await anyio.sleep(60)

        daemon.connection.register("test/slow", dict, slow)
        batch = [
            {"jsonrpc": "2.0", "id": "fast", "method": "ping"},
            {"jsonrpc": "2.0", "id": "slow-1", "method": "test/slow"},
            {"jsonrpc": "2.0", "method": "test/slow"},  # a notification: no answer
            {"jsonrpc": "2.0", "id": "slow-2", "method": "test/slow"},
            {"jsonrpc": "2.0", "id": "unknown", "method": "no/such"},
        ]
        if trigger == "shutdown_in_the_batch":
            batch.append({"jsonrpc": "2.0", "id": "stop", "method": "shutdown"})
        await client.send_raw(msgspec.json.encode(batch))
        with anyio.fail_after(5):
            await started.wait()
            if trigger == "shutdown":
                assert await client.request("shutdown") == {}
        if trigger == "shutdown_in_the_batch":
            await _until(seen, lambda s: any(isinstance(m, list) for m in s))  # the batch's array is out
    return seen  # the daemon has stopped (end of input, or shutdown)


@pytest.mark.parametrize("trigger", ["shutdown", "shutdown_in_the_batch", "eof"])
async def test_shutdown_answers_a_batch_in_flight_in_one_array(home, trigger):
    seen = await _batch_cut_short_by(trigger, home)
    batches = [m for m in seen if isinstance(m, list)]
    members = ("slow", "fast", "unknown", "stop")
    loose = [m for m in seen if isinstance(m, dict) and str(m.get("id")).startswith(members)]
    assert loose == [], "no member of the batch is answered on its own"
    [batch] = batches
    by_id = {m["id"]: m for m in batch}
    in_batch = ["fast", "slow-1", "slow-2", "unknown"] + (["stop"] if trigger == "shutdown_in_the_batch" else [])
    assert sorted(by_id) == sorted(in_batch)
    assert by_id["fast"]["result"] == {}
    if trigger == "shutdown_in_the_batch":
        assert by_id["stop"]["result"] == {}
    assert by_id["unknown"]["error"]["code"] == -32601
    for cut in ("slow-1", "slow-2"):
        assert by_id[cut]["error"]["code"] == -32005, by_id[cut]


async def test_an_error_the_wire_cannot_carry_is_still_answered(home):
    async with in_memory_daemon(home) as (client, daemon):

        async def unencodable_data(params):
            raise PonderError("a bug put an object in data", thing=object())

        async def surrogate_message(params):
            raise PonderError("no such file 'caf\udce9.txt'")  # a file name that is not UTF-8

        daemon.connection.register("test/data", dict, unencodable_data)
        daemon.connection.register("test/surrogate", dict, surrogate_message)
        for method in ("test/data", "test/surrogate"):
            with pytest.raises(RpcError) as error:
                await client.request(method)
            assert error.value.code == -32603 and error.value.data == {}
        assert await client.request("ping") == {}


@pytest.mark.parametrize("as_notification", [False, True])
async def test_a_handler_whose_own_task_fails_as_shutdown_cancels_it_is_still_answered(home, as_notification):
    async with in_memory_daemon(home) as (client, daemon):
        seen = _record(client)
        started = anyio.Event()

        async def failing_cleanup(params):
            async def child():
                try:
                    await anyio.sleep(60)
                finally:
                    raise RuntimeError("cleanup failed")  # on trio: grouped with shutdown's Cancelled

            async with anyio.create_task_group() as tg:
                tg.start_soon(child)
                started.set()
                await anyio.sleep(60)

        daemon.connection.register("test/messy", dict, failing_cleanup)
        request_id = b"" if as_notification else b'"id":"messy",'
        await client.send_raw(b'{"jsonrpc":"2.0",' + request_id + b'"method":"test/messy"}')
        with anyio.fail_after(5):
            await started.wait()
            assert await client.request("shutdown") == {}
            if not as_notification:
                await _until(seen, lambda s: any(isinstance(m, dict) and m.get("id") == "messy" for m in s))
    # and the daemon stopped cleanly (in_memory_daemon would raise otherwise)
    answers = [m for m in seen if isinstance(m, dict) and m.get("id") == "messy"]
    if as_notification:
        assert answers == []
    else:
        [answer] = answers
        assert answer["error"]["code"] in (-32005, -32603), answer  # shutting_down, or the failure itself
