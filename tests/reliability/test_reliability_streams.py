"""Provider streams that would hold the daemon hostage, through the real daemon against a real
HTTP server on 127.0.0.1: an event that never ends, a gzip bomb, keep-alives forever, a
client that stops reading, and data that used to end a turn with an internal error.
"""

import gzip
import json
import sqlite3
import zlib
from contextlib import aclosing

import anyio
import msgspec
import pytest

from daemon.agent import CANCELLED_RESULT
from daemon.agent import reply as agent_reply
from daemon.config.settings import load_config
from daemon.conversation import ChatMessage, Part
from daemon.server import serve
from daemon.sessions import persistence
from daemon.store import AsyncStore, SessionRow, Store, StoreError
from daemon.store import db as store_module
from protocol import events as ev
from tests.support.faults import (
    MESSAGE_START,
    PING,
    SSE_HEADERS,
    anthropic_env,
    arguments_delta,
    block_stop,
    in_chunks,
    message_end,
    of_type,
    prompt,
    sse,
    start_session,
    streamed,
    streamed_text,
    text_delta,
    text_in_pieces,
    text_reply,
    text_start,
    tool_use_start,
)
from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse

pytestmark = pytest.mark.anyio


def limits(config, *, event: int | None = None, response: int | None = None) -> None:
    config.retry_max_attempts = 1
    if event is not None:
        config.max_event_bytes = event
    if response is not None:
        config.max_response_bytes = response


async def two_turns(home, tmp_path, server, first: ScriptedResponse, configure, model_id=None, env=None):
    """Run a turn on ``first`` and a normal one after it; return the first turn's events and the stored messages."""
    server.enqueue(first)
    server.enqueue(streamed(text_reply("still ", "here")))
    async with in_memory_daemon(home, env=env or anthropic_env(server), configure=configure) as (client, _):
        session_id = await start_session(client, str(tmp_path), **({"model_id": model_id} if model_id else {}))
        events = await prompt(client, session_id, "first")
        second = await prompt(client, session_id, "second")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert second[-1]["stop_reason"] == "end_turn" and streamed_text(second) == "still here", "the session goes on"
    return events, stored


# --- size caps ----------------------------------------------------------------------------


async def test_an_event_that_never_ends_is_cut_off_at_max_event_bytes_from_config_toml(home, tmp_path, replay_server):
    (home / "config.toml").write_text("[reliability]\nmax_event_bytes = 65536\nmax_attempts = 1\n", encoding="utf-8")
    head = sse(MESSAGE_START, text_start(), text_delta("so far"))
    endless = b"event: content_block_delta\ndata: " + b"x" * 300_000  # no line break, ever
    response = streamed(head + endless, split_at=list(range(len(head), len(head) + 300_000, 16_384)))
    events, stored = await two_turns(home, tmp_path, replay_server, response, configure=None)
    end = events[-1]
    assert end["stop_reason"] == "error"
    assert end["error"]["message"].startswith(
        "anthropic sent a stream event larger than 64 KiB; the response was aborted"
    )
    assert "max_event_bytes" in end["error"]["message"]
    assert streamed_text(events) == "so far"
    assert stored[1]["status"] == "error" and stored[1]["content"] == [{"type": "text", "text": "so far"}]


async def test_an_event_of_many_data_lines_counts_as_one_event(home, tmp_path, replay_server):
    many_lines = b"event: content_block_delta\n" + b"data: xxxxxxxxxx\n" * 20_000 + b"\n"  # 340 KB, short lines
    response = streamed(sse(MESSAGE_START, text_start(), text_delta("so far")) + many_lines)
    events, _ = await two_turns(home, tmp_path, replay_server, response, configure=lambda c: limits(c, event=65536))
    assert events[-1]["stop_reason"] == "error" and "larger than 64 KiB" in events[-1]["error"]["message"]


