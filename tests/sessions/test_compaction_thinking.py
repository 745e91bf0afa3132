"""Thinking across a compaction, asserted on the HTTP body the Anthropic adapter sends to a local server.

A model that binds thinking to its prefix (``ModelSpec.thinking_bound_to_prefix``: Anthropic's
preserved thinking, Claude Fable 5.1 and later) gets the kept messages without their thinking
blocks once a local compaction changed the prefix; other models keep them; without a compaction
nothing is stripped. The stored blocks stay in the store either way.
"""

from pathlib import Path
from typing import Any

import pytest

from daemon.catalog.catalog import Catalog
from daemon.config.settings import load_config
from daemon.conversation import ChatMessage, Part
from daemon.store import SessionRow, Store
from protocol.objects import Compaction
from tests.support.harness import in_memory_daemon
from tests.support.replay import ReplayServer

pytestmark = pytest.mark.anyio

CONFIG = """
[providers.claude]
api = "anthropic"
base_url = "{url}"

[[providers.claude.models]]
model = "claude-fable-5-1"
context_window = 200000

[[providers.claude.models]]
model = "claude-opus-4-8"
context_window = 200000

[[providers.claude.models]]
model = "claude-fable-5-2"
context_window = 200000
thinking_bound_to_prefix = false
"""


def test_the_flag_comes_from_the_catalogue_and_config_may_set_it(home: Path) -> None:
    (home / "config.toml").write_text(CONFIG.format(url="http://127.0.0.1:9"))
    catalog = Catalog(load_config(home, env={}))
    flags = {spec.model: spec.thinking_bound_to_prefix for spec in catalog.list_models("claude")}
    assert flags == {"claude-fable-5-1": True, "claude-opus-4-8": False, "claude-fable-5-2": False}


def seed(home: Path, session_id: str, model: str, *, compacted: bool) -> None:
    """A stored session: two exchanges with signed thinking, and (``compacted``) a record folding the first."""
    with Store(home / "sessions.db") as store:
        store.create_session(SessionRow(id=session_id, cwd=str(home), model_id=f"claude/{model}", thinking_level="off"))

        def message(seq: int, role: Any, parts: list[Part]) -> None:
            store.save_message(ChatMessage(message_id=f"{session_id}-m{seq}", session_id=session_id, seq=seq,
                                           role=role, parts=parts, status="complete"))  # fmt: skip

        for first in (1, 3):
            message(first, "user", [Part(type="text", text=f"Question {first}.")])
            thought = Part(type="thinking", text=f"Thinking {first}.", provider="claude", model=model,
                           signature=f"sig-{first}")  # fmt: skip
            message(first + 1, "assistant", [thought, Part(type="text", text=f"Answer {first}.")])
        if compacted:
            store.save_compaction(
                session_id,
                Compaction(compaction_id=f"{session_id}-c", seq=2, trigger="manual", summary="Question 1 was answered.",
                           first_kept_seq=3, tokens_before=100, tokens_after=50, model_id=None, created_at=""),
            )  # fmt: skip


async def request_body(home: Path, session_id: str, model: str, *, compacted: bool) -> dict[str, Any]:
    seed(home, session_id, model, compacted=compacted)
    with ReplayServer() as server:
        (home / "config.toml").write_text(CONFIG.format(url=server.url))
        server.enqueue_fixture("anthropic", "thinking-text")
        async with in_memory_daemon(home) as (client, _daemon):
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "Question 5."})
            events = await client.collect_turn(turn["turn_id"])
            assert events[-1]["stop_reason"] == "end_turn", events[-1]
            stored = await client.request("session/messages", {"session_id": session_id})
    # The stored thinking blocks are untouched.
    assert [b["type"] for b in stored["messages"][3]["content"]] == ["thinking", "text"]
    [request] = [r for r in server.requests if r.path == "/v1/messages"]
    return request.json()


