"""Real ``ponder serve`` processes with different homes on one PostgreSQL store: they share
sessions, a killed holder's session is taken over within a second, a daemon whose session was
taken over cannot write it (its turn ends with a sentence saying so), and the faults: a server
that cannot be reached, a refused login, a server that goes away mid-turn and comes back, a
password in the URL; and the same through PgBouncer in transaction mode (sessions shared, a
killed holder taken over once its heartbeat lapses, a stalled one fenced out, an undeclared
pooler a sentence). Each test has a schema of its own on the session's throwaway server."""

from __future__ import annotations

import json
import signal
import time
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from daemon.jsonrpc.client import RpcClient, RpcError, spawn_daemon
from daemon.store.postgres import POOLED_LEASE_TTL_S
from tests.support.harness import initialize, process_of, subprocess_daemon, subprocess_env
from tests.support.pgbouncer import ThrowawayPgBouncer
from tests.support.postgres import PASSWORD, PASSWORD_ROLE, ThrowawayPostgres

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def homes(tmp_path: Path, count: int) -> list[Path]:
    made = []
    for index in range(count):
        home = tmp_path / f"home{index}"
        home.mkdir()
        made.append(home)
    return made


async def start(client: RpcClient, **params: Any) -> str:
    result = await client.request("session/start", {"model_id": "mock/thinker", "thinking_level": "low", **params})
    return str(result["session"]["session_id"])


# For a turn whose length does not matter to the test (the taker's, after a takeover): the
# sessions here think at "max" so that the holder's turn is still streaming when it is taken.
QUICK = {"thinking_level": "off"}


async def prompt_and_collect(client: RpcClient, session_id: str, text: str, **params: Any) -> list[dict[str, Any]]:
    turn = await client.request("session/prompt", {"session_id": session_id, "text": text, **params})
    with anyio.fail_after(30):
        return await client.collect_turn(turn["turn_id"])


async def messages(client: RpcClient, session_id: str) -> list[dict[str, Any]]:
    return list((await client.request("session/messages", {"session_id": session_id}))["messages"])


def lease_row(url: str, session_id: str) -> tuple[Any, ...] | None:
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT owner, epoch, holder_pid FROM turn_leases WHERE session_id = %s", (session_id,)
        ).fetchone()
    return None if row is None else tuple(row)


