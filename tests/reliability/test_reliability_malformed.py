"""Malformed provider data through the real daemon: invalid JSON, unknown events, missing or
mistyped fields, non-stream bodies and streams that end without their terminal event.

None of them crashes the session: unknown things are skipped (with a debug log), broken
ones end the turn with a clear error, the partial message is persisted as announced, and
the next prompt in the same session works.
"""

import json
import logging

import pytest

from tests.support.faults import (
    MESSAGE_START,
    PING,
    anthropic_env,
    arguments_delta,
    block_stop,
    message_end,
    of_type,
    prompt,
    sse,
    start_session,
    streamed,
    streamed_text,
    text_delta,
    text_reply,
    text_start,
    tool_use_start,
)
from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse, load_fixture

pytestmark = pytest.mark.anyio

BEFORE = [MESSAGE_START, text_start(), text_delta("so "), text_delta("far")]
AFTER = [text_delta(" and done"), block_stop(), *message_end()]


def event(kind: str, data: str) -> str:
    return f"event: {kind}\ndata: {data}\n\n"


# Skipped: the reply completes as if they were not there.
IGNORED = {
    "unknown event type": {"type": "content_block_sparkle", "index": 0, "glitter": True},
    "unknown block type": {"type": "content_block_start", "index": 5, "content_block": {"type": "hologram"}},
    "delta of an unknown block": text_delta("ghost", index=9),
    "unknown delta type": {"type": "content_block_delta", "index": 0, "delta": {"type": "telepathy_delta", "x": 1}},
    "delta without a type": {"type": "content_block_delta", "index": 0, "delta": {}},
    "delta without an index": {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "lost"}},
    "data that is not an object": event("content_block_delta", "[1, 2, 3]"),
    "a bare retry field": "retry: 100\n\n",
    "a comment": ": just a comment\n\n",
    "an event without data": "event: content_block_delta\n\n",
    "usage of the wrong shape": {"type": "message_delta", "delta": {}, "usage": "lots"},
}
# Broken: the turn ends with an error naming the problem; the partial message is kept.
BROKEN = {
    "invalid JSON": (
        event("content_block_delta", '{"type": "content_block_delta", "index": 0, "delta": {'),
        "not valid JSON",
    ),
    "invalid UTF-8": (b"event: content_block_delta\ndata: \xff\xfe\x80\n\n", "not valid JSON"),
    "index of the wrong type": (
        {"type": "content_block_delta", "index": None, "delta": {"type": "text_delta", "text": "x"}},
        "malformed content_block_delta event",
    ),
    "delta of the wrong type": (
        {"type": "content_block_delta", "index": 0, "delta": "x"},
        "malformed content_block_delta event",
    ),
    "block of the wrong type": (
        {"type": "content_block_start", "index": 1, "content_block": 7},
        "malformed content_block_start",
    ),
    "error event without details": ({"type": "error"}, "stream failed"),
}


def body_with(middle: dict | str | bytes) -> bytes:
    return sse(*BEFORE) + (middle if isinstance(middle, bytes) else sse(middle)) + sse(*AFTER)