async def test_a_long_ndjson_line_is_cut_off_too(home, tmp_path, replay_server):
    from daemon.providers.ollama import clear_discovery_cache
    from tests.e2e.test_e2e_providers import enqueue_ollama_discovery

    clear_discovery_cache()
    enqueue_ollama_discovery(replay_server)
    replay_server.enqueue(
        ScriptedResponse(headers={"content-type": "application/x-ndjson"}, body=b'{"message": "' + b"y" * 200_000)
    )
    env = {"OLLAMA_HOST": replay_server.url}
    async with in_memory_daemon(home, env=env, configure=lambda c: limits(c, event=65536)) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id="ollama/gpt-oss:20b")
        events = await prompt(client, session_id, "hi")
    clear_discovery_cache()
    end = events[-1]
    assert end["stop_reason"] == "error" and end["error"]["message"].startswith(
        "ollama sent a stream event larger than 64 KiB"
    )


def gzip_of(piece: bytes, times: int) -> bytes:
    """``piece * times``, gzip-compressed without ever holding it whole."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [compressor.compress(piece * 1024) for _ in range(times // 1024)]
    return b"".join([*out, compressor.flush()])


async def test_a_gzip_bomb_ends_the_response_at_max_response_bytes(home, tmp_path, replay_server):
    # 64 MiB of comment lines (valid SSE, carrying nothing) in ~200 KB on the wire
    head = sse(MESSAGE_START, text_start(), text_delta("so far"))
    bomb = gzip.compress(head) + gzip_of(b":" + b" " * 1022 + b"\n", 64 * 1024)
    headers = {**SSE_HEADERS, "content-encoding": "gzip"}
    response = ScriptedResponse(headers=headers, body=bomb)
    events, stored = await two_turns(
        home, tmp_path, replay_server, response, configure=lambda c: limits(c, response=4 * 1024 * 1024)
    )
    end = events[-1]
    assert end["stop_reason"] == "error"
    assert end["error"]["message"].startswith("anthropic sent a response larger than 4 MiB (decompressed)")
    assert streamed_text(events) == "so far", "the gzip members before the bomb were read"
    assert stored[1]["content"] == [{"type": "text", "text": "so far"}]


async def test_a_compressed_stream_is_inflated_in_bounded_steps(replay_server):
    from daemon.providers.base import StreamLimits
    from daemon.providers.http import DECOMPRESS_STEP, aiter_body, make_client

    replay_server.enqueue(ScriptedResponse(headers={"content-encoding": "gzip"}, body=gzip_of(b"z" * 1024, 16 * 1024)))
    sizes = []
    async with make_client() as client, client.stream("GET", replay_server.url) as response:
        async for chunk in aiter_body(response, "test", StreamLimits()):
            assert chunk == b"z" * len(chunk)
            sizes.append(len(chunk))
    assert sum(sizes) == 16 * 1024 * 1024 and max(sizes) <= DECOMPRESS_STEP


# --- incremental checkpoints ----------------------------------------------------------------


async def test_checkpoints_append_only_the_text_that_arrived_since_the_last_one(
    home, tmp_path, replay_server, monkeypatch
):
    monkeypatch.setattr(agent_reply, "CHECKPOINT_S", 0.0)  # a checkpoint after every delta
    appended = []
    original = AsyncStore.append_to_message

    async def recording(self, message_id, parts, texts, **options):
        appended.append((parts, dict(texts), options))
        await original(self, message_id, parts, texts, **options)

    monkeypatch.setattr(AsyncStore, "append_to_message", recording)
    pieces = [f"piece {i}; " for i in range(40)]
    replay_server.enqueue(text_in_pieces(pieces, chunk_delay_s=0.005))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "go")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "".join(pieces)
    *checkpoints, (parts, rest, options) = appended
    texts = [texts[0] for parts, texts, _ in checkpoints if 0 in texts]
    assert len(texts) >= len(pieces) - 3, "after the first checkpoint (a whole save), each one appends"
    assert texts == pieces[len(pieces) - len(texts) : len(pieces) - len(texts) + len(texts)], "only the new delta"
    assert "".join(texts) + rest.get(0, "") == "".join(pieces)[-len("".join(texts) + rest.get(0, "")) :]
    # the final save is a checkpoint too: the part's fields, its stored text kept, the rest appended
    assert options["keep_text"] == {0} and options["final"].status == "complete" and parts[0].text == "".join(pieces)
    assert stored[-1]["content"] == [{"type": "text", "text": "".join(pieces)}] and stored[-1]["status"] == "complete"


def test_appended_text_is_read_back_forked_and_folded_by_the_final_save(tmp_path):
    path = tmp_path / "sessions.db"
    with Store(path) as store:
        store.create_session(SessionRow(id="s1", cwd="/", model_id="m", thinking_level="off"))
        message = ChatMessage(
            message_id="m1",
            session_id="s1",
            seq=1,
            role="assistant",
            status="interrupted",
            parts=[Part(type="thinking", text="hm"), Part(type="text", text="a")],
        )
        with pytest.raises(StoreError):
            store.append_to_message("m-unknown", {}, {0: "x"})
        store.save_message(message)
        store.append_to_message("m1", {}, {1: "bc"})
        store.append_to_message("m1", {0: Part(type="thinking", text="hmm", signature="sig")}, {1: "d"})
        store.append_to_message("m1", {2: Part(type="text", text="e")}, {2: "f", 1: "!"})
        [read] = store.get_messages("s1")
        assert [(p.type, p.text, p.signature) for p in read.parts] == [
            ("thinking", "hmm", "sig"),
            ("text", "abcd!", None),
            ("text", "ef", None),
        ]
        forked = store.fork_session("s1", SessionRow(id="s2", cwd="/", model_id="m", thinking_level="off"))
        assert [p.text for p in store.get_messages(forked.id)[0].parts] == ["hmm", "abcd!", "ef"]
        done = msgspec.structs.replace(read, status="complete", stop_reason="end_turn")
        done.parts[1] = Part(type="text", text="abcd!?", provider="p", model="m")
        store.append_to_message("m1", {1: done.parts[1]}, {1: "?"}, keep_text=frozenset({1}), final=done)
        [final] = store.get_messages("s1")
        assert (final.status, final.stop_reason) == ("complete", "end_turn")
        assert [(p.text, p.provider) for p in final.parts] == [("hmm", None), ("abcd!?", "p"), ("ef", None)]
        with pytest.raises(StoreError):
            store.append_to_message("m1", {7: Part(type="text")}, {}, keep_text=frozenset({7}))
        store.save_message(final)
        assert [p.text for p in store.get_messages("s1")[0].parts] == ["hmm", "abcd!?", "ef"]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM part_appends WHERE message_id = 'm1'").fetchone() == (0,)


async def test_a_checkpoint_the_store_refuses_leaves_the_final_save_whole(home, tmp_path, replay_server, monkeypatch):
    """A refused append must not be counted as stored: the final save (the store taking writes
    again) holds every delta the client saw, not the text around the refused one."""
    monkeypatch.setattr(agent_reply, "CHECKPOINT_S", 0.0)  # a checkpoint after every delta
    pieces = [f"piece {i}; " for i in range(8)]
    replay_server.enqueue(text_in_pieces(pieces, chunk_delay_s=0.005))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        with sqlite3.connect(home / "sessions.db") as db:  # refuses exactly one append: that of piece 5
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON part_appends WHEN NEW.text = 'piece 5; ' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        events = await prompt(client, session_id, "go")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert events[-1]["stop_reason"] == "error"
    [end] = of_type(events, "message_end")
    shown = end["message"]["content"][0]["text"]
    assert shown == "".join(pieces[:6]), "the stream stopped at the refused checkpoint"
    assert stored[-1]["content"] == [{"type": "text", "text": shown}] and stored[-1]["status"] == "error"


async def test_a_checkpointed_reply_kept_in_memory_is_saved_whole_later_without_doubled_text(
    home, tmp_path, replay_server, monkeypatch
):
    """Appends stored part of the reply, then the store's lock was held past the busy timeout:
    the reply waits in memory and the periodic retry saves it whole, which replaces the
    appended rows instead of adding its text to them."""
    monkeypatch.setattr(agent_reply, "CHECKPOINT_S", 0.0)  # a checkpoint after every delta
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 200)
    monkeypatch.setattr(persistence, "STORE_RETRY_S", 0.1)
    pieces = [f"piece {i}; " for i in range(12)]
    replay_server.enqueue(text_in_pieces(pieces, chunk_delay_s=0.05))
    holder = sqlite3.connect(home / "sessions.db", isolation_level=None, timeout=10, check_same_thread=False)
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "go"})
        events = []
        try:
            with anyio.fail_after(20):
                async for event in client.events(turn["turn_id"]):
                    events.append(event)
                    if event["type"] == "text_delta" and event["delta"] == pieces[4]:
                        holder.execute("BEGIN IMMEDIATE")
        finally:
            if holder.in_transaction:
                holder.execute("COMMIT")
            holder.close()
        [end] = of_type(events, "message_end")
        shown = end["message"]["content"][0]["text"]
        with anyio.fail_after(10):
            while True:
                stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
                if stored[-1]["status"] != "interrupted":  # a checkpoint's status: the final save is not in yet
                    break
                await anyio.sleep(0.05)
    assert events[-1]["stop_reason"] == "error" and "not saved yet" in events[-1]["error"]["message"]
    assert shown.startswith("".join(pieces[:5])) and "".join(pieces).startswith(shown)
    assert len(stored) == 2 and stored[1]["status"] == "error"
    assert stored[1]["content"] == [{"type": "text", "text": shown}], "saved whole, the appended text not doubled"
    with sqlite3.connect(home / "sessions.db") as db:
        assert db.execute("SELECT count(*) FROM part_appends").fetchone() == (0,)


# --- keep-alives forever -------------------------------------------------------------------


async def test_keep_alives_without_progress_end_the_turn_after_no_progress_timeout(home, tmp_path, replay_server):
    pings = [PING] * 12  # 1.2 s of pings, 0.1 s apart: alive, but the model says nothing
    head = sse(MESSAGE_START)
    body = head + sse(*pings, text_start(), text_delta("too late"), block_stop(), *message_end())
    cuts = [len(head + sse(*pings[:n])) for n in range(1, len(pings) + 1)]

    def configure(config):
        limits(config)
        config.stall_timeout_s = 0.5  # each ping is life for this one
        config.no_progress_timeout_s = 0.6

    events, stored = await two_turns(
        home, tmp_path, replay_server, streamed(body, split_at=cuts, chunk_delay_s=0.1), configure=configure
    )
    end = events[-1]
    assert end["stop_reason"] == "error"
    assert end["error"]["message"] == "anthropic sent only keep-alives for 0.6 s; the stream was aborted."
    assert not of_type(events, "message_start") and [m["role"] for m in stored[:2]] == ["user", "user"]


def test_no_progress_timeout_is_read_from_config_toml(home):
    (home / "config.toml").write_text(
        "[reliability]\nno_progress_timeout_s = 120\nmax_event_bytes = 1048576\nmax_response_bytes = 'lots'\n",
        encoding="utf-8",
    )
    config = load_config(home, env={})
    assert (config.no_progress_timeout_s, config.max_event_bytes) == (120.0, 1048576)
    assert config.max_response_bytes == 1024**3 and any("max_response_bytes" in p for p in config.problems)


# --- a client that stops reading --------------------------------------------------------------


async def test_a_client_that_stops_reading_is_not_a_stalled_provider(home, tmp_path, replay_server):
    pieces = [f"word{i} " for i in range(400)]
    replay_server.enqueue(streamed(text_reply(*pieces)))
    config = load_config(home, env={"PONDER_MOCK_DELAY_MS": "0", **anthropic_env(replay_server)})
    config.stall_timeout_s, config.retry_max_attempts = 0.3, 1
    to_daemon, daemon_in = anyio.create_memory_object_stream[bytes](100)
    daemon_out, from_daemon = anyio.create_memory_object_stream[bytes](8)  # a pipe that fills up
    ids = iter(range(1, 100))

    async def request(method, params):
        request_id = next(ids)
        await to_daemon.send(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
        )
        with anyio.fail_after(10):
            async for line in from_daemon:
                message = json.loads(line)
                if message.get("id") == request_id:
                    return message["result"]

    async def run_daemon():
        async with daemon_out:
            await serve(config, daemon_in, daemon_out)

    events = []
    async with from_daemon, anyio.create_task_group() as tg:
        tg.start_soon(run_daemon)
        await request(
            "initialize", {"protocol_version": 1, "client_info": {"name": "t", "version": "0"}, "capabilities": {}}
        )
        started = await request(
            "session/start", {"model_id": "anthropic/claude-opus-4-6", "cwd": str(tmp_path), "approval_policy": "auto"}
        )
        await request("session/prompt", {"session_id": started["session"]["session_id"], "text": "hi"})
        await anyio.sleep(1.5)  # not reading: five stall timeouts pass while the daemon waits on us
        with anyio.fail_after(10):
            async for line in from_daemon:
                message = json.loads(line)
                if message.get("method") == "agent/event":
                    events.append(message["params"])
                    if message["params"]["type"] == "turn_end":
                        break
        await to_daemon.aclose()
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert streamed_text(events) == "".join(pieces)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "no event was dropped"


# --- errors that used to be internal -------------------------------------------------------------


def tool_use(arguments_json: str) -> bytes:
    return sse(
        MESSAGE_START,
        tool_use_start(),
        arguments_delta(arguments_json),
        block_stop(),
        *message_end("tool_use"),
    )


async def test_deeply_nested_tool_arguments_are_a_tool_error(home, tmp_path, replay_server):
    replay_server.enqueue(streamed(tool_use('{"path": ' + "[" * 5000 + "]" * 5000 + "}")))
    replay_server.enqueue(streamed(text_reply("sorry, ", "simpler then")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "read it")
    [result] = of_type(events, "tool_execution_end")
    assert result["is_error"] and "nested more than 100 levels deep" in result["result"]
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "sorry, simpler then"
    sent = json.loads(replay_server.requests[1].body)["messages"][-1]["content"]
    assert sent[0]["type"] == "tool_result" and sent[0]["is_error"] is True


async def test_a_lone_surrogate_from_a_provider_is_a_provider_error(home, tmp_path, replay_server):
    def chunk(text_json: str) -> bytes:
        return (
            f'data: {{"candidates": [{{"content": {{"parts": [{{"text": "{text_json}"}}], '
            '"role": "model"}, "index": 0}]}\n\n'
        ).encode()

    body = chunk("so far ") + chunk("broken \\ud800 text")
    replay_server.enqueue(ScriptedResponse(headers={"content-type": "text/event-stream"}, body=body))
    env = {"GEMINI_API_KEY": "AIza-fake", "GEMINI_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env, configure=limits) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id="gemini/gemini-3.1-pro-preview")
        events = await prompt(client, session_id, "hi")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    end = events[-1]
    assert end["stop_reason"] == "error"
    assert (
        end["error"]["message"]
        == "gemini sent text that is not valid Unicode (a lone UTF-16 surrogate); the response was aborted."
    )
    assert streamed_text(events) == "so far "
    assert stored[-1]["status"] == "error" and stored[-1]["content"] == [{"type": "text", "text": "so far "}]


# --- a prompt queued during a tool turn ---------------------------------------------------------


async def test_a_prompt_queued_during_a_tool_turn_waits_for_its_own_turn(home, tmp_path, replay_server):
    (tmp_path / "notes.txt").write_text("the notes", encoding="utf-8")
    calling = [
        sse(MESSAGE_START),
        sse(tool_use_start()),
        sse(arguments_delta('{"path": "notes')),
        sse(arguments_delta('.txt"}')),
        sse(block_stop(), *message_end("tool_use")),
    ]
    replay_server.enqueue(in_chunks(calling, chunk_delay_s=0.3))
    replay_server.enqueue(streamed(text_reply("they say: the notes")))
    replay_server.enqueue(streamed(text_reply("and now the second")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        first = await client.request("session/prompt", {"session_id": session_id, "text": "read my notes"})
        events = []
        async for event in client.events(first["turn_id"]):
            events.append(event)
            if event["type"] == "tool_call_start":  # the tool_use block is still streaming
                second = await client.request("session/prompt", {"session_id": session_id, "text": "QUEUED QUESTION"})
                assert second["queued"] is True
                resumed = await client.request("session/resume", {"session_id": session_id})
        later = await client.collect_turn(second["turn_id"])
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert events[-1]["stop_reason"] == "end_turn" and later[-1]["stop_reason"] == "end_turn"
    assert resumed["messages"][-1]["content"] == [{"type": "text", "text": "QUEUED QUESTION"}], "stored at once"
    during = [json.loads(r.body)["messages"] for r in replay_server.requests[:2]]
    assert "QUEUED QUESTION" not in json.dumps(during), "the queued prompt stays out of the running turn"
    results = during[1][-1]
    assert results["role"] == "user" and [b["type"] for b in results["content"]] == ["tool_result"]
    own = json.loads(replay_server.requests[2].body)["messages"]
    assert own[-1] == {"role": "user", "content": "QUEUED QUESTION"}
    roles = [(m["role"], m["content"][0].get("text")) for m in stored]
    assert roles == [
        ("user", "read my notes"),
        ("assistant", None),
        ("tool", "     1\tthe notes"),
        ("assistant", "they say: the notes"),
        ("user", "QUEUED QUESTION"),
        ("assistant", "and now the second"),
    ]
    assert [m["seq"] for m in stored] == sorted(m["seq"] for m in stored)


async def test_a_prompt_dropped_by_a_cancel_mid_tool_call_stays_after_the_calls_results(home, tmp_path, replay_server):
    """Cancelling a reply that is streaming a tool call records "cancelled" results for it; a
    queued prompt the cancel drops joins the history after them, never between the call and
    its result (a provider refuses that history, and the session could not go on)."""
    calling = [
        sse(MESSAGE_START),
        sse(tool_use_start()),
        sse(arguments_delta('{"path": "notes')),
        sse(block_stop(), *message_end("tool_use")),
    ]
    replay_server.enqueue(in_chunks(calling, chunk_delay_s=1.0))
    replay_server.enqueue(streamed(text_reply("going on")))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        first = await client.request("session/prompt", {"session_id": session_id, "text": "read my notes"})
        ends = {}
        with anyio.fail_after(20):
            async with aclosing(client.events()) as events:
                async for event in events:
                    if event["type"] == "tool_call_start":  # the tool_use block is still streaming
                        queued = {"session_id": session_id, "text": "QUEUED QUESTION"}
                        second = await client.request("session/prompt", queued)
                        cancelled = await client.request("session/cancel", {"session_id": session_id})
                        assert cancelled == {"cancelled": True, "dropped_queued": 1, "dropped_steers": []}
                    elif event["type"] == "turn_end":
                        ends[event["turn_id"]] = event["stop_reason"]
                        if len(ends) == 2:
                            break
        third = await prompt(client, session_id, "go on")
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
    assert ends == {first["turn_id"]: "cancelled", second["turn_id"]: "cancelled"}
    assert third[-1]["stop_reason"] == "end_turn"
    roles = [(m["role"], m["content"][0].get("text")) for m in stored]
    assert roles[:4] == [
        ("user", "read my notes"),
        ("assistant", None),
        ("tool", CANCELLED_RESULT),
        ("user", "QUEUED QUESTION"),
    ]
    assert [m["seq"] for m in stored] == sorted(m["seq"] for m in stored)
    # The call was cut off mid-arguments: it is not sent (PROTOCOL.md), nor its result, so the
    # prompts follow the first one directly.
    sent = json.loads(replay_server.requests[-1].body)["messages"]
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"]]
    assert not [b for b in blocks if b["type"] in ("tool_use", "tool_result")]
    assert "QUEUED QUESTION" in json.dumps(sent)


async def test_a_stream_frame_nested_past_the_decoders_limit_is_a_provider_error(home, tmp_path, replay_server):
    deep = "[" * 5000 + "]" * 5000
    frame = (
        'data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "read_file", '
        f'"args": {{"path": {deep}}}}}}}], "role": "model"}}, "index": 0}}]}}\n\n'
    )
    replay_server.enqueue(ScriptedResponse(headers={"content-type": "text/event-stream"}, body=frame.encode()))
    env = {"GEMINI_API_KEY": "AIza-fake", "GEMINI_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env, configure=limits) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id="gemini/gemini-3.1-pro-preview")
        events = await prompt(client, session_id, "hi")
    end = events[-1]
    assert end["stop_reason"] == "error"
    assert end["error"]["message"] == "gemini sent data nested too deeply to read; the response was aborted."


@pytest.mark.slow
async def test_a_real_daemon_whose_client_stops_reading_ends_every_turn_without_gaps(
    home, tmp_path, replay_server, anyio_backend
):
    """``ponder serve`` as a subprocess: the client reads nothing for five stall timeouts while
    6 MB of events back up in the pipe and the daemon's output queue."""
    import sys

    from anyio.streams.buffered import BufferedByteReceiveStream

    from tests.support.harness import subprocess_env

    # 1 s, not less: the replay server shares this test's process, and on a busy machine (the
    # suite's workers side by side) it has gone quiet for 0.3 s on its own.
    (home / "config.toml").write_text("[reliability]\nstall_timeout_s = 1.0\nmax_attempts = 1\n", encoding="utf-8")
    pieces = [f"{i:06d}" + "x" * 994 for i in range(6000)]
    replay_server.enqueue(streamed(text_reply(*pieces)))
    env = subprocess_env(home, {**anthropic_env(replay_server), "PONDER_ASYNC_BACKEND": anyio_backend})
    process = await anyio.open_process([sys.executable, "-m", "daemon", "serve"], env=env)
    assert process.stdin is not None and process.stdout is not None
    lines = BufferedByteReceiveStream(process.stdout)
    ids = iter(range(1, 100))

    async def request(method, params):
        request_id = next(ids)
        line = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        await process.stdin.send(json.dumps(line).encode() + b"\n")
        with anyio.fail_after(20):
            while True:
                message = json.loads(await lines.receive_until(b"\n", 1 << 30))
                if message.get("id") == request_id:
                    return message["result"]

    events = []
    try:
        await request("initialize", {"protocol_version": 1, "client_info": {"name": "t", "version": "0"}})
        started = await request(
            "session/start", {"model_id": "anthropic/claude-opus-4-6", "cwd": str(tmp_path), "approval_policy": "auto"}
        )
        await request("session/prompt", {"session_id": started["session"]["session_id"], "text": "hi"})
        await anyio.sleep(5.0)  # the client reads nothing
        with anyio.fail_after(30):
            while not events or events[-1]["type"] != "turn_end":
                message = json.loads(await lines.receive_until(b"\n", 1 << 30))
                if message.get("method") == "agent/event":
                    events.append(message["params"])
    finally:
        with anyio.fail_after(10):
            await process.aclose()  # closes stdin (the daemon then exits) and stdout, not left to the GC
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    assert streamed_text(events) == "".join(pieces)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "no event was dropped"


