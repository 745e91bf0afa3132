"""Sessions end to end over the real protocol: events, persistence, cancel, queueing, forks."""

from contextlib import aclosing

import anyio
import pytest

from daemon.jsonrpc.client import RpcError
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


async def start(client, **params):
    result = await client.request("session/start", {"model_id": "mock/thinker", "thinking_level": "medium", **params})
    return result["session"]["session_id"], result


async def prompt_and_collect(client, session_id, text="Why is the sky blue?"):
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text})
    return turn, await client.collect_turn(turn["turn_id"])


def check_turn_shape(events):
    types = [e["type"] for e in events]
    assert types[0] == "turn_start" and types[-1] == "turn_end"
    assert types.count("turn_start") == 1 and types.count("turn_end") == 1
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "seq must be contiguous"


async def test_full_event_order_and_message_end_matches_store(home):
    async with in_memory_daemon(home) as (client, _):
        session_id, started = await start(client, cwd=str(home))
        assert started["thinking"]["effective"] == "medium"
        turn, events = await prompt_and_collect(client, session_id)
        assert turn["queued"] is False
        check_turn_shape(events)
        types = [e["type"] for e in events]
        # bracketing of blocks inside the message
        assert types[1] == "message_start"
        assert types.index("thinking_start") < types.index("thinking_delta") < types.index("thinking_end")
        assert (
            types.index("thinking_end")
            < types.index("text_start")
            < types.index("text_end")
            < types.index("message_end")
        )
        # deltas carry only new text: they concatenate to the *_end text
        thinking = "".join(e["delta"] for e in events if e["type"] == "thinking_delta")
        text = "".join(e["delta"] for e in events if e["type"] == "text_delta")
        [thinking_end] = [e for e in events if e["type"] == "thinking_end"]
        [text_end] = [e for e in events if e["type"] == "text_end"]
        assert thinking == thinking_end["text"] and text == text_end["text"]
        assert events[0]["user_message_id"]
        assert events[-1]["stop_reason"] == "end_turn"
        [message_end] = [e for e in events if e["type"] == "message_end"]
        stored = await client.request("session/messages", {"session_id": session_id})
        assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
        assert stored["messages"][1] == message_end["message"]
        assert stored["messages"][0]["message_id"] == events[0]["user_message_id"]
        assert message_end["message"]["thinking"] == thinking
        assert message_end["message"]["thinking_level"] == "medium"
        assert message_end["message"]["status"] == "complete"


async def test_thinking_survives_restart_byte_exact(home):
    async with in_memory_daemon(home) as (client, _):
        session_id, _ = await start(client, thinking_level="max")
        _, events = await prompt_and_collect(client, session_id, "Explain naïve café 東京 🧑‍🍳 please")
        [thinking_end] = [e for e in events if e["type"] == "thinking_end"]
    assert "東京" in thinking_end["text"] and "🧑\u200d🍳" in thinking_end["text"]
    async with in_memory_daemon(home) as (client, _):
        resumed = await client.request("session/resume", {"session_id": session_id})
        assistant = resumed["messages"][1]
        assert assistant["thinking"] == thinking_end["text"]
        assert assistant["content"][0] == {"type": "thinking", "text": thinking_end["text"], "redacted": False}
        assert resumed["session"]["message_count"] == 2
        assert resumed["thinking"]["requested"] == "max"
        # and the session keeps working after the restart
        _, events = await prompt_and_collect(client, session_id, "again")
        assert events[-1]["stop_reason"] == "end_turn"


def slow_mock(config):
    config.mock_delay_ms = 10


def slower_mock(config):
    # The first turn must still be running when the queue is full and the cancel arrives, also
    # on a loaded machine where admitting 18 prompts takes longer than a 10 ms-a-chunk reply.
    config.mock_delay_ms = 100


async def test_cancel_mid_thinking(home):
    async with in_memory_daemon(home, configure=slow_mock) as (client, _):
        session_id, _ = await start(client, thinking_level="max")
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "think hard"})
        events = []
        async for event in client.events(turn["turn_id"]):
            events.append(event)
            if event["type"] == "thinking_delta" and len([e for e in events if e["type"] == "thinking_delta"]) == 5:
                started = anyio.current_time()
                result = await client.request("session/cancel", {"session_id": session_id})
                assert result == {"cancelled": True, "dropped_queued": 0, "dropped_steers": []}
        elapsed = anyio.current_time() - started
        check_turn_shape(events)
        assert events[-1]["stop_reason"] == "cancelled"
        assert elapsed < 0.5
        [message_end] = [e for e in events if e["type"] == "message_end"]
        assert message_end["message"]["status"] == "interrupted"
        partial = "".join(e["delta"] for e in events if e["type"] == "thinking_delta")
        assert message_end["message"]["thinking"] == partial
        stored = await client.request("session/messages", {"session_id": session_id})
        assert stored["messages"][-1] == message_end["message"]
        again = await client.request("session/cancel", {"session_id": session_id})
        assert again == {"cancelled": False, "dropped_queued": 0, "dropped_steers": []}


