"""A real ACP client (the ``agent-client-protocol`` package) drives ``ponder acp`` in a subprocess.

The client library is asyncio-only, so these tests run the client on asyncio; the
daemon runs on asyncio and on trio (``PONDER_ASYNC_BACKEND``). Every message the daemon
writes is checked against the vendored ACP schema by a stream observer, and the library
parses every answer into its own pydantic models on top of that.
"""

import asyncio
import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.connection import StreamDirection, StreamEvent
from acp.schema import AllowedOutcome, ClientCapabilities, Implementation, RequestPermissionResponse

from daemon.catalog.catalog import Catalog
from daemon.config.settings import load_config
from daemon.context.pricing import cost_of
from protocol.objects import Usage
from tests.support.acp_wire import validate_agent_message
from tests.support.harness import subprocess_env
from tests.support.replay import ReplayServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ACP client library; the daemon's backend is daemon_backend


class Recorder:
    """An ACP client: records session updates, answers permission requests with ``answer``."""

    def __init__(self, answer: str = "allow_once") -> None:
        self.answer = answer
        self.updates: list[Any] = []
        self.permissions: list[Any] = []
        self.thinking = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if update.session_update == "agent_thought_chunk":
            self.thinking.set()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        self.permissions.append((tool_call, options))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("fs/read_text_file")

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == kind]