async def test_two_daemons_with_different_homes_share_sessions(
    postgres_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    env = {"PONDER_STORE_URL": postgres_url}
    async with (
        subprocess_daemon(home_a, env=env, backend=anyio_backend) as a,
        subprocess_daemon(home_b, env=env, backend=anyio_backend) as b,
    ):
        session_id = await start(a, title="shared")
        first = await prompt_and_collect(a, session_id, "from A")
        assert first[-1]["stop_reason"] == "end_turn"
        listed = await b.request("session/list", {})
        assert [(s["session_id"], s["title"], s["message_count"]) for s in listed["sessions"]] == [
            (session_id, "shared", 2)
        ]
        second = await prompt_and_collect(b, session_id, "from B")
        assert second[-1]["stop_reason"] == "end_turn"
        seen_by_a = await messages(a, session_id)
        assert [(m["role"], m["seq"]) for m in seen_by_a] == [
            ("user", 1),
            ("assistant", 2),
            ("user", 3),
            ("assistant", 4),
        ]
        assert seen_by_a == await messages(b, session_id)
        # And back to A, which catches up with what B wrote before its turn.
        third = await prompt_and_collect(a, session_id, "A again")
        assert third[-1]["stop_reason"] == "end_turn"
        assert [m["seq"] for m in await messages(b, session_id)] == [1, 2, 3, 4, 5, 6]
    assert not (home_a / "sessions.db").exists() and not (home_b / "sessions.db").exists()


async def until_thinking(client: RpcClient, turn_id: str, into: list[dict[str, Any]] | None = None) -> None:
    """Read the turn's events up to its first thinking delta (the reply is streaming)."""
    async with aclosing(client.events(turn_id)) as stream:
        async for event in stream:
            if into is not None:
                into.append(event)
            if event["type"] == "thinking_delta":
                return


async def taken_over_after_a_kill(
    holder: RpcClient, taker: RpcClient, session_id: str, *, within_s: float
) -> tuple[dict[str, Any], float]:
    """``holder`` streams a long turn of ``session_id`` and ``taker`` is refused the session
    (-32004); then ``holder`` is SIGKILLed and ``taker`` prompts until admitted, which must happen
    within ``within_s``: the admitted turn and the seconds from the kill to the admission."""
    turn = await holder.request("session/prompt", {"session_id": session_id, "text": "a long one"})
    await until_thinking(holder, turn["turn_id"])  # streaming, under the holder's lease
    with pytest.raises(RpcError) as busy:
        await taker.request("session/prompt", {"session_id": session_id, "text": "me too"})
    assert busy.value.code == -32004
    process_of(holder).send_signal(signal.SIGKILL)
    killed = time.monotonic()
    await process_of(holder).wait()
    while True:
        try:
            taken = await taker.request("session/prompt", {"session_id": session_id, "text": "taken over", **QUICK})
            return taken, time.monotonic() - killed
        except RpcError as error:
            assert error.code == -32004
            assert time.monotonic() - killed < within_s, f"not taken over within {within_s} s"
            await anyio.sleep(0.02)


async def test_a_killed_holders_session_is_taken_over_within_a_second(
    postgres_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    env = {"PONDER_STORE_URL": postgres_url, "PONDER_MOCK_DELAY_MS": "20"}
    async with subprocess_daemon(home_b, env=env, backend=anyio_backend) as b:
        async with subprocess_daemon(home_a, env=env, backend=anyio_backend) as a:
            session_id = await start(a, thinking_level="max")
            taken, took = await taken_over_after_a_kill(a, b, session_id, within_s=1.0)
        with anyio.fail_after(60):
            events = await b.collect_turn(taken["turn_id"])
        assert events[-1]["stop_reason"] == "end_turn"
        assert took < 1.0
        stored = await messages(b, session_id)
        assert [m["content"][0]["text"] for m in stored if m["role"] == "user"] == ["a long one", "taken over"]


async def test_fencing_refuses_a_daemon_whose_session_was_taken_over(
    postgres_server: ThrowawayPostgres, postgres_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    env = {"PONDER_STORE_URL": postgres_url, "PONDER_MOCK_DELAY_MS": "20"}
    async with (
        subprocess_daemon(home_a, env=env, backend=anyio_backend) as a,
        subprocess_daemon(home_b, env=env, backend=anyio_backend) as b,
    ):
        session_id = await start(a, thinking_level="max")
        turn = await a.request("session/prompt", {"session_id": session_id, "text": "A's long turn"})
        a_events: list[dict[str, Any]] = []
        await until_thinking(a, turn["turn_id"], a_events)
        owner_a, epoch_a, _ = lease_row(postgres_url, session_id) or (None, None, None)
        assert owner_a is not None
        # A's connection to the server is cut (a network partition, say) while A runs on: to
        # the other daemons A is gone, and B takes the session over.
        taken = None
        for _ in range(20):
            holder = lease_row(postgres_url, session_id)
            assert holder is not None
            with psycopg.connect(postgres_url) as db:
                db.execute("SELECT pg_terminate_backend(%s)", (holder[2],))
            try:
                taken = await b.request("session/prompt", {"session_id": session_id, "text": "B takes over", **QUICK})
                break
            except RpcError as error:  # A reconnected first and kept its lease: cut it again
                assert error.code == -32004
        assert taken is not None
        owner_b, epoch_b, _ = lease_row(postgres_url, session_id) or (None, None, None)
        assert owner_b != owner_a and epoch_b == epoch_a + 1
        with anyio.fail_after(60):
            async for event in a.events(turn["turn_id"]):
                a_events.append(event)
            b_events = await b.collect_turn(taken["turn_id"])
        end = a_events[-1]
        assert end["type"] == "turn_end" and end["stop_reason"] == "error", end
        assert f"Another daemon took session '{session_id}' over" in json.dumps(end["error"]), end["error"]
        assert b_events[-1]["stop_reason"] == "end_turn"
        stored = await messages(b, session_id)
        # A's reply stopped at its last write before the takeover; nothing of A's came after B's prompt.
        b_prompt = next(m for m in stored if m["role"] == "user" and m["content"][0]["text"] == "B takes over")
        after = [m for m in stored if m["seq"] > b_prompt["seq"]]
        assert [m["role"] for m in after] == ["assistant"], stored  # B's reply only
        assert after[0] == next(e["message"] for e in b_events if e["type"] == "message_end")
        assert await a.request("ping", {}) == {}  # A keeps answering
        # B's turn is over and its lease given back: A may take the session again, after B's messages.
        again = await prompt_and_collect(a, session_id, "A again", **QUICK)
        assert again[-1]["stop_reason"] == "end_turn"
        final = await messages(b, session_id)
        assert [m["seq"] for m in final] == list(range(1, len(final) + 1))
        assert final[-2]["content"][0]["text"] == "A again" and final[-2]["seq"] > after[0]["seq"]


async def _initialized(
    stack: AsyncExitStack, home: Path, env: dict[str, str], backend: str = "asyncio"
) -> tuple[RpcClient, dict[str, Any]]:
    client = await stack.enter_async_context(
        spawn_daemon(home=home, env=subprocess_env(home, {"PONDER_ASYNC_BACKEND": backend, **env}), stderr=-1)
    )  # stderr: DEVNULL
    return client, await initialize(client)


async def test_unreachable_server_and_refused_login_the_daemon_answers_and_says_why(
    postgres_server: ThrowawayPostgres, tmp_path: Path
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    nowhere = f"postgresql://ponder:{PASSWORD}@/ponder?host={tmp_path}/no-server"
    wrong_password = postgres_server.url(user=PASSWORD_ROLE, password=PASSWORD + "-wrong")
    async with AsyncExitStack() as stack:
        for home, url, cause in ((home_a, nowhere, "cannot be reached"), (home_b, wrong_password, "refused the login")):
            client, init = await _initialized(stack, home, {"PONDER_STORE_URL": url})
            [problem] = [p for p in init["problems"] if "PostgreSQL" in p]
            assert cause in problem and PASSWORD not in problem
            assert ("/no-server" in problem) if home is home_a else ("ponder_pw@" in problem)
            with pytest.raises(RpcError) as refused:
                await client.request("session/start", {"model_id": "mock/echo"})
            assert cause in refused.value.message and PASSWORD not in refused.value.message
            assert await client.request("ping", {}) == {}
            with pytest.raises(RpcError):
                await client.request("session/list", {})
    for home in (home_a, home_b):
        for log in (home / "logs").glob("*"):
            assert PASSWORD not in log.read_text(errors="replace")


async def test_a_password_in_the_url_never_leaves_the_daemon(
    postgres_server: ThrowawayPostgres, tmp_path: Path, anyio_backend: str
) -> None:
    schema_url = postgres_server.url(user=PASSWORD_ROLE, password=PASSWORD)
    [home] = homes(tmp_path, 1)
    env = {"PONDER_STORE_URL": schema_url}
    seen: list[str] = []
    async with subprocess_daemon(home, env=env, backend=anyio_backend, permission_requests=False) as client:
        client_messages = client.on_message

        def record(message: Any, method_of_id: dict[Any, str]) -> None:
            seen.append(json.dumps(message))
            if client_messages is not None:
                client_messages(message, method_of_id)

        client.on_message = record
        session_id = await start(client, model_id="mock/tools", approval_policy="auto", cwd=str(tmp_path))
        events = await prompt_and_collect(client, session_id, 'tool: run_command {"command": "env"}')
        assert events[-1]["type"] == "turn_end"
        [result] = [e for e in events if e["type"] == "tool_execution_end"]
        assert "PONDER_HOME=" in json.dumps(result)  # the child's environment was shown, without the URL
        assert (await client.request("session/get", {"session_id": session_id}))["session"]["session_id"]
    text = "\n".join(seen) + "".join(p.read_text(errors="replace") for p in (home / "logs").glob("*"))
    assert PASSWORD not in text
    assert "PONDER_STORE_URL" not in "\n".join(seen)


async def test_a_server_gone_mid_turn_and_back_loses_nothing(
    postgres_server: ThrowawayPostgres, postgres_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    [home] = homes(tmp_path, 1)
    env = {"PONDER_STORE_URL": postgres_url, "PONDER_MOCK_DELAY_MS": "15"}
    async with subprocess_daemon(home, env=env, backend=anyio_backend) as client:
        session_id = await start(client, thinking_level="high")
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "keep going"})
        events: list[dict[str, Any]] = []
        try:
            with anyio.fail_after(60):
                await until_thinking(client, turn["turn_id"], events)
                await anyio.to_thread.run_sync(postgres_server.stop)
                events += await client.collect_turn(turn["turn_id"])
            end = events[-1]
            assert end["stop_reason"] == "error"
            assert "PostgreSQL store" in json.dumps(end) and "keeps it in memory" in json.dumps(end), end
            assert await client.request("ping", {}) == {}  # answering all along
            with pytest.raises(RpcError) as refused:
                await client.request("session/list", {})
            assert "PostgreSQL store" in refused.value.message
            [reply] = [e["message"] for e in events if e["type"] == "message_end"]
        finally:
            await anyio.to_thread.run_sync(postgres_server.start)
        with anyio.fail_after(30):  # the periodic retry saves the reply kept in memory
            stored: list[dict[str, Any]] = []
            while len(stored) != 2 or stored[1] != reply:  # (a checkpoint of it may be there first)
                await anyio.sleep(0.2)
                try:
                    stored = await messages(client, session_id)
                except RpcError:
                    stored = []
        assert stored[0]["content"][0]["text"] == "keep going"
        again = await prompt_and_collect(client, session_id, "and now?")
        assert again[-1]["stop_reason"] == "end_turn"


def test_no_store_url_reaches_a_tools_environment() -> None:
    from daemon.config.settings import child_env

    env = child_env(
        {
            "PONDER_STORE_URL": "postgresql://u:p@h/d",
            "PONDER_STORE_LISTEN_URL": "postgresql://u:p@h2/d",
            "PONDER_STORE_POOLER": "transaction",
            "PGPASSWORD": "x",
            "HOME": "/root",
        }
    )
    assert env == {"PONDER_STORE_POOLER": "transaction", "HOME": "/root"}  # the mode is no secret


async def next_update(client: RpcClient, session_id: str, check: Any = None, within_s: float = 5.0) -> dict[str, Any]:
    """The next ``session/updated`` for ``session_id`` (that ``check`` accepts), skipping events."""
    with anyio.fail_after(within_s):
        async for method, params in client.notifications:
            if method == "session/updated" and params["session"]["session_id"] == session_id:
                if check is None or check(params["session"]):
                    return dict(params["session"])
    raise AssertionError("the notifications ended")


async def test_another_daemons_changes_reach_this_daemons_subscribers_within_a_second(
    postgres_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    env = {"PONDER_STORE_URL": postgres_url}
    async with (
        subprocess_daemon(home_a, env=env, backend=anyio_backend) as a,
        subprocess_daemon(home_b, env=env, backend=anyio_backend) as b,
    ):
        session_id = await start(b, model_id="mock/echo", title="before")
        await a.request("session/resume", {"session_id": session_id})  # A's client follows it
        latencies = []
        for title in ("one", "two", "three"):
            sent = time.monotonic()
            await b.request("session/rename", {"session_id": session_id, "title": title})
            seen = await next_update(a, session_id, lambda s, t=title: s["title"] == t)
            latencies.append(time.monotonic() - sent)
            assert seen["title"] == title
        assert max(latencies) < 1.0, latencies
        # A turn on B: A's subscribers see the messages counted, and A's memory catches up.
        await prompt_and_collect(b, session_id, "hello from B")
        seen = await next_update(a, session_id, lambda s: s["message_count"] == 2)
        assert seen["title"] == "three"
        resumed = await a.request("session/resume", {"session_id": session_id})
        assert [m["content"][0]["text"] for m in resumed["messages"]] == ["hello from B", "hello from B"]
        # A delete on B: A's next request about it answers session_not_found.
        await b.request("session/delete", {"session_id": session_id})
        with anyio.fail_after(2):
            while True:
                try:
                    await a.request("session/get", {"session_id": session_id})
                except RpcError as error:
                    assert error.code == -32001
                    break
                await anyio.sleep(0.05)


# --- behind a connection pooler in transaction mode (PgBouncer) ------------------------------------


class PooledSchema:
    """One test's schema through the throwaway PgBouncer (``pooled``) and directly (``direct``)."""

    def __init__(self, server: ThrowawayPostgres, bouncer: ThrowawayPgBouncer) -> None:
        name = server.new_schema()
        self.pooled, self.direct = bouncer.url(name), server.url(name)
        self.env = {"PONDER_STORE_URL": self.pooled, "PONDER_STORE_POOLER": "transaction"}


@pytest.fixture
def pooled(postgres_server: ThrowawayPostgres, pgbouncer_server: ThrowawayPgBouncer) -> PooledSchema:
    return PooledSchema(postgres_server, pgbouncer_server)


async def test_daemons_behind_a_transaction_pooler_share_sessions_and_take_a_killed_holders_over(
    pooled: PooledSchema, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b, home_c = homes(tmp_path, 3)
    async with AsyncExitStack() as stack:
        # A listens on a direct connection; B has none (its notifications are off, and it says so).
        a = await stack.enter_async_context(
            subprocess_daemon(
                home_a, env={**pooled.env, "PONDER_STORE_LISTEN_URL": pooled.direct}, backend=anyio_backend
            )
        )
        b_client, b_init = await _initialized(stack, home_b, pooled.env, anyio_backend)
        a_init = await initialize(a)
        assert not [p for p in a_init["problems"] if "PostgreSQL" in p]
        assert [p for p in b_init["problems"] if "Cross-daemon notifications are off" in p]
        b = b_client
        session_id = await start(b, model_id="mock/echo", title="shared")
        assert (await prompt_and_collect(b, session_id, "from B"))[-1]["stop_reason"] == "end_turn"
        await a.request("session/resume", {"session_id": session_id})
        sent = time.monotonic()
        await b.request("session/rename", {"session_id": session_id, "title": "renamed on B"})
        await next_update(a, session_id, lambda s: s["title"] == "renamed on B")
        assert time.monotonic() - sent < 1.0
        assert (await prompt_and_collect(a, session_id, "from A"))[-1]["stop_reason"] == "end_turn"
        assert [m["seq"] for m in await messages(b, session_id)] == [1, 2, 3, 4]
        # C runs a long turn and is killed mid-turn: B takes the session over once C's heartbeat lapses.
        c = await stack.enter_async_context(
            subprocess_daemon(home_c, env={**pooled.env, "PONDER_MOCK_DELAY_MS": "20"}, backend=anyio_backend)
        )
        long_one = await start(c, thinking_level="max")
        taken, _ = await taken_over_after_a_kill(c, b, long_one, within_s=POOLED_LEASE_TTL_S + 1.0)
        with anyio.fail_after(60):
            events = await b.collect_turn(taken["turn_id"])
        assert events[-1]["stop_reason"] == "end_turn"
        stored = await messages(b, long_one)
        assert [m["content"][0]["text"] for m in stored if m["role"] == "user"] == ["a long one", "taken over"]


async def test_fencing_behind_a_transaction_pooler_refuses_a_stalled_daemon(
    pooled: PooledSchema, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    async with (
        subprocess_daemon(home_a, env={**pooled.env, "PONDER_MOCK_DELAY_MS": "40"}, backend=anyio_backend) as a,
        subprocess_daemon(home_b, env=pooled.env, backend=anyio_backend) as b,
    ):
        session_id = await start(a, thinking_level="max")
        turn = await a.request("session/prompt", {"session_id": session_id, "text": "A's long turn"})
        a_events: list[dict[str, Any]] = []
        await until_thinking(a, turn["turn_id"], a_events)
        owner_a, epoch_a, holder_pid = lease_row(pooled.direct, session_id) or (None, None, None)
        assert owner_a is not None and holder_pid is None  # behind the pooler: a heartbeat, no backend
        # A stalls (stopped: no heartbeat) until its lease lapses and B takes the session over.
        process_of(a).send_signal(signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            taken = None
            while taken is None:
                try:
                    taken = await b.request(
                        "session/prompt", {"session_id": session_id, "text": "B takes over", **QUICK}
                    )
                except RpcError as error:
                    assert error.code == -32004
                    assert time.monotonic() - stopped < POOLED_LEASE_TTL_S + 2.0
                    await anyio.sleep(0.1)
        finally:
            process_of(a).send_signal(signal.SIGCONT)
        with psycopg.connect(pooled.direct) as db:  # B's turn may be over already: its epoch stays
            [epoch_b] = db.execute("SELECT epoch FROM lease_epochs WHERE session_id = %s", (session_id,)).fetchone()
        assert epoch_b == epoch_a + 1
        with anyio.fail_after(60):
            async for event in a.events(turn["turn_id"]):
                a_events.append(event)
            b_events = await b.collect_turn(taken["turn_id"])
        end = a_events[-1]
        assert end["type"] == "turn_end" and end["stop_reason"] == "error", end
        assert f"Another daemon took session '{session_id}' over" in json.dumps(end["error"]), end["error"]
        assert b_events[-1]["stop_reason"] == "end_turn"
        stored = await messages(b, session_id)
        b_prompt = next(m for m in stored if m["role"] == "user" and m["content"][0]["text"] == "B takes over")
        assert [m["role"] for m in stored if m["seq"] > b_prompt["seq"]] == ["assistant"], stored
        assert await a.request("ping", {}) == {}


async def test_an_undeclared_pooler_is_a_sentence_and_a_password_never_leaves_a_pooled_daemon(
    postgres_server: ThrowawayPostgres, pgbouncer_server: ThrowawayPgBouncer, tmp_path: Path, anyio_backend: str
) -> None:
    home_a, home_b = homes(tmp_path, 2)
    pooled_url = pgbouncer_server.url(user=PASSWORD_ROLE, password=PASSWORD)
    async with AsyncExitStack() as stack:
        client, init = await _initialized(stack, home_a, {"PONDER_STORE_URL": pooled_url}, anyio_backend)
        [problem] = [p for p in init["problems"] if "PostgreSQL" in p]
        assert 'pooler = "transaction"' in problem and "ponder_pw@" in problem and PASSWORD not in problem
        with pytest.raises(RpcError) as refused:
            await client.request("session/start", {"model_id": "mock/echo"})
        assert "connection pooler" in refused.value.message and PASSWORD not in refused.value.message
        assert await client.request("ping", {}) == {}
    # Declared, with a password in the pooled URL and in the listen URL: neither leaves the daemon.
    env = {
        "PONDER_STORE_URL": pooled_url,
        "PONDER_STORE_POOLER": "transaction",
        "PONDER_STORE_LISTEN_URL": postgres_server.url(user=PASSWORD_ROLE, password=PASSWORD),
    }
    seen: list[str] = []
    async with subprocess_daemon(home_b, env=env, backend=anyio_backend) as client:
        client_messages = client.on_message

        def record(message: Any, method_of_id: dict[Any, str]) -> None:
            seen.append(json.dumps(message))
            if client_messages is not None:
                client_messages(message, method_of_id)

        client.on_message = record
        session_id = await start(client, model_id="mock/tools", approval_policy="auto", cwd=str(tmp_path))
        events = await prompt_and_collect(client, session_id, 'tool: run_command {"command": "env"}')
        [result] = [e for e in events if e["type"] == "tool_execution_end"]
        assert "PONDER_HOME=" in json.dumps(result)
        assert "PONDER_STORE_LISTEN_URL" not in json.dumps(result) and "PONDER_STORE_URL" not in json.dumps(result)
    text = "\n".join(seen)
    for home in (home_a, home_b):
        text += "".join(p.read_text(errors="replace") for p in (home / "logs").glob("*"))
    assert PASSWORD not in text


async def test_initialize_stops_naming_an_unreachable_server_once_it_is_back(
    postgres_server: ThrowawayPostgres, postgres_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    [home] = homes(tmp_path, 1)
    await anyio.to_thread.run_sync(postgres_server.stop)
    try:
        async with AsyncExitStack() as stack:
            client, init = await _initialized(stack, home, {"PONDER_STORE_URL": postgres_url}, anyio_backend)
            assert [p for p in init["problems"] if "cannot be reached" in p]
            await anyio.to_thread.run_sync(postgres_server.start)
            with anyio.fail_after(10):
                while [p for p in (await initialize(client))["problems"] if "PostgreSQL" in p]:
                    await anyio.sleep(0.2)  # (a try to connect at most every half second)
            assert (await client.request("session/start", {"model_id": "mock/echo"}))["session"]["session_id"]
    finally:
        await anyio.to_thread.run_sync(postgres_server.start)  # a no-op when it runs
