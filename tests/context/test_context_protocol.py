"""Wire types of long sessions: the usage and compaction events, Session's new fields, budget params."""

import re
from pathlib import Path

import msgspec
import pytest

from daemon.config.settings import load_config
from protocol.events import AgentEvent, CompactionEnd, CompactionStart, TurnStart, UsageEvent
from protocol.methods import BudgetParams, SessionBudgetParams, SessionStartParams
from protocol.objects import Compaction, ContextFill, Cost, Session, Usage

ROOT = Path(__file__).resolve().parents[2]


def roundtrip(event: object) -> object:
    return msgspec.json.decode(msgspec.json.encode(event), type=AgentEvent)


def test_usage_event_on_the_wire() -> None:
    event = UsageEvent(
        session_id="s", turn_id="t", seq=3, context=ContextFill(used=1200, size=8000),
        usage=Usage(input_tokens=1000, output_tokens=200), totals=Usage(input_tokens=5000, output_tokens=900),
        cost=Cost(amount=0.0042), totals_cost=None,
    )  # fmt: skip
    wire = msgspec.json.decode(msgspec.json.encode(event))
    assert wire["type"] == "usage"
    assert wire["context"] == {"used": 1200, "size": 8000}
    assert wire["cost"] == {"amount": 0.0042, "currency": "USD"} and wire["totals_cost"] is None
    assert roundtrip(event) == event


def test_compaction_events_on_the_wire() -> None:
    start = CompactionStart(
        session_id="s", turn_id="t", seq=1, compaction_id="k", trigger="overflow", tokens_before=9000
    )
    end = CompactionEnd(
        session_id="s", turn_id="t", seq=2, compaction_id="k", status="completed", summary="## Goal",
        tokens_after=2000, usage=Usage(input_tokens=9000, output_tokens=400),
    )  # fmt: skip
    assert roundtrip(start) == start and roundtrip(end) == end
    skipped = msgspec.json.decode(msgspec.json.encode(CompactionEnd(session_id="s", turn_id="t", seq=3,
                                                                    compaction_id="k", status="skipped")))  # fmt: skip
    assert skipped["summary"] is None and skipped["tokens_after"] is None and skipped["error"] is None


def test_turn_start_kind_defaults_to_prompt_and_allows_a_compaction_turn() -> None:
    thinking: dict[str, object] = {
        "requested": "off",
        "effective": "off",
        "supported": ["off"],
        "reason": None,
        "budget_tokens": None,
        "request_params": {},
    }
    raw = {"type": "turn_start", "session_id": "s", "turn_id": "t", "seq": 0, "model_id": "mock/echo",
           "thinking": thinking, "user_message_id": None, "kind": "compaction"}  # fmt: skip
    event = msgspec.json.decode(msgspec.json.encode(raw), type=AgentEvent)
    assert isinstance(event, TurnStart) and event.kind == "compaction" and event.user_message_id is None
    raw.pop("kind")
    assert msgspec.json.decode(msgspec.json.encode(raw), type=AgentEvent).kind == "prompt"  # type: ignore[union-attr]


def test_session_carries_totals_cost_context_and_budget_with_defaults() -> None:
    session = Session(
        session_id="s", title=None, cwd="/", model_id="mock/echo", thinking_level="off", approval_policy="ask",
        created_at="", updated_at="", message_count=0, parent_id=None, status="idle",
    )  # fmt: skip
    wire = msgspec.json.decode(msgspec.json.encode(session))
    assert wire["totals"] == {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None,
                              "cache_read_tokens": None, "cache_write_tokens": None}  # fmt: skip
    assert wire["cost"] is None and wire["context"] is None and wire["budget"] is None


def test_compaction_object() -> None:
    compaction = Compaction(
        compaction_id="k", seq=41, trigger="threshold", summary="## Goal", first_kept_seq=30, tokens_before=7000,
        tokens_after=2500, model_id="mock/echo", created_at="2026-11-24T04:00:00Z",
    )  # fmt: skip
    assert msgspec.json.decode(msgspec.json.encode(compaction), type=Compaction) == compaction


def test_budget_params_from_clients() -> None:
    params = msgspec.json.decode(b'{"budget": {"max_cost": 2.5}}', type=SessionStartParams)
    assert params.budget == BudgetParams(max_cost=2.5, max_tokens=None)
    cleared = msgspec.json.decode(b'{"session_id": "s", "budget": null}', type=SessionBudgetParams)
    assert cleared.budget is None
    with pytest.raises(msgspec.ValidationError, match="max_tokens"):
        msgspec.json.decode(b'{"session_id": "s", "budget": {"max_tokens": -1}}', type=SessionBudgetParams)


def test_readme_configuration_example_parses_without_problems(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```toml\n(.*?)```", readme[readme.index("## Configuration") :], re.S)
    assert match is not None
    (tmp_path / "config.toml").write_text(match.group(1), encoding="utf-8")
    config = load_config(tmp_path, env={})
    assert config.problems == []
    assert config.compaction.model == "anthropic/claude-haiku-4-5" and config.budget is not None
    assert "claude-opus-4-8" in config.providers["anthropic"].prices
