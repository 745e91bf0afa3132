"""A provider refuses a thinking level: the turn retries once at the nearest level the provider
names, says so (a ``retry`` event), and every later turn for the model goes straight to it.

Through the daemon against a real HTTP server on 127.0.0.1 answering with the providers'
recorded error bodies (tests/test_level_rejections.py cites each record).
"""

import logging
from typing import Any

import pytest

from daemon.providers.device_login import save_github_token
from daemon.util.secret import Secret
from tests.support.fake_github import GITHUB_TOKEN, FakeGitHub
from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse
from tests.vendors.test_level_rejections import (
    COPILOT_MESSAGES_OPUS47,
    GEMINI_MEDIUM,
    OPENAI_RESPONSES_GPT51,
)

pytestmark = pytest.mark.anyio


def _json_400(body: bytes) -> ScriptedResponse:
    return ScriptedResponse(status=400, headers={"content-type": "application/json"}, body=body)


def _sent_level(case: str, body: dict[str, Any]) -> Any:
    if case == "openai-responses":
        return body["reasoning"]["effort"]
    if case == "gemini":
        return body["generationConfig"]["thinkingConfig"]["thinkingLevel"]
    return body["thinking_budget"]


# case: (model, requested, refusal body, env, (fixture), path, sent at first, sent on the retry, effective after)
CASES: dict[str, tuple[Any, ...]] = {
    "openai-responses": (
        "openai/gpt-5",
        "minimal",
        OPENAI_RESPONSES_GPT51,
        lambda url: {"OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": url},
        ("openai-responses", "reasoning-summary-text"),
        "/responses",
        "minimal",
        "low",
        "low",
    ),
    "copilot-chat": (
        "copilot/claude-opus-4.6",
        "high",
        COPILOT_MESSAGES_OPUS47,
        lambda url: {"PONDER_COPILOT_API_URL": url},
        ("openai-chat", "copilot-claude-reasoning"),
        "/chat/completions",
        16512,  # the budget "high" stands for on Copilot's Claude
        8768,  # "medium"'s
        "medium",
    ),
    "gemini": (
        "gemini/gemini-3.1-pro-preview",
        "medium",
        GEMINI_MEDIUM,  # names only the refused level
        lambda url: {"GEMINI_API_KEY": "AIza-fake", "GEMINI_BASE_URL": url},
        ("gemini", "thoughts-text-signature"),
        ":streamGenerateContent",
        "medium",
        "low",
        "low",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_refused_level_is_retried_once_and_remembered(case, home, tmp_path, replay_server, caplog):
    model_id, level, refusal, env_for, fixture, path, first, retried, effective = CASES[case]
    caplog.set_level(logging.INFO, logger="ponder")
    env = env_for(replay_server.url)
    if case == "copilot-chat":
        env.update(FakeGitHub(replay_server).env())
        save_github_token(home, Secret(GITHUB_TOKEN))
    replay_server.enqueue(_json_400(refusal))
    replay_server.enqueue_fixture(*fixture)
    replay_server.enqueue_fixture(*fixture)
    async with in_memory_daemon(home, env=env) as (client, _):
        started = await client.request(
            "session/start", {"model_id": model_id, "thinking_level": level, "cwd": str(tmp_path)}
        )
        session_id = started["session"]["session_id"]
        assert started["thinking"]["effective"] == level  # the catalogue says the model takes it
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
        events = await client.collect_turn(turn["turn_id"])
        sent = [r.json() for r in replay_server.requests if path in r.path]
        assert [_sent_level(case, body) for body in sent] == [first, retried]
        assert events[-1]["stop_reason"] == "end_turn", events[-1]
        retries = [e for e in events if e["type"] == "retry"]
        assert len(retries) == 1, retries
        message = retries[0]["error"]["message"]
        assert repr(level) in message and repr(effective) in message, message
        assert retries[0]["error"]["provider_status"] == 400
        assert retries[0]["attempt"] == 2 and retries[0]["delay_ms"] == 0
        # Before the retried call, the client hears what that call sends (PROTOCOL.md "Thinking controls").
        kinds = [e["type"] for e in events]
        assert kinds.count("thinking_update") == 1, kinds
        assert kinds.index("retry") < kinds.index("thinking_update") < kinds.index("message_start"), kinds
        update = events[kinds.index("thinking_update")]["thinking"]
        assert update["effective"] == effective and update["requested"] == level
        assert _sent_level(case, update["request_params"]) == retried  # exactly what the retry sent
        assert "refused" in update["reason"], update
        ended = next(e for e in events if e["type"] == "message_end")["message"]
        assert ended["thinking_level"] == effective  # the level the reply really had
        stored = await client.request("session/resume", {"session_id": session_id})
        assert [m["thinking_level"] for m in stored["messages"] if m["role"] == "assistant"] == [effective]

        # The next turn goes straight to the learned level: no refusal, one request.
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "again"})
        events = await client.collect_turn(turn["turn_id"])
        assert events[0]["thinking"]["effective"] == effective
        assert events[0]["thinking"]["requested"] == level
        assert "refused" in events[0]["thinking"]["reason"], events[0]["thinking"]
        assert not [e for e in events if e["type"] in ("retry", "thinking_update")]  # turn_start said it all
        assert events[-1]["stop_reason"] == "end_turn"
        sent = [r.json() for r in replay_server.requests if path in r.path]
        assert [_sent_level(case, body) for body in sent] == [first, retried, retried]
        got = await client.request("session/get", {"session_id": session_id})
        assert got["thinking"]["effective"] == effective


