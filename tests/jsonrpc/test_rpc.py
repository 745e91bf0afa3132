"""The JSON-RPC layer over memory streams: envelopes, errors, batches, cancellation, concurrency."""

import anyio
import msgspec
import pytest

from daemon.jsonrpc.client import RpcError
from daemon.jsonrpc.connection import Connection
from daemon.jsonrpc.framing import BIG_MESSAGE, Outgoing, Written
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


async def test_initialize_and_ping(home):
    async with in_memory_daemon(home) as (client, _):
        assert await client.request("ping") == {}
        result = await client.request("initialize", {"protocol_version": 1})
        assert result["protocol_version"] == 1
        assert result["server_info"]["name"] == "ponder"
        assert result["home"] == str(home)


async def test_wrong_protocol_version_is_invalid_params(home):
    async with in_memory_daemon(home) as (client, _):
        with pytest.raises(RpcError) as error:
            await client.request("initialize", {"protocol_version": 2})
        assert error.value.code == -32602
        assert error.value.data["errors"][0]["path"] == "$.params.protocol_version"


async def test_unknown_method(home):
    async with in_memory_daemon(home) as (client, _):
        with pytest.raises(RpcError) as error:
            await client.request("no/such")
        assert error.value.code == -32601
        assert error.value.data == {"method": "no/such"}


async def test_wrong_param_types_carry_the_path(home):
    async with in_memory_daemon(home) as (client, _):
        with pytest.raises(RpcError) as error:
            await client.request("session/list", {"limit": "ten"})
        assert error.value.code == -32602
        assert error.value.data["errors"][0]["path"] == "$.params.limit"
        with pytest.raises(RpcError) as error:
            await client.request("session/get", {})
        assert error.value.code == -32602
        assert "session_id" in error.value.message
        with pytest.raises(RpcError) as error:
            await client.request("session/get", ["positional"])
        assert error.value.code == -32602


async def _raw_exchange(client, line: bytes, expect: int = 1) -> list:
    """Send a raw line and collect the next ``expect`` replies that are not notifications."""
    replies = []
    original = client._dispatch_one

    async def capture(message):
        if "method" not in message:
            replies.append(message)
        await original(message)

    client._dispatch_one = capture
    try:
        await client.send_raw(line)
        with anyio.fail_after(5):
            while len(replies) < expect:
                await anyio.sleep(0.01)
    finally:
        client._dispatch_one = original
    return replies


async def test_malformed_input_each_get_the_right_code(home):
    async with in_memory_daemon(home) as (client, _):
        cases = [
            (b'{"jsonrpc":"2.0","id":1,"method":"ping"', -32700),  # truncated JSON
            (b"\xff\xfe not utf-8", -32700),
            (b"42", -32600),  # a bare number
            (b'{"id":7,"method":"ping"}', -32600),  # no jsonrpc
            (b'{"jsonrpc":"1.0","id":8,"method":"ping"}', -32600),
            (b'{"jsonrpc":"2.0","id":9,"method":5}', -32600),
            (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', -32600),
            (b"[]", -32600),  # empty batch
        ]
        for line, code in cases:
            [reply] = await _raw_exchange(client, line)
            assert reply["error"]["code"] == code, line
            assert reply["jsonrpc"] == "2.0"
        # still serving
        assert await client.request("ping") == {}


async def test_batch_is_answered_with_an_array(home):
    async with in_memory_daemon(home) as (client, _):
        batch = msgspec.json.encode(
            [
                {"jsonrpc": "2.0", "id": "a", "method": "ping"},
                {"jsonrpc": "2.0", "method": "ping"},  # a notification: no answer
                {"jsonrpc": "2.0", "id": "b", "method": "nope"},
                5,
            ]
        )
        replies = []
        original = client.dispatch

        async def capture(line):
            replies.append(msgspec.json.decode(line))
            await original(line)

        client.dispatch = capture
        await client.send_raw(batch)
        with anyio.fail_after(5):
            while not replies:
                await anyio.sleep(0.01)
        [array] = replies
        assert isinstance(array, list) and len(array) == 3
        by_id = {item["id"]: item for item in array}
        assert by_id["a"]["result"] == {}
        assert by_id["b"]["error"]["code"] == -32601
        assert by_id[None]["error"]["code"] == -32600


async def test_notification_gets_no_answer(home):
    async with in_memory_daemon(home) as (client, _):
        seen = []
        original = client.dispatch

        async def capture(line):
            seen.append(line)
            await original(line)

        client.dispatch = capture
        await client.notify("ping")
        await client.notify("no/such/method")
        assert await client.request("ping") == {}
        assert len(seen) == 1  # only the answer to the last request


async def test_slow_request_does_not_block_others_and_can_be_cancelled(home):
    async with in_memory_daemon(home) as (client, daemon):
        started = anyio.Event()

        async def slow(params):
            started.set()
            await anyio.sleep(30)
            return {}

        daemon.connection.register("test/slow", dict, slow)
        outcome = {}
        async with anyio.create_task_group() as tg:

            async def call_slow():
                try:
                    await client.request("test/slow", {}, request_id="slow-1")
                except RpcError as exc:
                    outcome["code"] = exc.code

            tg.start_soon(call_slow)
            await started.wait()
            with anyio.fail_after(2):
                assert await client.request("ping") == {}  # not blocked by the slow one
            await client.notify("$/cancelRequest", {"id": "slow-1"})
        assert outcome["code"] == -32800


async def test_shutdown_answers_then_exits(home):
    async with in_memory_daemon(home) as (client, _):
        assert await client.request("shutdown") == {}
        with pytest.raises(TimeoutError):  # no answer: the daemon has stopped serving
            with anyio.fail_after(1):
                await client.request("ping")


async def test_values_the_store_cannot_hold_are_invalid_params(home):
    async with in_memory_daemon(home) as (client, _):
        started = await client.request("session/start", {"model_id": "mock/thinker"})
        session_id = started["session"]["session_id"]
        for field, value in [("after_seq", 2**63), ("after_seq", -(2**63) - 1), ("limit", 2**64), ("limit", 10**30)]:
            with pytest.raises(RpcError) as error:
                await client.request("session/messages", {"session_id": session_id, field: value})
            assert error.value.code == -32602, (field, value, error.value)
            assert error.value.data["errors"][0]["path"] == f"$.params.{field}"
        largest = {"session_id": session_id, "after_seq": 2**63 - 1, "limit": 2**63 - 1}
        page = await client.request("session/messages", largest)
        assert page == {"messages": [], "next_seq": None, "items": []}


async def test_a_cwd_that_cannot_be_a_directory_is_invalid_params(home):
    async with in_memory_daemon(home) as (client, _):
        for cwd, says in [
            ("~nosuchuser", "names a user with no home directory"),
            ("~nosuchuser/src", "names a user with no home directory"),
            ("/" + "a" * 5000, "cannot be used: File name too long"),
            ("/no/such\x00dir", "is not an existing directory"),
        ]:
            with pytest.raises(RpcError) as error:
                await client.request("session/start", {"model_id": "mock/thinker", "cwd": cwd})
            assert error.value.code == -32602, (cwd[:40], error.value)
            assert error.value.data["errors"][0]["path"] == "$.params.cwd"
            assert says in error.value.message and len(error.value.message) < 300


async def test_a_big_notification_is_followed_by_a_mark_and_the_next_waits_for_it_before_encoding():
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    with send, receive:
        await _big_then_small(Connection(send), receive)


async def _big_then_small(connection: Connection, receive) -> None:
    await connection.notify("agent/event", {"text": "x" * BIG_MESSAGE})
    big, mark = receive.receive_nowait(), receive.receive_nowait()
    assert len(big) > BIG_MESSAGE and isinstance(mark, Written)
    assert connection.notify_nowait("agent/event", {"n": 1}) is False, "not encoded while the big one is in memory"
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.notify, "agent/event", {"n": 2})
        await anyio.wait_all_tasks_blocked()
        assert receive.statistics().current_buffer_used == 0, "waits for the writer"
        mark.set()  # what the writer does once it has written the big message
    assert msgspec.json.decode(receive.receive_nowait())["params"] == {"n": 2}
    assert connection.notify_nowait("agent/event", {"n": 3}) is True