class SchemaObserver:
    """Checks every message the daemon writes; failures are collected (observers cannot raise)."""

    def __init__(self) -> None:
        self.method_of_id: dict[Any, str] = {}
        self.failures: list[str] = []
        self.seen = 0

    def __call__(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            if "method" in message and "id" in message:
                self.method_of_id[message["id"]] = message["method"]
            return
        self.seen += 1
        try:
            validate_agent_message(message, self.method_of_id)
        except AssertionError as exc:
            self.failures.append(str(exc))


class SentRecorder:
    """Records the requests the client wrote and the answers it read, in wire order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        self.answers: list[Any] = []  # results, in the order they arrived

    def __call__(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING and "method" in message and "id" in message:
            self.requests.append((message["method"], message.get("params")))
        elif event.direction is StreamDirection.INCOMING and "result" in message:
            self.answers.append(message["result"])


@asynccontextmanager
async def ponder_acp(
    client: Recorder,
    home: Path,
    backend: str,
    delay_ms: int = 0,
    sent: SentRecorder | None = None,
    extra_env: dict[str, str] | None = None,
    capabilities: ClientCapabilities | None = None,
) -> AsyncIterator[Any]:
    observer = SchemaObserver()
    env = subprocess_env(
        home, {"PONDER_ASYNC_BACKEND": backend, "PONDER_MOCK_DELAY_MS": str(delay_ms), **(extra_env or {})}
    )
    async with acp.spawn_agent_process(
        client,
        sys.executable,
        "-m",
        "daemon",
        "--home",
        str(home),
        "--log-level",
        "warning",
        "acp",
        env=env,
        cwd=REPO,
        transport_kwargs={"stderr": None},
        observers=[observer] if sent is None else [observer, sent],
    ) as (conn, process):
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=capabilities or ClientCapabilities(),
            client_info=Implementation(name="ponder-tests", version="0"),
        )
        assert init.protocol_version == 1
        assert init.agent_capabilities.load_session is True
        yield conn
    assert await asyncio.wait_for(process.wait(), 10) == 0
    assert observer.seen > 0
    assert observer.failures == []


def option(options: list[Any], config_id: str) -> Any:
    return next(
        o.root if hasattr(o, "root") else o for o in options if (o.root if hasattr(o, "root") else o).id == config_id
    )


def joined(chunks: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for chunk in chunks:
        out[chunk.message_id] = out.get(chunk.message_id, "") + chunk.content.text
    return out


async def test_a_session_on_mock_thinker_with_config_changes_and_a_full_reload(
    home: Path, work: Path, daemon_backend: str
) -> None:
    client = Recorder()
    async with ponder_acp(client, home, daemon_backend) as conn:
        new = await conn.new_session(cwd=str(work), mcp_servers=[])
        session_id = new.session_id
        assert option(new.config_options, "model").current_value == "mock/thinker"
        assert option(new.config_options, "thought_level").current_value == "medium"

        changed = await conn.set_config_option(config_id="thought_level", session_id=session_id, value="high")
        assert option(changed.config_options, "thought_level").current_value == "high"
        result = await conn.prompt(session_id=session_id, prompt=[acp.text_block("Why is the sky blue?")])
        assert result.stop_reason == "end_turn"
        thoughts = joined(client.of("agent_thought_chunk"))
        answers = joined(client.of("agent_message_chunk"))
        assert len(thoughts) == 1 and len(answers) == 1
        assert "café, naïve, 東京 ✓" in next(iter(thoughts.values()))  # eight sentences at "high"
        assert "Why is the sky blue?" in next(iter(answers.values()))
        assert [u.title for u in client.of("session_info_update")] == ["Why is the sky blue?"]
        assert client.of("usage_update")[-1].size == 200_000

        changed = await conn.set_config_option(config_id="model", session_id=session_id, value="mock/tools")
        level = option(changed.config_options, "thought_level")
        assert level.current_value == "high"
        assert [o.value for o in level.options] == ["off", "low", "medium", "high"]
        changed = await conn.set_config_option(config_id="model", session_id=session_id, value="mock/thinker")
        assert option(changed.config_options, "thought_level").current_value == "high"
        listed = await conn.list_sessions(cwd=str(work))
        assert [(s.session_id, s.title) for s in listed.sessions] == [(session_id, "Why is the sky blue?")]

    replay = Recorder()
    async with ponder_acp(replay, home, daemon_backend) as conn:
        loaded = await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        assert option(loaded.config_options, "thought_level").current_value == "high"
        await asyncio.sleep(0.05)  # notification handlers run as their own tasks
        assert [u.content.text for u in replay.of("user_message_chunk")] == ["Why is the sky blue?"]
        assert joined(replay.of("agent_thought_chunk")) == thoughts  # same messageId, byte-exact text
        assert joined(replay.of("agent_message_chunk")) == answers


async def test_usage_update_after_each_model_call_and_on_load_and_resume_with_the_sessions_cost(
    home: Path, work: Path, daemon_backend: str, replay_server: ReplayServer
) -> None:
    model_id = "anthropic/claude-opus-4-6"
    (home / "config.toml").write_text(f'[defaults]\nmodel = "{model_id}"\n')
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake-acp-usage", "ANTHROPIC_BASE_URL": replay_server.url}
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use")
    replay_server.enqueue_fixture("anthropic", "adaptive-thinking-tool-use-turn2")
    catalog = Catalog(load_config(home, env=env))
    spec = catalog.get(model_id)
    price = catalog.price(spec)
    assert price is not None and spec.context_window is not None
    first, second = (cost_of(Usage(input_tokens=i, output_tokens=o), price) for i, o in ((642, 127), (861, 74)))
    assert first is not None and second is not None

    client = Recorder()
    async with ponder_acp(client, home, daemon_backend, extra_env=env) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        result = await conn.prompt(session_id=session_id, prompt=[acp.text_block("Umbrella in Lyon today?")])
        assert result.stop_reason == "end_turn"
    updates = client.of("usage_update")
    # One per model call (the tool step and the answer): the context fill, and the session's cost so far.
    assert [(u.used, u.size) for u in updates] == [(642 + 127, spec.context_window), (861 + 74, spec.context_window)]
    assert [u.cost.currency for u in updates] == ["USD", "USD"]
    assert updates[0].cost.amount == pytest.approx(first.amount)
    assert updates[1].cost.amount == pytest.approx(first.amount + second.amount)

    for reopen in ("load", "resume"):
        again = Recorder()
        async with ponder_acp(again, home, daemon_backend, extra_env=env) as conn:
            if reopen == "load":
                await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            else:
                await conn.resume_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            await asyncio.sleep(0.05)  # notification handlers run as their own tasks
        [stands] = again.of("usage_update")
        assert (stands.used, stands.size) == (861 + 74, spec.context_window), reopen
        assert stands.cost.amount == pytest.approx(first.amount + second.amount), reopen
    assert len(replay_server.requests) == 2


async def test_usage_update_of_an_unpriced_model_has_no_cost(home: Path, work: Path, daemon_backend: str) -> None:
    client = Recorder()
    async with ponder_acp(client, home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        await conn.prompt(session_id=session_id, prompt=[acp.text_block("Hello")])
    [update] = client.of("usage_update")
    assert update.cost is None and update.size == 200_000 and update.used > 0


async def test_cancel_mid_thought_answers_cancelled(home: Path, work: Path, daemon_backend: str) -> None:
    client = Recorder()
    async with ponder_acp(client, home, daemon_backend, delay_ms=20) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        turn = asyncio.create_task(conn.prompt(session_id=session_id, prompt=[acp.text_block("Ponder this at length")]))
        await asyncio.wait_for(client.thinking.wait(), 10)
        await conn.cancel(session_id=session_id)
        result = await asyncio.wait_for(turn, 10)
        assert result.stop_reason == "cancelled"
        assert client.of("agent_message_chunk") == []  # stopped while still thinking
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/echo")
        again = await conn.prompt(session_id=session_id, prompt=[acp.text_block("still there?")])
        assert again.stop_reason == "end_turn"


@pytest.mark.parametrize(("answer", "written"), [("allow_once", True), ("reject_once", False)])
async def test_a_tool_call_with_approval(
    home: Path, work: Path, daemon_backend: str, answer: str, written: bool
) -> None:
    client = Recorder(answer)
    async with ponder_acp(client, home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/tools")
        script = 'tool: write_file {"path": "hello.txt", "content": "hello from ponder\\n"}'
        result = await conn.prompt(session_id=session_id, prompt=[acp.text_block(script)])
        assert result.stop_reason == "end_turn"

    [(tool_call, options)] = client.permissions
    assert [(o.option_id, o.kind) for o in options] == [
        ("allow_once", "allow_once"),
        ("allow_session", "allow_always"),
        ("allow_always", "allow_always"),
        ("deny", "reject_once"),
        ("deny_always", "reject_always"),
    ]
    target = str((work / "hello.txt").resolve())
    assert tool_call.kind == "edit" and tool_call.raw_input == {"path": "hello.txt", "content": "hello from ponder\n"}
    [start] = client.of("tool_call")
    assert start.tool_call_id == tool_call.tool_call_id and start.status == "pending"
    assert [loc.path for loc in start.locations] == [target]
    progress = client.of("tool_call_update")
    assert [u.status for u in progress] == ["in_progress", "completed" if written else "failed"]
    assert (work / "hello.txt").exists() is written
    final = progress[-1].content[0]
    if written:
        assert (final.type, final.path, final.old_text, final.new_text) == ("diff", target, None, "hello from ponder\n")
    else:
        assert "denied" in final.content.text


async def test_sigterm_mid_turn_answers_the_prompt_cancelled_and_exits_0(
    home: Path, work: Path, daemon_backend: str
) -> None:
    client = Recorder()
    observer = SchemaObserver()
    env = subprocess_env(home, {"PONDER_ASYNC_BACKEND": daemon_backend, "PONDER_MOCK_DELAY_MS": "20"})
    command = [sys.executable, "-m", "daemon", "--home", str(home), "--log-level", "warning", "acp"]
    async with acp.spawn_agent_process(
        client, *command, env=env, cwd=REPO, transport_kwargs={"stderr": None}, observers=[observer]
    ) as (conn, process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        turn = asyncio.create_task(conn.prompt(session_id=session_id, prompt=[acp.text_block("Think it through")]))
        await asyncio.wait_for(client.thinking.wait(), 10)
        process.send_signal(signal.SIGTERM)
        result = await asyncio.wait_for(turn, 10)
        assert result.stop_reason == "cancelled"
        assert await asyncio.wait_for(process.wait(), 10) == 0
    assert observer.failures == []


async def test_prompt_blocks_reach_the_model_separated(home: Path, work: Path, daemon_backend: str) -> None:
    client = Recorder()
    (work / "notes.txt").write_text("buy milk\n")
    notes = (work / "notes.txt").resolve().as_uri()
    async with ponder_acp(client, home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/echo")
        blocks = [
            acp.text_block("Look at these:"),
            acp.resource_link_block("notes.txt", notes),
            acp.resource_link_block("spec", "https://example.com/spec"),
        ]
        assert (await conn.prompt(session_id=session_id, prompt=blocks)).stop_reason == "end_turn"
    [answer] = joined(client.of("agent_message_chunk")).values()  # mock/echo answers with the user message
    # A file inside the cwd is read at admission and sent as delimited text; another scheme stays a link.
    assert (
        answer
        == f'Look at these:<file uri="{notes}">\nbuy milk\n\n</file>[linked resource: spec <https://example.com/spec>]'
    )


async def test_an_image_reaches_the_model_and_is_replayed_on_load(home: Path, work: Path, daemon_backend: str) -> None:
    import base64
    import io

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (32, 16), (0, 200, 0)).save(png, "PNG")
    data = base64.b64encode(png.getvalue()).decode()
    client = Recorder()
    async with ponder_acp(client, home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        # mock/thinker takes no images: a clear error, and nothing is stored.
        with pytest.raises(acp.RequestError) as refused:
            await conn.prompt(session_id=session_id, prompt=[acp.image_block(data, "image/png")])
        assert "takes no images" in str(refused.value) and "mock/echo" in str(refused.value)
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/echo")
        blocks = [
            acp.text_block("What is this?"),
            acp.image_block(data, "image/png"),
            acp.resource_block(acp.schema.TextResourceContents(uri="file:///mem/a.md", text="# A")),
        ]
        assert (await conn.prompt(session_id=session_id, prompt=blocks)).stop_reason == "end_turn"
    [answer] = joined(client.of("agent_message_chunk")).values()
    assert f"[image image/png 32x16 {len(png.getvalue())} bytes]" in answer

    replay = Recorder()
    async with ponder_acp(replay, home, daemon_backend) as conn:
        await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        await asyncio.sleep(0.05)  # notification handlers run as their own tasks
    shown = [u.content for u in replay.of("user_message_chunk")]
    assert [c.type for c in shown] == ["text", "image", "resource"]
    assert shown[0].text == "What is this?"
    assert shown[1].data == data and shown[1].mime_type == "image/png"
    assert shown[2].resource.uri == "file:///mem/a.md" and shown[2].resource.text == "# A"


BURSTS = 12


async def test_config_changes_sent_without_waiting_apply_in_the_order_sent(
    home: Path, work: Path, daemon_backend: str
) -> None:
    """Bursts of session/set_config_option, all in flight at once: the session ends on the
    last value sent, for the model and for the thinking level."""
    client, sent = Recorder(), SentRecorder()
    rng = random.Random(17)
    async with ponder_acp(client, home, daemon_backend, sent=sent) as conn:
        new = await conn.new_session(cwd=str(work), mcp_servers=[])
        session_id = new.session_id
        models = ["mock/echo", "mock/thinker", "mock/tools"]
        levels = [o.value for o in option(new.config_options, "thought_level").options]
        assert len(levels) >= 3

        async def burst(config_id: str, values: list[str]) -> str:
            before, answered = len(sent.requests), len(sent.answers)
            await asyncio.gather(
                *(conn.set_config_option(config_id=config_id, session_id=session_id, value=v) for v in values)
            )
            written = [p["value"] for m, p in sent.requests[before:] if m == "session/set_config_option"]
            assert sorted(written) == sorted(values)
            # A client showing the options of each answer as it arrives ends on the last value sent.
            last_answer = sent.answers[answered:][-1]
            shown = next(o["currentValue"] for o in last_answer["configOptions"] if o["id"] == config_id)
            assert shown == written[-1], (written, shown)
            loaded = await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            assert option(loaded.config_options, config_id).current_value == written[-1], written
            return written[-1]

        for _ in range(BURSTS):
            await burst("model", [rng.choice(models) for _ in range(8)])
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/thinker")
        for _ in range(BURSTS):
            last = await burst("thought_level", [rng.choice(levels) for _ in range(8)])
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/echo")

    # The last level sent is the one the session keeps (the requested level, across a restart).
    async with ponder_acp(Recorder(), home, daemon_backend) as conn:
        await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        back = await conn.set_config_option(config_id="model", session_id=session_id, value="mock/thinker")
        assert option(back.config_options, "thought_level").current_value == last


async def test_a_client_echoing_the_options_it_was_shown_keeps_the_requested_level(
    home: Path, work: Path, daemon_backend: str
) -> None:
    async with ponder_acp(Recorder(), home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        await conn.set_config_option(config_id="thought_level", session_id=session_id, value="high")
        changed = await conn.set_config_option(config_id="model", session_id=session_id, value="mock/echo")
        assert option(changed.config_options, "thought_level").current_value == "off"  # echo cannot think

    # A client reconnects and sends back every option's value as it was last shown.
    async with ponder_acp(Recorder(), home, daemon_backend) as conn:
        loaded = await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        for config_id in ("model", "thought_level"):
            shown = option(loaded.config_options, config_id).current_value
            await conn.set_config_option(config_id=config_id, session_id=session_id, value=shown)
        back = await conn.set_config_option(config_id="model", session_id=session_id, value="mock/thinker")
        assert option(back.config_options, "thought_level").current_value == "high"
        # Choosing a level the selector does not show still sets it.
        lower = await conn.set_config_option(config_id="thought_level", session_id=session_id, value="low")
        assert option(lower.config_options, "thought_level").current_value == "low"


async def test_tool_calls_of_two_turns_have_their_own_ids_live_and_after_a_restart(
    home: Path, work: Path, daemon_backend: str
) -> None:
    client = Recorder()
    async with ponder_acp(client, home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        await conn.set_config_option(config_id="model", session_id=session_id, value="mock/tools")
        for answer, name in (("allow_once", "kept.txt"), ("reject_once", "refused.txt")):
            client.answer = answer
            script = f'tool: write_file {{"path": "{name}", "content": "{name}\\n"}}'
            assert (await conn.prompt(session_id=session_id, prompt=[acp.text_block(script)])).stop_reason == "end_turn"
    live = client.of("tool_call")
    assert len({c.tool_call_id for c in live}) == 2  # a second card, not an update of the first
    assert [(u.tool_call_id, u.status) for u in client.of("tool_call_update") if u.status != "in_progress"] == [
        (live[0].tool_call_id, "completed"),
        (live[1].tool_call_id, "failed"),
    ]
    assert (work / "kept.txt").exists() and not (work / "refused.txt").exists()

    replay = Recorder()
    async with ponder_acp(replay, home, daemon_backend) as conn:
        await conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        await asyncio.sleep(0.05)  # notification handlers run as their own tasks
    cards = replay.of("tool_call")
    assert [(c.tool_call_id, c.status) for c in cards] == [
        (live[0].tool_call_id, "completed"),
        (live[1].tool_call_id, "failed"),
    ]
    assert "denied" not in cards[0].content[0].content.text and "denied" in cards[1].content[0].content.text


async def test_a_spent_budget_is_raised_with_the_budget_command_from_a_real_client(
    home: Path, work: Path, daemon_backend: str
) -> None:
    """Issue #24: every face raises a spent budget; here the ACP library against ``ponder acp``."""
    (home / "config.toml").write_text("[budget]\nmax_tokens = 1\n")
    client = Recorder()
    async with ponder_acp(client, home, daemon_backend) as conn:
        session_id = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
        first = await conn.prompt(session_id=session_id, prompt=[acp.text_block("hello")])
        assert first.stop_reason == "end_turn"  # within the budget before the call; it spends it
        stopped = await conn.prompt(session_id=session_id, prompt=[acp.text_block("again")])
        assert stopped.stop_reason == "max_turn_requests"
        assert stopped.field_meta is not None and stopped.field_meta["ponder"]["stopReason"] == "budget"
        assert "raise it with /budget" in stopped.field_meta["ponder"]["message"]
        raised = await conn.prompt(session_id=session_id, prompt=[acp.text_block("/budget 5m tokens")])
        assert raised.stop_reason == "end_turn"
        again = await conn.prompt(session_id=session_id, prompt=[acp.text_block("go on")])
        assert again.stop_reason == "end_turn"
        read = await conn.ext_method("ponder/session/budget", {"sessionId": session_id})
        assert read["budget"] == {"maxTokens": 5_000_000} and read["own"] is True
    said = [u.content.text for u in client.of("agent_message_chunk")]
    assert any(text.startswith("This session's budget is 5,000,000 tokens (its own)") for text in said), said
