"""``ponder serve --listen unix:PATH`` as a real subprocess, with several real clients on its socket:
shared sessions, roles, leaving clients, catch-up after a reconnect, shared approvals, slow
clients, refused paths (PROTOCOL.md "Transports and several clients")."""

import json
import os
import socket
import stat
import subprocess
import sys
from contextlib import aclosing

import anyio
import pytest

from daemon.jsonrpc.client import RpcError
from tests.support.harness import subprocess_env
from tests.support.listening import burst_to_two_readers, listening_daemon, short_socket_dir, unix_client

pytestmark = pytest.mark.anyio

LONG = {"model_id": "mock/thinker", "thinking_level": "max"}


async def _events_until_turn_end(client, turn_id, limit_s=30):
    with anyio.fail_after(limit_s):
        return await client.collect_turn(turn_id)


async def test_two_clients_share_one_session_and_a_leaving_one_cancels_nothing(home, anyio_backend):
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "5"}) as daemon:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        async with unix_client(path, name="editor") as editor:
            started = await editor.request("session/start", LONG)
            session_id = started["session"]["session_id"]
            async with unix_client(path, role="observer", name="watcher") as watcher:
                answer = await watcher.request("session/subscribe", {"session_id": session_id})
                assert answer["replay"] == "none" and answer["last_seq"] == 0
                # Subscribed twice: each live event still reaches it once (checked below).
                await watcher.request("session/subscribe", {"session_id": session_id})
                with pytest.raises(RpcError) as refused:
                    await watcher.request("session/prompt", {"session_id": session_id, "text": "hi"})
                assert refused.value.code == -32008 and refused.value.data == {"reason": "observer"}
                listed = (await watcher.request("session/list", {}))["sessions"]
                assert [(r["session_id"], r["subscribers"]) for r in listed] == [(session_id, 2)]
                turn = await editor.request("session/prompt", {"session_id": session_id, "text": "Think long"})
                [row] = (await watcher.request("session/list", {}))["sessions"]
                assert row["loaded"] is True and row["status"] == "running"
                seen_by_editor = []
                async with aclosing(editor.events(turn["turn_id"])) as events:
                    async for event in events:
                        seen_by_editor.append(event)
                        if len(seen_by_editor) == 5:
                            break
                # The editor is gone mid-turn; the watcher still sees the whole turn end normally.
                seen = await _events_until_turn_end(watcher, turn["turn_id"])
        assert seen[-1]["type"] == "turn_end" and seen[-1]["stop_reason"] == "end_turn"
        seqs = [event["seq"] for event in seen]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "no gap, no duplicate"
        assert [e["seq"] for e in seen_by_editor] == seqs[:5], "both saw the same events"
        # The daemon stays up without clients; a new one finds the session with its reply.
        async with unix_client(path) as later:
            [row] = (await later.request("session/list", {}))["sessions"]
            assert row["subscribers"] == 0, "the clients that followed it are gone"
            resumed = await later.request("session/resume", {"session_id": session_id})
            assert [m["role"] for m in resumed["messages"]] == ["user", "assistant"]
            assert resumed["messages"][1]["status"] == "complete"
            assert resumed["last_seq"] == seqs[-1]
            # shutdown closes only this connection
            await later.request("shutdown")
        async with unix_client(path) as again:
            assert await again.request("ping") == {}
        assert daemon.process.poll() is None


async def test_reconnect_catches_up_without_gap_or_duplicate(home, anyio_backend):
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "5"}):
        async with unix_client(path) as first:
            session_id = (await first.request("session/start", LONG))["session"]["session_id"]
            turn = await first.request("session/prompt", {"session_id": session_id, "text": "Think long"})
            before = []
            async with aclosing(first.events(turn["turn_id"])) as events:
                async for event in events:
                    before.append(event)
                    if len(before) == 20:
                        break
        await anyio.sleep(0.3)  # events go on while nobody is connected
        async with unix_client(path) as second:
            answer = await second.request(
                "session/subscribe", {"session_id": session_id, "after_seq": before[-1]["seq"]}
            )
            assert answer["replay"] == "events" and answer["last_seq"] > before[-1]["seq"]
            after = await _events_until_turn_end(second, turn["turn_id"])
        seqs = [e["seq"] for e in before + after]
        assert seqs == list(range(1, len(seqs) + 1)), "the missed events, then live ones: no gap, no duplicate"
        assert after[-1]["type"] == "turn_end"
        # A client whose after_seq the ring no longer holds is told to rebuild from session/resume.
        async with unix_client(path) as third:
            answer = await third.request("session/subscribe", {"session_id": session_id, "after_seq": seqs[-1]})
            assert answer["replay"] == "none"