async def test_wait_answered_wakes_when_the_last_reply_is_queued_not_on_a_timer():
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    incoming_send, incoming = anyio.create_memory_object_stream[bytes](10)
    connection = Connection(send)
    release = anyio.Event()

    async def slow(params: dict) -> dict:
        await release.wait()
        return {}

    connection.register("slow", dict, slow)
    waits: list[str] = []

    async def wait(label: str, timeout_s: float) -> None:
        await connection.wait_answered(timeout_s)
        waits.append(label)

    with send, receive, incoming_send:
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.serve, incoming)
            await wait("idle", 5)  # nothing in flight: at once
            await incoming_send.send(b'{"jsonrpc":"2.0","id":1,"method":"slow"}')
            await anyio.wait_all_tasks_blocked()
            await wait("timed out", 0.01)  # the request is still in flight: gives up at the deadline
            tg.start_soon(wait, "answered", 5)
            await anyio.wait_all_tasks_blocked()
            assert waits == ["idle", "timed out"]
            release.set()
            # Woken by the reply itself: a poll would still be asleep while every task is blocked.
            await anyio.wait_all_tasks_blocked()
            assert waits == ["idle", "timed out", "answered"]
            assert msgspec.json.decode(receive.receive_nowait()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
            tg.cancel_scope.cancel()


async def test_wait_quiet_waits_for_the_requests_in_flight_and_for_a_big_reply_to_be_written():
    # What the warm-up waits for (a session/resume's 20 MB reply must not share the CPU with it).
    send, receive = anyio.create_memory_object_stream[Outgoing](10)
    incoming_send, incoming = anyio.create_memory_object_stream[bytes](10)
    connection = Connection(send)
    release = anyio.Event()

    async def slow_big(params: dict) -> dict:
        await release.wait()
        return {"text": "x" * BIG_MESSAGE}

    connection.register("slow_big", dict, slow_big)
    quiet: list[str] = []

    async def wait_quiet(label: str) -> None:
        await connection.wait_quiet()
        quiet.append(label)

    with send, receive, incoming_send:
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.serve, incoming)
            await wait_quiet("idle")  # nothing in flight, nothing being written: at once
            await incoming_send.send(b'{"jsonrpc":"2.0","id":1,"method":"slow_big"}')
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(wait_quiet, "after the reply")
            await anyio.wait_all_tasks_blocked()
            assert quiet == ["idle"], "the request is still being answered"
            release.set()
            await anyio.wait_all_tasks_blocked()
            reply, mark = receive.receive_nowait(), receive.receive_nowait()
            assert len(reply) > BIG_MESSAGE and isinstance(mark, Written)
            assert quiet == ["idle"], "answered, but its big reply is not written yet"
            mark.set()  # what the writer does once it has written the reply
            await anyio.wait_all_tasks_blocked()
            assert quiet == ["idle", "after the reply"]
            tg.cancel_scope.cancel()
