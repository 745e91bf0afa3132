"""Compaction's rarer paths end to end, against a real ``ponder serve`` subprocess (issue #24).

A model on a local OpenAI-compatible server (real HTTP on 127.0.0.1):

- the budget is checked between an overflow's summary and the retried request: a summary that
  spends the budget ends the turn ``budget`` with no retry;
- a summary that does not shrink the request is paid for once and thrown away: no second summary
  for the same prompt, no loop, and the turn still ends;
- the summarizer's thinking level that the provider refuses is learned: the summary is asked for
  once more at the level the provider named, and that level is never sent to it again.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.context.summary import SYSTEM_PROMPT as SUMMARIZER_SYSTEM_PROMPT
from daemon.jsonrpc.client import RpcClient
from tests.support.compaction_turns import compact, of_type, prompt
from tests.support.file_reader import FileReaderChat, big_files, reader_config
from tests.support.harness import subprocess_daemon
from tests.support.replay import RecordedRequest, ReplayServer, ScriptedResponse
from tests.support.small_window import SmallWindowChat, small_window_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def project(tmp_path: Path, modules: int) -> Path:
    cwd = tmp_path / "proj"
    (cwd / "src").mkdir(parents=True)
    for n in range(modules):
        lines = "".join(f"    total += item_{n}_{i}  # the {i}th value of module {n}\n" for i in range(50))
        (cwd / "src" / f"m{n}.py").write_text(f"def f{n}(items):\n    total = 0\n{lines}    return total\n")
    return cwd


async def start(client: RpcClient, cwd: Path, model: str = "local/small", **params: Any) -> str:
    started = await client.request(
        "session/start", {"model_id": model, "cwd": str(cwd), "approval_policy": "auto", **params}
    )
    return started["session"]["session_id"]


def is_summary(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and messages[0].get("content") == SUMMARIZER_SYSTEM_PROMPT


# --- the budget between an overflow's summary and the retry ------------------------------------


async def test_the_budget_is_checked_between_an_overflow_summary_and_the_retry(anyio_backend, home, tmp_path):
    cwd = project(tmp_path, 4)
    chat = SmallWindowChat(window=100_000)
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(
            small_window_config(server.url, window=100_000, extra="keep_recent_tokens = 500")
        )
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            session_id = await start(client, cwd)
            for n in range(3):
                assert of_type(await prompt(client, session_id, f"Turn {n}: look at module {n}."), "turn_end")
            totals = (await client.request("session/get", {"session_id": session_id}))["session"]["totals"]
            spent = totals["input_tokens"] + totals["output_tokens"]
            # Room for the next request (an overflow bills nothing), none for the summary's tokens after it.
            await client.request("session/budget", {"session_id": session_id, "budget": {"max_tokens": spent + 10}})
            chat.overflow_next = 1  # the provider refuses the next request as too long
            events = await prompt(client, session_id, "Turn 3: look at module 3.")
            after = (await client.request("session/get", {"session_id": session_id}))["session"]["totals"]
    assert [(s["trigger"], e["status"]) for s, e in zip(of_type(events, "compaction_start"),
                                                      of_type(events, "compaction_end"), strict=True)] == [
        ("overflow", "completed")
    ]  # fmt: skip
    end = of_type(events, "turn_end")[-1]
    assert end["stop_reason"] == "budget", end
    assert end["error"]["code"] == -32011 and "token budget" in end["error"]["message"]
    assert [a.kind for a in chat.answers[-2:]] == ["overflow", "summary"]  # and no retried request after it
    assert after["input_tokens"] + after["output_tokens"] > spent + 10  # the summary is what spent it


# --- a summary thrown away --------------------------------------------------------------------

HUGE_SUMMARY = "## Goal\nRead the files.\n\n## Progress\n" + "".join(
    f"- [x] Read line {i} of every file and noted what it adds to the total.\n" for i in range(1500)
)


async def test_a_summary_that_does_not_shrink_the_request_is_paid_once_per_prompt(anyio_backend, home, tmp_path):
    cwd = tmp_path / "proj"
    files = big_files(cwd, count=6, size=12_000)
    chat = FileReaderChat(files, window=8_192, summary_text=HUGE_SUMMARY)
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(reader_config(server.url, windows={"small": 8_192}))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            session_id = await start(client, cwd, "local/small")
            events = await prompt(client, session_id, "Read every file under src/ and say what they compute.")
            first_summaries = len(chat.of_kind("summary"))
            chat.reads_issued = 0  # the next prompt reads them all again
            again = await prompt(client, session_id, "Read them once more.")
            second_summaries = len(chat.of_kind("summary")) - first_summaries
            listed = await client.request("session/messages", {"session_id": session_id})
    for turn_events, summaries in ((events, first_summaries), (again, second_summaries)):
        ends = of_type(turn_events, "compaction_end")
        paid = [e for e in ends if e.get("usage")]
        assert summaries == len(paid) == 1, ends  # one summary paid for, thrown away ...
        assert paid[0]["status"] == "skipped" and not paid[0].get("summary")  # ... and nothing stored
        # ... and no summary asked for after it in the same prompt: every later compaction is skipped unpaid.
        assert all(e["status"] == "skipped" and not e.get("usage") for e in ends[ends.index(paid[0]) + 1 :])
        end = of_type(turn_events, "turn_end")[-1]
        assert end["stop_reason"] in ("end_turn", "error"), end
        if end["stop_reason"] == "error":  # it could not fit: it says so once, with what to do
            assert "start a new session" in end["error"]["message"], end
    assert not [m for m in listed["messages"] if "Read line 3 of every file" in json.dumps(m)]


# --- the summarizer's refused level -------------------------------------------------------------

LEVELS_CONFIG = """
[providers.local]
api = "openai-chat"
base_url = "{url}/v1"