@pytest.mark.parametrize("model_id", ["anthropic/claude-opus-4-6", "deepseek/deepseek-chat"])
async def test_an_error_body_that_is_a_gzip_bomb_is_read_only_in_part(home, tmp_path, replay_server, model_id):
    message = b'{"error": {"type": "invalid_request_error", "message": "bad request"}}'
    bomb = gzip.compress(message) + gzip_of(b" " * 1024, 16 * 1024)  # then 16 MiB of spaces
    replay_server.enqueue(ScriptedResponse(status=400, headers={"content-encoding": "gzip"}, body=bomb))
    env = {
        **anthropic_env(replay_server),
        "DEEPSEEK_API_KEY": "sk-deepseek-test",
        "DEEPSEEK_BASE_URL": replay_server.url,
    }
    async with in_memory_daemon(home, env=env, configure=limits) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id=model_id)
        events = await prompt(client, session_id, "hi")
    end = events[-1]
    assert end["stop_reason"] == "error" and end["error"]["provider_status"] == 400
    assert "HTTP 400" in end["error"]["message"]


async def test_only_the_start_of_an_error_body_is_read(replay_server):
    from daemon.providers.http import MAX_ERROR_BODY, make_client, read_error_body

    bomb = gzip.compress(b"first words ") + gzip_of(b"z" * 1024, 64 * 1024)  # 64 MiB more
    replay_server.enqueue(ScriptedResponse(status=500, headers={"content-encoding": "gzip"}, body=bomb))
    async with make_client() as client, client.stream("GET", replay_server.url) as response:
        body = await read_error_body(response)
    assert len(body) == MAX_ERROR_BODY and body.startswith(b"first words zzz")