async def test_queue_runs_in_order_and_overflows_with_session_busy(home):
    async with in_memory_daemon(home, configure=slower_mock) as (client, _):
        session_id, _ = await start(client, thinking_level="low")
        turns = []
        with pytest.raises(RpcError) as busy:
            for i in range(30):
                turns.append(await client.request("session/prompt", {"session_id": session_id, "text": f"q{i}"}))
        assert busy.value.code == -32004
        assert busy.value.data == {"session_id": session_id, "reason": "queue_full"}
        assert 17 <= len(turns) <= 18
        assert turns[0]["queued"] is False and all(t["queued"] for t in turns[1:])
        result = await client.request("session/cancel", {"session_id": session_id})
        assert result["cancelled"] is True and result["dropped_queued"] == len(turns) - 1
        # every admitted turn is bracketed, the dropped ones as cancelled
        pending = {t["turn_id"] for t in turns}
        starts = set()
        with anyio.fail_after(10):
            async with aclosing(client.events()) as stream:
                async for event in stream:
                    if event["type"] == "turn_start":
                        starts.add(event["turn_id"])
                    if event["type"] == "turn_end":
                        assert event["turn_id"] in starts and event["stop_reason"] == "cancelled"
                        pending.discard(event["turn_id"])
                        if not pending:
                            break


async def test_queued_prompts_are_stored_in_conversation_order(home):
    async with in_memory_daemon(home, configure=slow_mock) as (client, _):
        session_id, _ = await start(client, model_id="mock/echo")
        first = await client.request("session/prompt", {"session_id": session_id, "text": "one"})
        second = await client.request("session/prompt", {"session_id": session_id, "text": "two"})
        assert second["queued"] is True
        await client.collect_turn(first["turn_id"])
        await client.collect_turn(second["turn_id"])
        stored = await client.request("session/messages", {"session_id": session_id})
        texts = [(m["role"], m["content"][0]["text"]) for m in stored["messages"]]
        assert texts == [("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two")]
        assert [m["seq"] for m in stored["messages"]] == [1, 2, 3, 4]


async def test_two_daemons_on_one_home_never_run_one_session_twice(home):
    async with in_memory_daemon(home, configure=slow_mock) as (a, _):
        session_id, _ = await start(a, thinking_level="max")
        turn = await a.request("session/prompt", {"session_id": session_id, "text": "long"})
        async with in_memory_daemon(home) as (b, _):
            listed = await b.request("session/list", {})
            assert [s["session_id"] for s in listed["sessions"]] == [session_id]
            with pytest.raises(RpcError) as busy:
                await b.request("session/prompt", {"session_id": session_id, "text": "me too"})
            assert busy.value.code == -32004
            await a.request("session/cancel", {"session_id": session_id})
            await a.collect_turn(turn["turn_id"])
            # once the first daemon is done, the second may run turns (the limit only stops a hang)
            with anyio.fail_after(30):
                turn_b = await b.request("session/prompt", {"session_id": session_id, "text": "now"})
                events = await b.collect_turn(turn_b["turn_id"])
            assert events[-1]["stop_reason"] == "end_turn"


async def test_fork_rename_delete_and_paging(home):
    async with in_memory_daemon(home) as (client, _):
        session_id, _ = await start(client, title="original", cwd=str(home))
        await prompt_and_collect(client, session_id, "first")
        await prompt_and_collect(client, session_id, "second")
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert len(messages) == 4
        page = await client.request("session/messages", {"session_id": session_id, "after_seq": 1, "limit": 2})
        assert [m["seq"] for m in page["messages"]] == [2, 3] and page["next_seq"] == 3
        fork = (
            await client.request("session/fork", {"session_id": session_id, "message_id": messages[1]["message_id"]})
        )["session"]
        assert fork["parent_id"] == session_id and fork["message_count"] == 2
        forked = await client.request("session/messages", {"session_id": fork["session_id"]})
        assert [m["content"] for m in forked["messages"]] == [m["content"] for m in messages[:2]]
        renamed = await client.request("session/rename", {"session_id": fork["session_id"], "title": "the fork"})
        assert renamed["session"]["title"] == "the fork"
        listed = await client.request("session/list", {"limit": 1})
        assert len(listed["sessions"]) == 1 and listed["next_cursor"]
        rest = await client.request("session/list", {"limit": 10, "cursor": listed["next_cursor"]})
        assert {s["session_id"] for s in listed["sessions"] + rest["sessions"]} == {session_id, fork["session_id"]}
        assert (await client.request("session/list", {"cwd": "/nowhere"}))["sessions"] == []
        assert await client.request("session/delete", {"session_id": session_id}) == {"deleted": True}
        with pytest.raises(RpcError) as missing:
            await client.request("session/get", {"session_id": session_id})
        assert missing.value.code == -32001 and missing.value.data == {"session_id": session_id}
        # the fork lives on
        assert (await client.request("session/get", {"session_id": fork["session_id"]}))["session"][
            "title"
        ] == "the fork"