async def test_a_catch_up_longer_than_a_connection_queue_arrives_whole(home, anyio_backend):
    (home / "config.toml").write_text(f"[serve]\nclient_queue_bytes = {512 << 10}\n")
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend):
        async with unix_client(path) as driver:
            driver.on_message = None  # ~5,000 events read for their seqs: not each checked against the schema
            session_id = (await driver.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]
            seqs = []
            for i in range(2):  # each echo streams a delta a word: ~2,600 events a turn
                text = f"{i} " + " ".join(f"w{j}" for j in range(2600))
                turn = await driver.request("session/prompt", {"session_id": session_id, "text": text})
                with anyio.fail_after(60):
                    seqs += [e["seq"] for e in await driver.collect_turn(turn["turn_id"])]
        assert len(seqs) > 4096 + 500, "~1.3 MB of events: more than a connection's queue holds (512 KiB here)"
        async with unix_client(path, role="observer") as late:
            late.on_message = None
            answer = await late.request("session/subscribe", {"session_id": session_id, "after_seq": 0})
            assert answer["replay"] == "events" and answer["last_seq"] == seqs[-1]
            got = []
            with anyio.fail_after(60):
                async with aclosing(late.events()) as events:
                    async for event in events:
                        got.append(event["seq"])
                        if event["seq"] == seqs[-1]:
                            break
            assert got == list(range(1, seqs[-1] + 1)), "all of it, in order, no duplicate"
            assert await late.request("ping") == {}, "still connected: a catch-up waits for room, it is not dropped"


async def test_a_burst_longer_than_4096_messages_reaches_every_reading_client_whole(home, anyio_backend):
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "0"}) as d:
        async with unix_client(path, name="driver") as driver, unix_client(path, role="observer") as watcher:
            await burst_to_two_readers(driver, watcher)
        assert "does not read its messages" not in (home / "logs" / "ponder.log").read_text()
        assert d.process.poll() is None


async def test_first_answer_wins_and_everyone_hears_how_it_was_resolved(home, anyio_backend, tmp_path):
    path = short_socket_dir() / "s.sock"
    work = tmp_path / "work"
    work.mkdir()
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend):
        asked = {"a": anyio.Event(), "b": anyio.Event()}
        release_b = anyio.Event()

        async with (
            unix_client(path, permission_requests=True, name="a") as a,
            unix_client(path, permission_requests=True, name="b") as b,
            unix_client(path, role="observer", name="o") as o,
        ):
            late_errors = []

            async def answer_a(method, params):
                asked["a"].set()
                return {"decision": "allow_once"}

            async def answer_b(method, params):
                asked["b"].set()
                await release_b.wait()
                return {"decision": "deny"}

            a.on_request, b.on_request = answer_a, answer_b
            original = b.on_message

            def watch(message, sent):
                if (
                    isinstance(message, dict)
                    and message.get("error", {}).get("data", {}).get("reason") == "already_resolved"
                ):
                    late_errors.append(message)
                original(message, sent)

            b.on_message = watch
            started = await a.request(
                "session/start", {"model_id": "mock/tools", "cwd": str(work), "approval_policy": "ask"}
            )
            session_id = started["session"]["session_id"]
            await b.request("session/subscribe", {"session_id": session_id})
            await o.request("session/subscribe", {"session_id": session_id})
            prompt = 'tool: write_file {"path": "x.txt", "content": "hi"}'
            turn = await a.request("session/prompt", {"session_id": session_id, "text": prompt})
            events = await _events_until_turn_end(o, turn["turn_id"])
            resolved = [e for e in events if e["type"] == "permission_resolved"]
            assert len(resolved) == 1
            assert resolved[0]["decision"] == "allow_once"
            assert resolved[0]["resolved_by"]["client_name"] == "a"
            assert (work / "x.txt").read_text() == "hi"
            assert asked["b"].is_set(), "every controller that takes requests was asked"
            release_b.set()  # b answers late
            with anyio.fail_after(10):
                while not late_errors:
                    await anyio.sleep(0.05)
            assert late_errors[0]["id"].startswith("ponder-")
            assert late_errors[0]["error"]["code"] == -32602