async def test_a_big_blocks_end_event_is_encoded_once_the_provider_stream_has_closed(
    home, tmp_path, replay_server, monkeypatch
):
    from contextlib import asynccontextmanager

    from daemon.providers.anthropic import AnthropicProvider
    from daemon.server.rpc_bridge import RpcBridge

    monkeypatch.setattr(agent_reply, "LATE_END_CHARS", 100)  # "big": 100 characters or more
    stream_open = [False]
    original_stream = AnthropicProvider.stream

    @asynccontextmanager
    async def watched(self, request):
        async with original_stream(self, request) as events:
            stream_open[0] = True
            try:
                yield events
            finally:
                stream_open[0] = False

    monkeypatch.setattr(AnthropicProvider, "stream", watched)
    ends = []  # (event type, text length, whether the provider's stream was open when it was encoded)
    original_nowait, original_emit = RpcBridge.emit_nowait, RpcBridge.emit

    def record(event):
        if isinstance(event, (ev.TextEnd, ev.MessageEnd)):
            ends.append((type(event).__name__, len(getattr(event, "text", "")), stream_open[0]))

    def emit_nowait(self, event):
        record(event)
        return original_nowait(self, event)

    async def emit(self, event):
        record(event)
        await original_emit(self, event)

    monkeypatch.setattr(RpcBridge, "emit_nowait", emit_nowait)
    monkeypatch.setattr(RpcBridge, "emit", emit)
    small, big = "short", "x" * 150
    body = (
        sse(MESSAGE_START, text_start(0), text_delta(small, 0), block_stop(0))
        + sse(text_start(1), *[text_delta(big[i : i + 50], 1) for i in range(0, len(big), 50)], block_stop(1))
        + sse(*message_end())
    )
    replay_server.enqueue(streamed(body))
    async with in_memory_daemon(home, env=anthropic_env(replay_server)) as (client, _):
        session_id = await start_session(client, str(tmp_path))
        events = await prompt(client, session_id, "go")
    assert [e["type"] for e in events if e["type"] in ("text_start", "text_end", "message_end")] == [
        "text_start",
        "text_end",
        "text_start",
        "text_end",
        "message_end",
    ], "the wire order is unchanged"
    assert [e["text"] for e in events if e["type"] == "text_end"] == [small, big]
    texts = [(length, was_open) for kind, length, was_open in ends if kind == "TextEnd"]
    assert (len(small), True) in texts, "a small block ends at once"
    assert (len(big), False) in texts, "a big block's end waits for the stream to close"