def thinking_blocks(body: dict[str, Any]) -> list[str]:
    return [
        block["signature"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "thinking"
    ]


def texts(body: dict[str, Any]) -> str:
    return str(body["messages"])


async def test_a_prefix_bound_model_gets_no_thinking_in_kept_messages_after_a_compaction(home: Path) -> None:
    body = await request_body(home, "ses_bound", "claude-fable-5-1", compacted=True)
    assert thinking_blocks(body) == []
    assert "Question 1 was answered." in texts(body) and "Question 1." not in texts(body)
    assert "Answer 3." in texts(body)


async def test_other_models_keep_their_thinking_after_a_compaction(home: Path) -> None:
    body = await request_body(home, "ses_free", "claude-opus-4-8", compacted=True)
    assert thinking_blocks(body) == ["sig-3"]  # the folded exchange's thinking is not sent at all
    assert "Question 1 was answered." in texts(body)


async def test_without_a_compaction_a_prefix_bound_model_keeps_its_thinking(home: Path) -> None:
    body = await request_body(home, "ses_plain", "claude-fable-5-1", compacted=False)
    assert thinking_blocks(body) == ["sig-1", "sig-3"]


BUDGET_CONFIG = """
[providers.claude]
api = "anthropic"
base_url = "{url}"

[[providers.claude.models]]
model = "claude-budget"
context_window = 40000
max_output_tokens = 32000
thinking_levels = ["off", "low", "high"]

[compaction]
auto = false
"""


async def budget_request(
    home: Path, session_id: str, history_chars: int, display: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request body and ``turn_start.thinking`` of a prompt in a session at level high (and
    ``display`` when given) after ``history_chars`` of history."""
    with Store(home / "sessions.db") as store:
        store.create_session(
            SessionRow(id=session_id, cwd=str(home), model_id="claude/claude-budget", thinking_level="high")
        )
        for seq, role, text in ((1, "user", "x" * history_chars), (2, "assistant", "Noted.")):
            part = Part(type="text", text=text)
            store.save_message(ChatMessage(message_id=f"{session_id}-{seq}", session_id=session_id, seq=seq,
                                           role=role, parts=[part], status="complete"))  # type: ignore[arg-type]  # fmt: skip
    with ReplayServer() as server:
        (home / "config.toml").write_text(BUDGET_CONFIG.format(url=server.url))
        server.enqueue_fixture("anthropic", "thinking-text")
        async with in_memory_daemon(home) as (client, _daemon):
            if display is not None:
                await client.request("thinking/set", {"session_id": session_id, "display": display})
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "And now?"})
            events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    [request] = [r for r in server.requests if r.path == "/v1/messages"]
    return request.json(), events[0]["thinking"]


async def test_near_the_window_a_budget_models_thinking_budget_shrinks_with_a_reason(home: Path) -> None:
    body, thinking = await budget_request(home, "ses_near", 120_000)  # about 30,000 of 40,000 tokens
    budget = body["thinking"]["budget_tokens"]
    assert 1024 <= budget < 10_000
    # turn_start tells it (estimated before the tool schemas were known: the request's can be a bit lower).
    assert thinking["budget_tokens"] >= budget and "lowered" in thinking["reason"]
    assert "40,000-token context window" in thinking["reason"]
    # Budget and answer fit what the request leaves of the window.
    assert body["max_tokens"] == budget + 40_000 // 8
    assert 30_000 + body["max_tokens"] <= 40_000 + 100


async def test_a_shrunk_budget_keeps_the_turns_own_decision(home: Path) -> None:
    # The budget shrinks from what this turn decided (the session's display here), not from its level alone.
    body, thinking = await budget_request(home, "ses_turn", 120_000, display="omitted")
    assert thinking["display"] == "omitted" and "lowered" in thinking["reason"]
    assert body["thinking"]["display"] == "omitted" and body["thinking"]["budget_tokens"] < 10_000


async def test_far_from_the_window_the_budget_is_the_levels_own(home: Path) -> None:
    body, thinking = await budget_request(home, "ses_far", 4_000)
    assert body["thinking"]["budget_tokens"] == thinking["budget_tokens"] > 10_000
    assert thinking["reason"] is None
