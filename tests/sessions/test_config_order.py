"""Settings changes sent without waiting apply in the order they arrived, in both dialects.

A client may write several ``session/set_config_option`` (ACP) or ``model/set`` /
``thinking/set`` (ponder) requests before reading any answer. Some changes wait on the
way (choosing an Ollama model first asks the local Ollama for its models, and that
answer is cached only briefly), so without one queue per session a later change could
be applied first and the session would end on a value the client did not send last.
"""

import random
from pathlib import Path
from typing import Any

import pytest

from daemon.providers import ollama
from tests.support.acp_bursts import OLLAMA_MODEL, burst, slow_ollama
from tests.support.acp_harness import acp_daemon
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio

BURSTS = 12
OLLAMA = f"ollama/{OLLAMA_MODEL}"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def uncached_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every change to an Ollama model asks Ollama again, as once the short cache expired."""
    monkeypatch.setattr(ollama, "DISCOVERY_TTL_S", 0.0)
    ollama.clear_discovery_cache()


def acp_set(session_id: str, config_id: str, value: str) -> tuple[str, dict[str, Any]]:
    return "session/set_config_option", {"sessionId": session_id, "configId": config_id, "value": value}


def shown(answer: dict[str, Any], config_id: str) -> str:
    return next(o["currentValue"] for o in answer["result"]["configOptions"] if o["id"] == config_id)


async def test_acp_set_config_option_bursts_end_on_the_last_value_sent(
    home: Path, work: Path, replay_server: Any, uncached_discovery: None
) -> None:
    slow_ollama(replay_server)
    rng = random.Random(7)
    async with acp_daemon(home, env={"OLLAMA_HOST": replay_server.url}) as (client, daemon):
        session_id = (await client.request("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
        for n in range(BURSTS):
            # Each burst asks for the Ollama model early and ends on another model.
            models = [OLLAMA, *(rng.choice(["mock/echo", "mock/thinker", "mock/tools", OLLAMA]) for _ in range(4))]
            models.append(rng.choice(["mock/echo", "mock/thinker", "mock/tools"]))
            answers = await burst(client, [acp_set(session_id, "model", m) for m in models])
            assert all("result" in a for a in answers), answers
            row = await daemon.sessions.row(session_id)
            assert row.model_id == models[-1], (n, models, row.model_id)
            # The last answer shows the state the burst left.
            assert shown(answers[-1], "model") == models[-1]

        # Levels after a change to a model that has them (gpt-oss: low/medium/high), in one burst.
        for n in range(BURSTS):
            levels = [rng.choice(["low", "medium", "high"]) for _ in range(4)]
            requests = [acp_set(session_id, "model", "mock/echo"), acp_set(session_id, "model", OLLAMA)]
            answers = await burst(client, [*requests, *(acp_set(session_id, "thought_level", v) for v in levels)])
            assert all("result" in a for a in answers), answers
            row = await daemon.sessions.row(session_id)
            assert (row.model_id, row.thinking_level) == (OLLAMA, levels[-1]), (n, levels, row.thinking_level)


async def test_ponder_model_and_thinking_bursts_end_on_the_last_value_sent(
    home: Path, replay_server: Any, uncached_discovery: None
) -> None:
    slow_ollama(replay_server)
    rng = random.Random(11)
    async with in_memory_daemon(home, env={"OLLAMA_HOST": replay_server.url}) as (client, daemon):
        started = await client.request("session/start", {"model_id": "mock/thinker", "cwd": str(home)})
        session_id = started["session"]["session_id"]
        for n in range(BURSTS):
            models = [OLLAMA, *(rng.choice(["mock/echo", "mock/tools", OLLAMA]) for _ in range(4)), "mock/thinker"]
            answers = await burst(client, [("model/set", {"session_id": session_id, "model_id": m}) for m in models])
            assert all("result" in a for a in answers), answers
            assert (await daemon.sessions.row(session_id)).model_id == "mock/thinker", (n, models)

            # model/set with a level, then thinking/set: the level sent last wins.
            levels = [rng.choice(["low", "medium", "high"]) for _ in range(3)]
            requests = [("model/set", {"session_id": session_id, "model_id": OLLAMA, "thinking_level": levels[0]})]
            requests += [("thinking/set", {"session_id": session_id, "level": level}) for level in levels[1:]]
            answers = await burst(client, requests)
            assert all("result" in a for a in answers), answers
            row = await daemon.sessions.row(session_id)
            assert (row.model_id, row.thinking_level) == (OLLAMA, levels[-1]), (n, levels, row.thinking_level)
            assert answers[-1]["result"]["thinking"]["requested"] == levels[-1]