async def run_turns(home, tmp_path, server, *responses: ScriptedResponse, texts=("first", "second")):
    for response in responses:
        server.enqueue(response)
    server.enqueue(streamed(text_reply("still ", "here")))
    async with in_memory_daemon(home, env=anthropic_env(server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        first = await prompt(client, session_id, texts[0])
        second = await prompt(client, session_id, texts[1])
        resumed = await client.request("session/resume", {"session_id": session_id})
    assert second[-1]["stop_reason"] == "end_turn" and streamed_text(second) == "still here", "the session goes on"
    return first, resumed["messages"]


@pytest.mark.parametrize("case", list(IGNORED))
async def test_unknown_or_unusable_events_are_skipped(home, tmp_path, replay_server, caplog, case):
    caplog.set_level(logging.DEBUG, logger="ponder.providers.anthropic")
    events, stored = await run_turns(
        home, tmp_path, replay_server, streamed(body_with(IGNORED[case]), split_at=[300, 301])
    )
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert streamed_text(events) == "so far and done"
    assert stored[1]["status"] == "complete" and stored[1]["content"] == [{"type": "text", "text": "so far and done"}]
    if case == "unknown event type":
        assert "ignoring an unknown anthropic stream event 'content_block_sparkle'" in caplog.text


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_events_end_the_turn_and_keep_the_partial_message(home, tmp_path, replay_server, case):
    middle, why = BROKEN[case]
    events, stored = await run_turns(home, tmp_path, replay_server, streamed(body_with(middle)))
    end = events[-1]
    assert end["stop_reason"] == "error" and why in end["error"]["message"], end
    assert end["error"]["message"].endswith(".") and "Traceback" not in end["error"]["message"]
    assert streamed_text(events) == "so far"
    [message_end_event] = of_type(events, "message_end")
    assert message_end_event["message"]["status"] == "error"
    assert stored[1] == message_end_event["message"] and stored[1]["content"] == [{"type": "text", "text": "so far"}]


async def test_truncated_streams_end_with_a_clear_error(home, tmp_path, replay_server):
    # text cut off: no content_block_stop, message_delta or message_stop
    cut_text = streamed(sse(*BEFORE))
    # a tool call cut off in the middle of its arguments
    cut_call = streamed(
        sse(
            MESSAGE_START,
            tool_use_start(),
            arguments_delta('{"path": "RE'),
            PING,
        )
    )
    replay_server.enqueue(cut_text)
    replay_server.enqueue(cut_call)
    replay_server.enqueue(streamed(text_reply("recovered")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        first = await prompt(client, session_id, "one")
        second = await prompt(client, session_id, "two")
        third = await prompt(client, session_id, "three")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    for events in (first, second):
        assert events[-1]["stop_reason"] == "error"
        assert (
            events[-1]["error"]["message"]
            == "The anthropic stream ended early (no message_stop); the response is incomplete."
        )
        assert not of_type(events, "tool_execution_start"), "a cut-off call never runs"
    assert third[-1]["stop_reason"] == "end_turn"
    roles = [(m["role"], m["status"]) for m in stored]
    assert roles == [
        ("user", "complete"),
        ("assistant", "error"),
        ("user", "complete"),
        ("assistant", "error"),
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert stored[1]["content"] == [{"type": "text", "text": "so far"}]
    assert stored[3]["content"] == [{"type": "tool_call", "call_id": "toolu_1", "name": "read_file", "arguments": {}}]
    # the next request leaves the call cut off mid-arguments out (PROTOCOL.md: unfinished tool-call
    # arguments are never sent), and with it any result, so the provider accepts the history
    sent = json.loads(replay_server.requests[2].body)["messages"]
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"]]
    assert not [b for b in blocks if b["type"] in ("tool_use", "tool_result")]
    assert "toolu_1" not in replay_server.requests[2].body.decode()


async def test_bodies_that_are_not_event_streams(home, tmp_path, replay_server):
    html = ScriptedResponse(status=200, headers={"content-type": "text/html"}, body=b"<html>captive portal</html>")
    empty = streamed(b"")
    garbage = streamed(b"\x00\xff\xfe garbage without any structure \x89PNG\r\n\x1a\n")
    replay_server.enqueue(html)
    replay_server.enqueue(empty)
    replay_server.enqueue(garbage)
    replay_server.enqueue(streamed(text_reply("ok")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        outcomes = [await prompt(client, session_id, text) for text in ("a", "b")]
    assert "content-type 'text/html' instead of an event stream" in outcomes[0][-1]["error"]["message"]
    # an empty or unreadable stream ends early before any output: retried, then the reply comes
    retries = [e for e in outcomes[1] if e["type"] == "retry"]
    assert [r["attempt"] for r in retries] == [2, 3]
    assert all("ended early" in r["error"]["message"] for r in retries)
    assert outcomes[1][-1]["error"] is None and streamed_text(outcomes[1]) == "ok"


DEEPSEEK = "deepseek/deepseek-chat"


def chunk(**delta) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}) + "\n\n"


async def test_openai_style_streams_survive_the_same_faults(home, tmp_path, replay_server):
    env = {"DEEPSEEK_API_KEY": "sk-deepseek-test", "DEEPSEEK_BASE_URL": replay_server.url}
    begun = chunk(role="assistant", content="so ") + chunk(content="far")
    replay_server.enqueue(streamed((begun + "data: {oops\n\n").encode()))  # invalid JSON
    replay_server.enqueue(streamed((begun + 'data: {"object": "mystery.event"}\n\n').encode()))  # then cut off
    done = 'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    replay_server.enqueue(streamed((chunk(content="fine") + done).encode()))
    async with in_memory_daemon(home, env=env) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id=DEEPSEEK)
        invalid = await prompt(client, session_id, "one")
        cut = await prompt(client, session_id, "two")
        fine = await prompt(client, session_id, "three")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert invalid[-1]["stop_reason"] == "error" and "not valid JSON" in invalid[-1]["error"]["message"]
    assert cut[-1]["stop_reason"] == "error" and "ended early" in cut[-1]["error"]["message"]
    assert fine[-1]["stop_reason"] == "end_turn" and streamed_text(fine) == "fine"
    assistants = [m for m in stored if m["role"] == "assistant"]
    assert [m["status"] for m in assistants] == ["error", "error", "complete"]
    assert assistants[0]["content"] == assistants[1]["content"] == [{"type": "text", "text": "so far"}]


async def test_responses_api_streams_skip_unknown_events_and_stop_at_malformed_ones(
    home, tmp_path, replay_server, caplog
):
    caplog.set_level(logging.DEBUG, logger="ponder.providers.openai_responses")
    meta, body = load_fixture("openai-responses", "reasoning-summary-text")
    blocks = body.decode().split("\n\n")
    first_text = next(i for i, b in enumerate(blocks) if '"type":"response.output_text.delta"' in b)
    unknown = 'event: response.brand_new_thing\ndata: {"type": "response.brand_new_thing", "sequence_number": 99}'
    malformed = (
        "event: response.output_item.added\n"
        'data: {"type": "response.output_item.added", "output_index": 7, "item": "oops"}'
    )
    with_unknown = "\n\n".join([*blocks[: first_text + 1], unknown, *blocks[first_text + 1 :]]).encode()
    cut_off = "\n\n".join([*blocks[: first_text + 1], malformed, *blocks[first_text + 1 :]]).encode()
    for response_body in (with_unknown, cut_off):
        replay_server.enqueue(
            ScriptedResponse(status=200, headers=dict(meta["response"]["headers"]), body=response_body)
        )
    env = {"OPENAI_API_KEY": "sk-openai-test", "OPENAI_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id="openai/gpt-5.2")
        skipped = await prompt(client, session_id, "one")
        broken = await prompt(client, session_id, "two")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert skipped[-1]["stop_reason"] == "end_turn" and streamed_text(skipped) == meta["expected"]["text"]
    assert "ignoring a openai stream event of type 'response.brand_new_thing'" in caplog.text
    end = broken[-1]
    assert (
        end["stop_reason"] == "error"
        and end["error"]["message"] == "openai sent a malformed response.output_item.added event."
    )
    first_delta = json.loads(blocks[first_text].split("data: ", 1)[1])["delta"]
    assert streamed_text(broken) == first_delta
    assert stored[-1]["status"] == "error" and stored[-1]["content"][-1] == {"type": "text", "text": first_delta}


async def test_a_tool_use_stop_without_tool_calls_ends_the_turn_end_turn(home, tmp_path, replay_server):
    # "tool_use" is a reply's stop reason, never a turn's: with nothing to run the turn is over.
    no_calls = streamed(
        sse(MESSAGE_START, text_start(), text_delta("nothing to run"), block_stop(), *message_end("tool_use"))
    )
    events, stored = await run_turns(home, tmp_path, replay_server, no_calls)
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert stored[1]["stop_reason"] == "tool_use"  # the message keeps what the provider said
