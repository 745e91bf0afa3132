"""A config that cannot stop the daemon, against a real ``ponder serve`` (issue #24).

Every wrong type or value is one sentence in ``initialize.problems`` naming the key and its line,
and the rest of the config still applies; a config file that is a FIFO, /dev/zero, a dangling or
looping symlink, or nested thousands deep is reported and skipped, never read forever; a model id
of megabytes is refused before any lookup work, and the daemon keeps answering.
"""

import os
from pathlib import Path

import anyio
import pytest

from daemon.jsonrpc.client import RpcError, spawn_daemon
from tests.support.harness import initialize, subprocess_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WRONG = """compaction = 5

[defaults]
model = ["a", "b"]
max_tool_steps = nan
thinking_level = "low"

[reliability]
stall_timeout_s = inf
max_attempts = 2.5
no_progress_timeout_s = 30

[budget]
max_cost = nan
max_tokens = 5000

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
headers = ["x"]
api_key_env = 5
models = "qwen"

[[providers.other.models]]
model = "m"

[providers.other]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[mcp_servers]
docs = "npx docs"

[providers.third]
api = "openai-chat"
base_url = 5

[serve]
approval_timeout_s = "never"
"""


async def problems_of(home: Path, backend: str) -> tuple[list[str], dict[str, object]]:
    """``initialize.problems`` of a daemon started on ``home``, and a session it still starts."""
    with anyio.fail_after(30):
        async with spawn_daemon(home=home, env=subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend})) as client:
            result = await initialize(client)
            started = await client.request("session/start", {"model_id": "mock/thinker", "cwd": str(home)})
            return result["problems"], started


async def test_every_wrong_value_is_one_sentence_with_its_line_and_the_rest_applies(anyio_backend, home):
    (home / "config.toml").write_text(WRONG)
    problems, started = await problems_of(home, anyio_backend)
    text = "\n".join(problems)
    for expected in (
        "line 1: [compaction] must be a table",
        "line 4: [defaults] model must be a string",
        "line 5: [defaults] max_tool_steps must be a whole number",
        "line 9: [reliability] stall_timeout_s must be a number",
        "line 10: [reliability] max_attempts must be a whole number",
        "line 14: [budget] max_cost must be an amount",
        "line 20: [providers.local] headers must be a table of strings",
        "line 21: [providers.local] api_key_env must be a string",
        "line 22: [providers.local] models must be a list of tables",
        "[mcp_servers.docs] must be a table",
        "line 36: [providers.third] base_url must be a string, not 5",
        "line 39: [serve] approval_timeout_s must be a number of at least 0, not 'never'; using 300.",
    ):
        assert expected in text, (expected, problems)
    # The rest still applies: [budget] max_tokens, [defaults] thinking_level.
    assert started["session"]["budget"] == {"max_cost": None, "max_tokens": 5000, "cost_enforced": True}


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dangling", "loop", "nested"])
async def test_a_config_that_is_not_a_file_is_reported_and_skipped(anyio_backend, home, kind):
    path = home / "config.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(home / "nothing-here.toml")
    elif kind == "loop":
        path.symlink_to(path)
    else:
        path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    problems, started = await problems_of(home, anyio_backend)
    assert any("config.toml" in p and "ignoring the whole file" in p for p in problems), problems
    assert started["session"]["model_id"] == "mock/thinker"


async def test_a_megabyte_model_id_is_refused_before_any_lookup(anyio_backend, home):
    with anyio.fail_after(30):
        async with spawn_daemon(home=home, env=subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend})) as client:
            await initialize(client)
            started = await client.request("session/start", {"model_id": "mock/thinker", "cwd": str(home)})
            session_id = started["session"]["session_id"]
            huge = "m" * (2 * 1024 * 1024)
            began = anyio.current_time()
            for method, params in (
                ("session/start", {"model_id": huge}),
                ("model/set", {"session_id": session_id, "model_id": huge}),
            ):
                with pytest.raises(RpcError) as refused:
                    await client.request(method, params)
                assert refused.value.code == -32602
            assert anyio.current_time() - began < 5
            assert await client.request("ping") == {}