async def test_a_client_that_never_reads_is_dropped_and_the_others_go_on(home, anyio_backend):
    (home / "config.toml").write_text("[serve]\nclient_queue_bytes = 65536\n")
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "0"}) as daemon:
        async with unix_client(path) as driver:
            session_id = (await driver.request("session/start", LONG))["session"]["session_id"]
            # A raw client subscribes, then never reads again.
            stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.connect(str(path))
            stuck.sendall(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}\n')
            stuck.sendall(
                b'{"jsonrpc":"2.0","id":2,"method":"session/subscribe","params":{"session_id":"'
                + session_id.encode()
                + b'"}}\n'
            )
            await anyio.sleep(0.3)
            # ~60 KB a turn: within a few turns the socket's buffers are full and what waits for
            # the stuck client passes its bound (64 KiB here), while the driver reads every turn.
            log_path = home / "logs" / "ponder.log"
            with anyio.fail_after(120):
                for i in range(30):
                    turn = await driver.request("session/prompt", {"session_id": session_id, "text": f"Think long {i}"})
                    events = await driver.collect_turn(turn["turn_id"])
                    assert events[-1]["stop_reason"] == "end_turn"
                    if "does not read its messages" in log_path.read_text():
                        break
                turn = await driver.request("session/prompt", {"session_id": session_id, "text": "after"})
                assert (await driver.collect_turn(turn["turn_id"]))[-1]["stop_reason"] == "end_turn"
            # The stuck client was dropped: reading what reached it ends in the end of the stream.
            stuck.settimeout(10)
            total = 0
            while chunk := stuck.recv(1 << 20):
                total += len(chunk)
            stuck.close()
            assert "connection c2 closed: the client does not read its messages" in log_path.read_text()
        assert daemon.process.poll() is None


async def test_refused_socket_paths_are_usage_errors(home, anyio_backend):
    env = {**os.environ, **subprocess_env(home, {"PONDER_ASYNC_BACKEND": anyio_backend})}

    def serve(listen):
        return subprocess.run(
            [sys.executable, "-m", "daemon", "serve", "--listen", listen],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    directory = short_socket_dir()
    (directory / "file").write_text("not a socket")
    result = serve(f"unix:{directory / 'file'}")
    assert result.returncode == 2 and "another file is there" in result.stderr
    shared = short_socket_dir()
    os.chmod(shared, 0o777)
    result = serve(f"unix:{shared / 's.sock'}")
    assert result.returncode == 2 and "other users can write" in result.stderr
    # A stale socket (nobody answers) is replaced; one a daemon answers on is refused.
    stale = directory / "s.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(stale))
    leftover.close()
    with listening_daemon(home, f"unix:{stale}", backend=anyio_backend):
        result = serve(f"unix:{stale}")
        assert result.returncode == 2 and "already listening" in result.stderr
        async with unix_client(stale) as client:
            assert await client.request("ping") == {}


async def test_garbage_and_many_dropped_connections_do_not_disturb_a_client(home, anyio_backend):
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend) as daemon:
        async with unix_client(path) as steady:
            for i in range(500):
                raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                raw.connect(str(path))
                if i % 3 == 0:
                    raw.sendall(b"\x00\xff garbage \xfe\n{not json\n")
                elif i % 3 == 1:
                    raw.sendall(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')  # cut off, no newline
                raw.close()
                if i % 100 == 0:
                    assert await steady.request("ping") == {}
            with pytest.raises(RpcError) as refused:
                await steady.request("nope/never")
            assert refused.value.code == -32601
            assert await steady.request("session/list", {}) is not None
            # A first message choosing a dialect the daemon does not speak: one error, then closed.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.settimeout(10)
                raw.connect(str(path))
                raw.sendall(b'{"jsonrpc":"2.0","method":"$/dialect","params":{"name":"klingon"}}\n')
                answer = b""
                while chunk := raw.recv(4096):
                    answer += chunk
            error = json.loads(answer)["error"]
            assert error["code"] == -32600 and error["data"]["reason"] == "unknown_dialect"
            assert "ponder, acp" in error["message"]
            # Choosing the ponder protocol by name is the same as not choosing.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.settimeout(10)
                raw.connect(str(path))
                raw.sendall(
                    b'{"jsonrpc":"2.0","method":"$/dialect","params":{"name":"ponder"}}\n'
                    b'{"jsonrpc":"2.0","id":7,"method":"ping"}\n'
                )
                assert json.loads(raw.recv(4096)) == {"jsonrpc": "2.0", "id": 7, "result": {}}
        assert daemon.process.poll() is None


async def test_resume_mid_turn_shows_the_reply_as_it_stands_and_a_second_daemon_names_the_holder(home, anyio_backend):
    from tests.support.harness import subprocess_daemon

    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend, env={"PONDER_MOCK_DELAY_MS": "20"}) as d:
        async with unix_client(path) as driver:
            session_id = (await driver.request("session/start", LONG))["session"]["session_id"]
            turn = await driver.request("session/prompt", {"session_id": session_id, "text": "Think long"})
            deltas = []
            async with aclosing(driver.events(turn["turn_id"])) as events:
                async for event in events:
                    if event["type"] == "thinking_delta":
                        deltas.append(event["delta"])
                        if len(deltas) == 10:
                            break
            async with unix_client(path, role="observer") as late:
                resumed = await late.request("session/resume", {"session_id": session_id})
                streaming = resumed["messages"][-1]
                assert streaming["role"] == "assistant" and streaming["status"] == "streaming"
                assert streaming["thinking"].startswith("".join(deltas)), "the reply as it stands, not as checkpointed"
                assert resumed["last_seq"] >= 10
                # Another daemon on the same home cannot run a turn in it, and says who holds it.
                async with subprocess_daemon(home, backend=anyio_backend) as other:
                    with pytest.raises(RpcError) as busy:
                        await other.request("session/prompt", {"session_id": session_id, "text": "me too"})
                    assert busy.value.code == -32004
                    assert f"process {d.process.pid}" in busy.value.message
                rest = await _events_until_turn_end(late, turn["turn_id"])
                assert rest[0]["seq"] == resumed["last_seq"] + 1, "live events go on right after last_seq"