async def test_a_second_refusal_ends_the_turn_with_an_error_naming_both_levels(home, tmp_path, replay_server):
    replay_server.enqueue(_json_400(OPENAI_RESPONSES_GPT51))
    # The retry at "low" is refused too (the same record's wording, for another level).
    replay_server.enqueue(_json_400(OPENAI_RESPONSES_GPT51.replace(b"'minimal' is", b"'low' is")))
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env) as (client, _):
        started = await client.request(
            "session/start", {"model_id": "openai/gpt-5", "thinking_level": "minimal", "cwd": str(tmp_path)}
        )
        turn = await client.request("session/prompt", {"session_id": started["session"]["session_id"], "text": "hi"})
        events = await client.collect_turn(turn["turn_id"])
    sent = [r.json()["reasoning"]["effort"] for r in replay_server.requests if r.path.endswith("/responses")]
    assert sent == ["minimal", "low"]  # retried once, not more
    end = events[-1]
    assert end["stop_reason"] == "error"
    assert "'minimal' and then 'low'" in end["error"]["message"], end["error"]
    assert "thinking/set" in end["error"]["message"]
    assert end["error"]["provider_status"] == 400
    assert len([e for e in events if e["type"] == "retry"]) == 1


async def test_each_turn_logs_its_thinking_decision_once_and_no_credential(home, tmp_path, replay_server, caplog):
    secret = "sk-config-secret-0123456789abcdef"
    (home / "config.toml").write_text(f'[providers.openai]\napi_key = "{secret}"\nbase_url = "{replay_server.url}"\n')
    caplog.set_level(logging.INFO, logger="ponder")
    replay_server.enqueue_fixture("openai-responses", "reasoning-summary-text")
    async with in_memory_daemon(home, env={}) as (client, _):
        started = await client.request(
            "session/start", {"model_id": "openai/gpt-5.1", "thinking_level": "minimal", "cwd": str(tmp_path)}
        )
        turn = await client.request("session/prompt", {"session_id": started["session"]["session_id"], "text": "hi"})
        events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert replay_server.requests[-1].headers["authorization"] == f"Bearer {secret}"  # the key was really used
    lines = [r.getMessage() for r in caplog.records if " thinking on " in r.getMessage()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"turn {turn['turn_id']} thinking on openai/gpt-5.1: ")
    for part in ("requested=minimal", "effective=low", "source=session", "fallback=nearest", "display=summarized"):
        assert part in line, line
    assert "reason=openai/gpt-5.1 cannot take 'minimal'" in line
    assert 'request={"reasoning":{"effort":"low","summary":"auto"}}' in line
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert secret not in logs


async def test_what_a_refusal_taught_lasts_until_the_daemon_exits(home, tmp_path, replay_server):
    env = {"OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": replay_server.url}
    sent_levels = []
    session_id = None
    for _daemon in range(2):
        replay_server.enqueue(_json_400(OPENAI_RESPONSES_GPT51))
        replay_server.enqueue_fixture("openai-responses", "reasoning-summary-text")
        async with in_memory_daemon(home, env=env) as (client, _):
            if session_id is None:
                started = await client.request(
                    "session/start", {"model_id": "openai/gpt-5", "thinking_level": "minimal", "cwd": str(tmp_path)}
                )
                session_id = started["session"]["session_id"]
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
            events = await client.collect_turn(turn["turn_id"])
        assert events[-1]["stop_reason"] == "end_turn", events[-1]
        assert events[0]["thinking"]["effective"] == "minimal"  # a new daemon starts from the catalogue again
        sent_levels.append(
            [r.json()["reasoning"]["effort"] for r in replay_server.requests if r.path.endswith("/responses")]
        )
        replay_server.requests.clear()
    assert sent_levels == [["minimal", "low"], ["minimal", "low"]]