async def test_session_errors_are_clear(home):
    async with in_memory_daemon(home) as (client, _):
        for method, params in [
            ("session/prompt", {"session_id": "ses_nope", "text": "hi"}),
            ("session/resume", {"session_id": "ses_nope"}),
            ("session/cancel", {"session_id": "ses_nope"}),
            ("thinking/set", {"session_id": "ses_nope", "level": "low"}),
        ]:
            with pytest.raises(RpcError) as error:
                await client.request(method, params)
            assert error.value.code == -32001, method
        with pytest.raises(RpcError) as error:
            await client.request("session/start", {"model_id": "mock/thinkr"})
        assert error.value.code == -32002 and "mock/thinker" in error.value.data["suggestions"]
        with pytest.raises(RpcError) as error:
            await client.request("session/start", {"cwd": "/definitely/not/here"})
        assert error.value.code == -32602
        with pytest.raises(RpcError) as error:
            await client.request("session/start", {"thinking_level": "extreme"})
        assert error.value.code == -32602 and "high" in error.value.data["allowed"]
        session_id, _ = await start(client, model_id="anthropic/claude-sonnet-4-5")
        with pytest.raises(RpcError) as error:
            await client.request("session/prompt", {"session_id": session_id, "text": "hi"})
        assert error.value.code == -32003
        assert error.value.data["provider"] == "anthropic" and "ANTHROPIC_API_KEY" in error.value.data["hint"]


async def test_adjust_thinking_runs_once_per_provider_request(home, tmp_path, replay_server, monkeypatch):
    # A two-request tool loop on Anthropic: the adapter adjusts thinking for each request it
    # sends; the session no longer probes it a second time when it builds the turn.
    from daemon.providers.anthropic import AnthropicProvider

    calls = []
    original = AnthropicProvider.adjust_thinking

    def counted(self, request):
        calls.append(len(request.messages))
        return original(self, request)

    monkeypatch.setattr(AnthropicProvider, "adjust_thinking", counted)
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-e2e-key", "ANTHROPIC_BASE_URL": replay_server.url}
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use")
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use-turn2")
    async with in_memory_daemon(home, env=env) as (client, _):
        session_id, _ = await start(
            client, model_id="anthropic/claude-opus-4-6", cwd=str(tmp_path), approval_policy="auto"
        )
        _, events = await prompt_and_collect(client, session_id, "Should I bring an umbrella in Lyon today?")
    assert events[-1]["stop_reason"] == "end_turn"
    assert len(replay_server.requests) == 2
    assert calls == [1, 3], "once per request: the prompt alone, then with the tool call and its result"


async def test_a_cursor_the_store_refuses_is_invalid_params_at_params_cursor(home, monkeypatch):
    async with in_memory_daemon(home) as (client, _):
        with pytest.raises(RpcError) as error:
            await client.request("session/list", {"cursor": "garbage"})
    assert error.value.code == -32602
    assert error.value.message == "The cursor is not one session/list returned."
    assert error.value.data["errors"] == [{"path": "$.params.cursor", "message": error.value.message}]


async def test_waiting_for_a_turn_to_end_wakes_when_it_ends_not_on_a_timer():
    # shutdown and delete wait on this (an event), not on a 10 ms poll of live.current.
    from daemon.sessions.inbox import Inbox
    from daemon.sessions.live import LiveSession
    from daemon.store import SessionRow

    row = SessionRow(id="ses_x", cwd="/", model_id="mock/echo", thinking_level="off", approval_policy="auto")
    live = LiveSession(row=row, history=[], inbox=Inbox(1))
    await live.wait_turn_ended()  # nothing running: returns at once
    live.current = object()  # type: ignore[assignment]
    woke = anyio.Event()

    async def waiter():
        await live.wait_turn_ended()
        woke.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.05)
            assert not woke.is_set()
            live.turn_done()  # one turn ends and the next starts before the waiter runs
            live.current = object()  # type: ignore[assignment]
            await anyio.sleep(0.05)
            assert not woke.is_set(), "a new turn started: still waiting"
            live.turn_done()
            await woke.wait()
