"""Hostile lines that the fuzzer (test_reliability_fuzz) found to kill the daemon, pinned as
fast in-memory regressions: JSON nested past the decoder's limit, and answers whose id is
a list or an object (unhashable), alone or inside a batch."""

import anyio
import pytest

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
        await client.send_raw(b'[{"jsonrpc": "2.0", "id": [1], "result": 1}, {"jsonrpc": "2.0", "id": 7, "method": "ping"}]')
        with anyio.fail_after(5):
            assert await client.request("ping") == {}
            while len(seen) < 3:
                await anyio.sleep(0.01)
    [nested] = [m for m in seen if isinstance(m, dict) and "error" in m]
    assert nested["id"] is None and nested["error"]["code"] == -32700
    assert nested["error"]["message"] == "Parse error: the JSON is nested too deeply."
    [batch] = [m for m in seen if isinstance(m, list)]
    assert batch == [{"jsonrpc": "2.0", "id": 7, "result": {}}], "the answer in the batch is ignored, the request answered"
    assert len(seen) == 3, "the two stray answers got no reply"