[[providers.local.models]]
model = "small"
context_window = 100000
max_output_tokens = 2048
thinking_levels = ["off", "low", "medium", "high"]
thinking_param = "reasoning_effort"

[compaction]
keep_recent_tokens = 500
thinking_level = "high"
"""
REFUSAL = {
    "error": {
        "message": "Unsupported value: 'reasoning_effort' does not support 'high' with this model. "
        "Supported values are: 'low' and 'medium'.",
        "type": "invalid_request_error",
        "param": "reasoning_effort",
        "code": "unsupported_value",
    }
}


async def test_a_level_the_provider_refuses_for_the_summary_is_retried_once_and_never_sent_again(
    anyio_backend, home, tmp_path
):
    cwd = project(tmp_path, 6)
    chat = SmallWindowChat(window=100_000)
    summaries: list[dict[str, Any]] = []

    def answer(request: RecordedRequest) -> ScriptedResponse:
        body = request.json()
        if is_summary(body):
            summaries.append(body)
            if body.get("reasoning_effort") == "high":
                return ScriptedResponse(
                    status=400, headers={"content-type": "application/json"}, body=json.dumps(REFUSAL).encode()
                )
        return chat.answer(request)

    with ReplayServer() as server:
        server.route("POST", "/v1/chat/completions", answer)
        (home / "config.toml").write_text(LEVELS_CONFIG.format(url=server.url))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            session_id = await start(client, cwd, thinking_level="low")
            for n in range(3):
                await prompt(client, session_id, f"Turn {n}: look at module {n}.")
            first = await compact(client, session_id)
            for n in range(3, 6):
                await prompt(client, session_id, f"Turn {n}: look at module {n}.")
            second = await compact(client, session_id)
    assert [e["status"] for e in of_type(first, "compaction_end")] == ["completed"]
    assert [e["status"] for e in of_type(second, "compaction_end")] == ["completed"]
    # Refused once at high, retried at the nearest level the provider named, which stays learned.
    assert [s.get("reasoning_effort") for s in summaries] == ["high", "medium", "medium"]