async def test_nobody_to_answer_then_a_late_controller_gets_the_waiting_request(home, anyio_backend, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (home / "config.toml").write_text("[serve]\napproval_timeout_s = 2\n")
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend):
        prompt = 'tool: write_file {"path": "x.txt", "content": "hi"}'
        async with unix_client(path, name="no-asks") as driver:
            started = await driver.request("session/start", {"model_id": "mock/tools", "cwd": str(work)})
            session_id = started["session"]["session_id"]
            # Nobody takes permission requests: the request waits, then is denied.
            turn = await driver.request("session/prompt", {"session_id": session_id, "text": prompt})
            events = await _events_until_turn_end(driver, turn["turn_id"])
            resolved = [e for e in events if e["type"] == "permission_resolved"]
            assert resolved == [resolved[0]] and resolved[0]["decision"] == "deny"
            assert resolved[0]["resolved_by"] is None
            start = next(e for e in events if e["type"] == "tool_execution_start")
            assert start["permission"]["decision"] == "deny"
            assert not (work / "x.txt").exists()
            # Again; this time a controller that answers attaches while the request waits.
            turn = await driver.request("session/prompt", {"session_id": session_id, "text": prompt})
            async with aclosing(driver.events(turn["turn_id"])) as stream:
                async for event in stream:
                    if event["type"] == "tool_call_end":
                        call_id = event["call_id"]
                        break
            await anyio.sleep(0.5)  # the request is waiting now (for up to 2 s)
            async with unix_client(path, permission_requests=True, name="late") as late:
                asked = []

                async def answer(method, params):
                    asked.append(params)
                    return {"decision": "allow_once"}

                late.on_request = answer
                subscribed = await late.request("session/subscribe", {"session_id": session_id})
                assert [r["call_id"] for r in subscribed["pending_requests"]] == [call_id]
                events = await _events_until_turn_end(late, turn["turn_id"])
            assert asked and asked[0]["tool"] == "write_file"
            resolved = [e for e in events if e["type"] == "permission_resolved"]
            assert resolved[-1]["resolved_by"]["client_name"] == "late"
            assert (work / "x.txt").read_text() == "hi"


async def test_a_followed_session_stays_loaded_and_unloads_once_nobody_follows_it(home, anyio_backend):
    idle_s = 0.5
    (home / "config.toml").write_text(f"[serve]\nidle_unload_s = {idle_s}\n")
    path = short_socket_dir() / "s.sock"
    echo = {"model_id": "mock/echo"}

    async def loaded(client) -> dict[str, bool]:
        return {row["session_id"]: row["loaded"] for row in (await client.request("session/list", {}))["sessions"]}

    async def until_unloaded(client, session_id: str) -> None:
        with anyio.fail_after(30):
            while (await loaded(client))[session_id]:
                await anyio.sleep(0.1)

    with listening_daemon(home, f"unix:{path}", backend=anyio_backend):
        async with unix_client(path, name="follower") as follower:
            followed = (await follower.request("session/start", echo))["session"]["session_id"]
            turn = await follower.request("session/prompt", {"session_id": followed, "text": "hello"})
            await _events_until_turn_end(follower, turn["turn_id"])
            async with unix_client(path, name="passer-by") as other:
                unsubscribed = (await other.request("session/start", echo))["session"]["session_id"]
                await other.request("session/unsubscribe", {"session_id": unsubscribed})
                left = (await other.request("session/start", echo))["session"]["session_id"]
                now = await loaded(other)
                # The unsubscribed one may be unloaded already: an idle period is 0.5 s, and a busy
                # machine can take that long between the unsubscribe and this list.
                assert now[followed] is True and now[left] is True and unsubscribed in now
            # Nobody follows these two (one was unsubscribed from, the other's client left): unloaded.
            await until_unloaded(follower, unsubscribed)
            await until_unloaded(follower, left)
            await anyio.sleep(4 * idle_s)  # many idle periods: the followed one is still loaded
            assert (await loaded(follower))[followed] is True
            # Its last follower leaves: unloaded an idle period later.
            await follower.request("session/unsubscribe", {"session_id": followed})
            await until_unloaded(follower, followed)
            # Loaded again by a client that drives it, and kept while that client follows it.
            turn = await follower.request("session/prompt", {"session_id": followed, "text": "again"})
            await _events_until_turn_end(follower, turn["turn_id"])
            await anyio.sleep(4 * idle_s)
            assert (await loaded(follower))[followed] is True
        async with unix_client(path, name="later") as later:
            await until_unloaded(later, followed)  # its follower left with its connection