async def test_deeply_nested_arguments_that_arrive_whole_are_a_tool_error(home, tmp_path, replay_server):
    # Gemini (and Ollama) send arguments as an object, not as streamed text to decode.
    deep: dict = {}
    for _ in range(150):
        deep = {"a": deep}
    call = {"functionCall": {"name": "read_file", "args": {"path": deep}}}
    chunk = {"candidates": [{"content": {"parts": [call], "role": "model"}, "finishReason": "STOP", "index": 0}]}
    body = f"data: {json.dumps(chunk)}\n\n"
    replay_server.enqueue(ScriptedResponse(headers={"content-type": "text/event-stream"}, body=body.encode()))
    reply = {
        "candidates": [{"content": {"parts": [{"text": "simpler then"}], "role": "model"}, "finishReason": "STOP"}]
    }
    replay_server.enqueue(
        ScriptedResponse(headers={"content-type": "text/event-stream"}, body=f"data: {json.dumps(reply)}\n\n".encode())
    )
    env = {"GEMINI_API_KEY": "AIza-fake", "GEMINI_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env) as (client, _):
        session_id = await start_session(client, str(tmp_path), model_id="gemini/gemini-3.1-pro-preview")
        events = await prompt(client, session_id, "read it")
    [result] = of_type(events, "tool_execution_end")
    assert result["is_error"] and "nested more than 100 levels deep" in result["result"]
    assert events[-1]["stop_reason"] == "end_turn" and streamed_text(events) == "simpler then"
