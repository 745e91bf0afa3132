"""ACP thinking options through a real ACP client (the ``agent-client-protocol`` package) driving
``ponder acp`` in a subprocess: the thought level lists the model's real levels (``xhigh``
included), and a thinking-display option shows the session's display."""

from pathlib import Path
from typing import Any

import acp
import pytest

from tests.acp.test_acp_client import Recorder, option, ponder_acp
from tests.support.acp_harness import acp_daemon, drain, updates
from tests.support.replay import ReplayServer, ScriptedResponse
from tests.vendors.test_level_rejections import OPENAI_RESPONSES_GPT51

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ACP client library; the daemon's backend is daemon_backend


async def test_thought_level_lists_the_models_real_levels_and_display_is_an_option(
    home: Path, tmp_path: Path, daemon_backend: str
) -> None:
    async with ponder_acp(Recorder(), home, daemon_backend) as conn:
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        session_id = new.session_id
        display = option(new.config_options, "thought_display")
        assert display.category == "model_config" and display.current_value == "summarized"
        assert [(o.value, o.name) for o in display.options] == [("summarized", "Summarized"), ("omitted", "Omitted")]

        changed = await conn.set_config_option(config_id="model", session_id=session_id, value="openai/gpt-5.2")
        level = option(changed.config_options, "thought_level")
        assert [o.value for o in level.options] == ["off", "low", "medium", "high", "xhigh"]
        assert next(o.name for o in level.options if o.value == "xhigh") == "Extra high"
        changed = await conn.set_config_option(config_id="thought_level", session_id=session_id, value="xhigh")
        assert option(changed.config_options, "thought_level").current_value == "xhigh"

        changed = await conn.set_config_option(config_id="model", session_id=session_id, value="openai/gpt-5-pro")
        assert [o.value for o in option(changed.config_options, "thought_level").options] == ["high"]

        # The display shown can be sent back as is; a value that is no display is refused.
        same = await conn.set_config_option(config_id="thought_display", session_id=session_id, value="summarized")
        assert option(same.config_options, "thought_display").current_value == "summarized"
        with pytest.raises(acp.RequestError) as refused:
            await conn.set_config_option(config_id="thought_display", session_id=session_id, value="loud")
        assert refused.value.code == -32602
        # Another display is the session's from then on: the option and session/get say so.
        omitted = await conn.set_config_option(config_id="thought_display", session_id=session_id, value="omitted")
        assert option(omitted.config_options, "thought_display").current_value == "omitted"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_refused_level_updates_the_thought_level_selector(
    anyio_backend: str, home: Path, tmp_path: Path, replay_server: ReplayServer
) -> None:
    """OpenAI refuses "minimal" for the session's model (its recorded error): the turn is retried
    at "low", and the client is told the levels the model takes now, and why."""
    replay_server.enqueue(
        ScriptedResponse(status=400, headers={"content-type": "application/json"}, body=OPENAI_RESPONSES_GPT51)
    )
    replay_server.enqueue_fixture("openai-responses", "reasoning-summary-text")
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": replay_server.url}
    async with acp_daemon(home, env=env) as (client, _daemon):
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session_id = new["sessionId"]
        for config_id, value in (("model", "openai/gpt-5"), ("thought_level", "minimal")):
            await client.request(
                "session/set_config_option", {"sessionId": session_id, "configId": config_id, "value": value}
            )
        drain(client)
        answer = await client.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
        )
        assert answer["stopReason"] == "end_turn"
        shown = updates(drain(client), "config_option_update")
    levels = [next(o for o in update["configOptions"] if o["id"] == "thought_level") for update in shown]
    # The retried call's own thinking (thinking_update), then the session's options again at the turn's end.
    assert any("retried with 'low'" in (level["description"] or "") for level in levels), levels
    level = levels[-1]
    assert [o["value"] for o in level["options"]] == ["low", "medium", "high"]
    assert level["currentValue"] == "low"
    assert "openai/gpt-5 cannot take 'minimal'" in level["description"]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_call_without_thinking_shows_in_the_thought_level_until_the_turn_ends(
    anyio_backend: str, home: Path, tmp_path: Path
) -> None:
    """Anthropic's budget mode sends the second call of a tool loop without thinking (the tool call
    has no signed thinking block): the selector shows "off" and why before that call, and the
    session's own level again before the prompt is answered."""
    from tests.agent.test_call_thinking import CONFIG, tool_call_stream

    (tmp_path / "notes.txt").write_text("rain at noon\n")
    with ReplayServer() as server:
        (home / "config.toml").write_text(CONFIG.format(url=server.url, window=200_000))
        server.enqueue(tool_call_stream(signed=False, path="notes.txt"))
        server.enqueue_fixture("anthropic", "thinking-text")

        async def allow(method: str, params: Any) -> Any:
            return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

        async with acp_daemon(home, on_request=allow) as (client, _daemon):
            new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            session_id = new["sessionId"]
            for config_id, value in (("model", "claude/claude-budget"), ("thought_level", "high")):
                await client.request(
                    "session/set_config_option", {"sessionId": session_id, "configId": config_id, "value": value}
                )
            drain(client)
            answer = await client.request(
                "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "Umbrella?"}]}
            )
            assert answer["stopReason"] == "end_turn"
            seen = updates(drain(client))
    kinds = [u["sessionUpdate"] for u in seen]
    shown = [u for u in seen if u["sessionUpdate"] == "config_option_update"]
    levels = [next(o for o in u["configOptions"] if o["id"] == "thought_level") for u in shown]
    assert [level["currentValue"] for level in levels] == ["off", "high"], levels
    assert "signed thinking block" in levels[0]["description"]
    first = kinds.index("config_option_update")
    assert "tool_call_update" in kinds[:first]  # told after the tool ran, before the second call's reply
    assert "agent_message_chunk" in kinds[first:]
    assert len(server.requests) == 2 and "thinking" not in server.requests[1].json()