def test_ponder_attach_bridges_stdio_to_the_listening_daemon(home):
    import json

    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}"):
        env = {**os.environ, **subprocess_env(home)}
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/start", "params": {"model_id": "mock/echo"}},
            {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        ]
        result = subprocess.run(
            [sys.executable, "-m", "daemon", "attach", "--socket", str(path)],
            input="".join(json.dumps(line) + "\n" for line in lines),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        answers = {m["id"]: m for m in map(json.loads, result.stdout.splitlines()) if "id" in m}
        assert answers[1]["result"]["capabilities"]["transport"]["kind"] == "unix"
        assert answers[2]["result"]["session"]["model_id"] == "mock/echo"
        assert answers[3]["result"] == {}
    missing = subprocess.run(
        [sys.executable, "-m", "daemon", "attach", "--socket", str(path)],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 1 and "cannot reach a daemon" in missing.stderr


async def test_a_restarted_daemon_never_passes_its_events_off_as_the_old_ones(home, anyio_backend):
    """Event seqs restart with each daemon run; the epoch says which run a seq counts in, so a
    client that saw the daemon before a restart is told ``snapshot_required`` instead of being
    sent (or spared) the wrong events."""
    path = short_socket_dir() / "s.sock"
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend):
        async with unix_client(path) as client:
            session_id = (await client.request("session/start", LONG))["session"]["session_id"]
            turn = await client.request("session/prompt", {"session_id": session_id, "text": "Think long"})
            with anyio.fail_after(60):
                seen = await client.collect_turn(turn["turn_id"])
            resumed = await client.request("session/resume", {"session_id": session_id})
            old_epoch, old_seq = resumed["epoch"], seen[-1]["seq"]
            assert resumed["last_seq"] == old_seq
            same_run = await client.request(
                "session/subscribe", {"session_id": session_id, "after_seq": old_seq, "epoch": old_epoch}
            )
            assert same_run["replay"] == "none" and same_run["epoch"] == old_epoch
    # The daemon stopped (SIGTERM); a new one starts on the same home and socket.
    with listening_daemon(home, f"unix:{path}", backend=anyio_backend):
        async with unix_client(path) as driver, unix_client(path, role="observer") as back:
            # Nothing numbered yet in this run: the old seq is beyond anything it knows.
            fresh = await back.request("session/subscribe", {"session_id": session_id, "after_seq": old_seq})
            assert fresh["replay"] == "snapshot_required" and fresh["last_seq"] == 0
            assert fresh["epoch"] != old_epoch
            await back.request("session/unsubscribe", {"session_id": session_id})
            # Two turns later this run's seqs have passed the old one: only the epoch can tell them apart.
            for i in range(2):
                turn = await driver.request("session/prompt", {"session_id": session_id, "text": f"Think again {i}"})
                with anyio.fail_after(60):
                    await driver.collect_turn(turn["turn_id"])
            later = await back.request(
                "session/subscribe", {"session_id": session_id, "after_seq": old_seq, "epoch": old_epoch}
            )
            assert later["replay"] == "snapshot_required" and later["last_seq"] > old_seq
            resumed = await back.request("session/resume", {"session_id": session_id})
            assert resumed["epoch"] == fresh["epoch"] and resumed["last_seq"] == later["last_seq"]
            assert [m["role"] for m in resumed["messages"]] == ["user", "assistant"] * 3
            again = await back.request(
                "session/subscribe",
                {"session_id": session_id, "after_seq": resumed["last_seq"], "epoch": resumed["epoch"]},
            )
            assert again["replay"] == "none"
