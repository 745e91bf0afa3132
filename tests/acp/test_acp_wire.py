"""The ACP pieces on their own: the schema check itself, prompt text, replay, and the
bridge's event translation fed event by event."""

from pathlib import Path
from typing import Any

import msgspec
import pytest

from daemon.acp import toolcalls
from daemon.acp import types as t
from daemon.acp.bridge import AcpBridge, PromptWaiter, TurnOutcome, usage_update_of
from daemon.acp.content import prompt_content, title_for
from daemon.acp.replay import replay_updates
from daemon.acp.server import AcpError, prompt_answer
from daemon.catalog.catalog import Catalog
from daemon.config.settings import load_config
from daemon.conversation import ChatMessage, Part
from daemon.errors import InvalidParams
from daemon.store import SessionRow
from daemon.tools import builtin_tools
from protocol import events as ev
from protocol.methods import ImageInput, ResourceInput, ResourceLinkInput, TextInput
from protocol.objects import ContextFill, Cost, ErrorInfo
from tests.support.acp_wire import check, validate_agent_message

# --- the schema check rejects what it should ----------------------------------------------


def notification(update: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}


@pytest.mark.parametrize(
    ("message", "method_of_id"),
    [
        (notification({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text"}}), {}),
        (notification({"sessionUpdate": "thinking_delta", "delta": "x"}), {}),
        (notification({"sessionUpdate": "tool_call", "toolCallId": "c"}), {}),  # no title
        (notification({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "done"}), {}),
        ({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "error"}}, {1: "session/prompt"}),
        ({"jsonrpc": "2.0", "id": 1, "result": {"agentCapabilities": {}}}, {1: "initialize"}),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, {}),  # an answer to nothing the client asked
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": "bad", "message": "x"}}, {1: "session/new"}),
        ({"jsonrpc": "2.0", "method": "agent/event", "params": {}}, {}),  # ponder's own dialect
        ({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}, {}),
        ({"id": 1, "result": {"stopReason": "end_turn"}}, {1: "session/prompt"}),  # no jsonrpc
    ],
)
def test_the_schema_check_rejects_messages_outside_acp(message: Any, method_of_id: dict[Any, str]) -> None:
    with pytest.raises(AssertionError):
        validate_agent_message(message, method_of_id)


def test_every_update_type_encodes_to_its_schema_definition() -> None:
    text = t.TextContent(text="x")
    every = [
        t.UserMessageChunk(content=text, message_id="m"),
        t.AgentMessageChunk(content=text, message_id="m"),
        t.AgentThoughtChunk(content=text),
        t.ToolCallStart(tool_call_id="c", title="Read a", kind="read", status="pending", raw_input={"path": "a"}),
        t.ToolCallProgress(tool_call_id="c", status="completed", content=toolcalls.text_content("ok")),
        t.ToolCallProgress(tool_call_id="c", content=[t.DiffToolContent(path="/a", old_text=None, new_text="n")]),
        t.ConfigOptionUpdate(config_options=[]),
        t.SessionInfoUpdate(title=None),
        t.SessionInfoUpdate(title="T", updated_at="2026-01-01T00:00:00Z"),
        t.UsageUpdate(used=1, size=2),
    ]
    for update in every:
        check(msgspec.to_builtins(t.SessionNotification(session_id="s", update=update)), "SessionNotification")


# --- prompt text, titles, usage -------------------------------------------------------------


def blocks(raw: list[dict[str, Any]]) -> list[t.PromptBlock]:
    return msgspec.convert({"sessionId": "s", "prompt": raw}, t.PromptRequest).prompt


def test_prompt_blocks_map_one_to_one_onto_prompt_content() -> None:
    prompt = blocks(
        [
            {"type": "text", "text": "Compare "},
            {
                "type": "resource_link",
                "name": "a.py",
                "uri": "file:///p/a.py",
                "title": "A",
                "mimeType": "text/x-python",
            },
            {"type": "text", "text": " with "},
            {"type": "resource", "resource": {"uri": "file:///p/b%20c.py", "blob": "aGk="}},
            {"type": "resource", "resource": {"uri": "file:///p/d.bin", "blob": "AAEC"}},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "uri": "file:///p/shot.png"},
        ]
    )
    assert prompt_content(prompt) == [
        TextInput(text="Compare "),
        ResourceLinkInput(uri="file:///p/a.py", name="A", mime_type="text/x-python"),
        TextInput(text=" with "),
        ResourceInput(uri="file:///p/b%20c.py", text="hi"),  # a blob that is UTF-8 text is taken as text
        ResourceInput(uri="file:///p/d.bin", blob="AAEC"),  # admission takes it if it is an image
        ImageInput(data="iVBORw0KGgo=", mime_type="image/png", name="shot.png"),
    ]
    with pytest.raises(InvalidParams):
        prompt_content(blocks([{"type": "audio", "data": "", "mimeType": "audio/wav"}]))
    with pytest.raises(InvalidParams):
        prompt_content(blocks([{"type": "text", "text": "  "}]))


def test_titles_come_from_the_first_line_or_the_first_resource() -> None:
    assert title_for(blocks([{"type": "text", "text": "\n  Fix   the bug\nin detail"}])) == "Fix the bug"
    long = "word " * 30
    title = title_for(blocks([{"type": "text", "text": long}]))
    assert title is not None and title.endswith("…") and len(title) <= 60
    assert title_for(blocks([{"type": "resource_link", "name": "a.py", "uri": "file:///a.py"}])) == "a.py"
    assert title_for(blocks([{"type": "text", "text": "  "}])) is None


def test_usage_update_carries_the_fill_the_window_and_the_sessions_cost() -> None:
    update = usage_update_of(ContextFill(used=116, size=200_000), Cost(amount=0.25, currency="USD"))
    assert update is not None
    assert msgspec.json.decode(msgspec.json.encode(update)) == {
        "sessionUpdate": "usage_update",
        "used": 116,
        "size": 200_000,
        "cost": {"amount": 0.25, "currency": "USD"},
    }
    unpriced = usage_update_of(ContextFill(used=116, size=8192), None)
    assert unpriced is not None and unpriced.cost is None
    # ACP requires the window size: a model whose window is unknown sends no usage_update.
    assert usage_update_of(ContextFill(used=116, size=None), None) is None
    assert usage_update_of(None, None) is None


# --- replay ----------------------------------------------------------------------------------


def test_replay_folds_results_into_calls_and_fails_calls_without_one(tmp_path: Path) -> None:
    call = Part(type="tool_call", call_id="c1", name="read_file", arguments={"path": "a.txt"})
    orphan = Part(type="tool_call", call_id="c2", name="run_command", arguments={"command": "make"})
    history = [
        ChatMessage(message_id="u", session_id="s", seq=1, role="user", parts=[Part(type="text", text="hi")]),
        ChatMessage(
            message_id="a",
            session_id="s",
            seq=2,
            role="assistant",
            parts=[Part(type="thinking", text="", redacted=True), Part(type="thinking", text="hmm"), call, orphan],
        ),
        ChatMessage(
            message_id="t",
            session_id="s",
            seq=3,
            role="tool",
            parts=[Part(type="tool_result", call_id="c1", name="read_file", text="A", is_error=False)],
        ),
    ]
    replayed = replay_updates(history, builtin_tools(), str(tmp_path))
    assert [type(u).__name__ for u in replayed] == [
        "UserMessageChunk",
        "AgentThoughtChunk",
        "ToolCallStart",
        "ToolCallStart",
    ]
    thought = replayed[1]
    assert isinstance(thought, t.AgentThoughtChunk) and thought.message_id == toolcalls.block_message_id("a", 1)
    first, second = replayed[2], replayed[3]
    assert isinstance(first, t.ToolCallStart) and isinstance(second, t.ToolCallStart)
    assert (first.status, first.kind, first.title) == ("completed", "read", "Read a.txt")
    assert (second.status, second.kind) == ("failed", "execute")
    assert "cancelled" in second.content[0].content.text.lower()  # type: ignore[union-attr]


def test_replay_pairs_results_within_their_turn_when_a_stored_history_repeats_an_id(tmp_path: Path) -> None:
    """Histories stored before ids were unique: the first call of every mock turn had the same id."""

    def message(n: int, role: Any, *parts: Part) -> ChatMessage:
        return ChatMessage(message_id=f"m{n}", session_id="s", seq=n, role=role, parts=list(parts))

    def write(name: str) -> Part:
        return Part(type="tool_call", call_id="call_same", name="write_file", arguments={"path": name, "content": "x"})

    history = [
        message(1, "user", Part(type="text", text="write kept.txt")),
        message(2, "assistant", write("kept.txt")),
        message(3, "tool", Part(type="tool_result", call_id="call_same", name="write_file", text="Wrote kept.txt")),
        message(4, "assistant", Part(type="text", text="done")),
        message(5, "user", Part(type="text", text="write refused.txt")),
        message(6, "assistant", write("refused.txt")),
        message(7, "tool", Part(type="tool_result", call_id="call_same", text="denied by the user", is_error=True)),
    ]
    cards = [u for u in replay_updates(history, builtin_tools(), str(tmp_path)) if isinstance(u, t.ToolCallStart)]
    assert [(c.tool_call_id, c.status) for c in cards] == [("call_same", "completed"), ("call_same-2", "failed")]
    texts = [c.content[0].content.text for c in cards]  # type: ignore[union-attr]
    assert texts == ["Wrote kept.txt", "denied by the user"]


# --- the bridge, event by event --------------------------------------------------------------


class FakeConnection:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def notify(self, method: str, params: Any) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": msgspec.to_builtins(params)}
        validate_agent_message(message, {})
        self.sent.append(message["params"]["update"])


class FakeSessions:
    def __init__(self, home: Path, cwd: Path) -> None:
        self.catalog = Catalog(load_config(home, env={}))
        self.tools = builtin_tools()
        self.cwd = cwd

    async def row(self, session_id: str) -> SessionRow:
        return SessionRow(id=session_id, cwd=str(self.cwd), model_id="mock/thinker", thinking_level="medium")

    def is_live(self, session_id: str) -> bool:
        return False


@pytest.mark.anyio
async def test_block_text_missing_from_deltas_is_sent_at_its_end_and_dangling_calls_fail(
    home: Path, tmp_path: Path
) -> None:
    connection = FakeConnection()
    bridge = AcpBridge(connection)  # type: ignore[arg-type]
    bridge.attach(FakeSessions(home, tmp_path))  # type: ignore[arg-type]
    waiter = bridge.begin_prompt("s")
    await bridge.admitted(waiter, "turn")
    ids = {"session_id": "s", "turn_id": "turn"}
    seq = iter(range(1, 100))

    async def emit(kind: type, **fields: Any) -> None:
        await bridge.emit(kind(**ids, seq=next(seq), **fields))

    await emit(ev.TurnStart, model_id="mock/thinker", thinking=_thinking(), user_message_id="u")
    await emit(ev.ThinkingStart, message_id="m", index=0)
    await emit(ev.ThinkingDelta, message_id="m", index=0, delta="Hel")
    await emit(ev.ThinkingEnd, message_id="m", index=0, text="Hello", redacted=False)
    await emit(ev.TextEnd, message_id="m", index=1, text="Answer")  # a block delivered whole
    await emit(
        ev.ToolCallEnd, message_id="m", index=2, call_id="c", name="write_file", arguments={"path": "x", "content": ""}
    )
    await emit(ev.TurnEnd, stop_reason="cancelled", usage=None)

    kinds = [
        (
            u["sessionUpdate"],
            u.get("content", {}).get("text") if u["sessionUpdate"].endswith("chunk") else u.get("status"),
        )
        for u in connection.sent
    ]
    assert kinds == [
        ("agent_thought_chunk", "Hel"),
        ("agent_thought_chunk", "lo"),
        ("agent_message_chunk", "Answer"),
        ("tool_call", "pending"),
        ("tool_call_update", "failed"),
    ]
    assert connection.sent[0]["messageId"] == connection.sent[1]["messageId"] == toolcalls.block_message_id("m", 0)
    assert waiter.done.is_set() and waiter.outcome is not None and waiter.outcome.stop_reason == "cancelled"


def _thinking() -> Any:
    from protocol.objects import Thinking

    return Thinking(
        requested="medium", effective="medium", supported=["medium"], reason=None, budget_tokens=None, request_params={}
    )


# --- stop reasons --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "cancel_requested", "answer"),
    [
        ("end_turn", False, "end_turn"),
        ("max_tokens", False, "max_tokens"),
        ("tool_limit", False, "max_turn_requests"),
        ("refusal", False, "refusal"),
        ("cancelled", False, "cancelled"),
        ("tool_use", False, "end_turn"),  # a model that asked for tools without naming any
        ("end_turn", True, "cancelled"),  # the client cancelled: it hears cancelled
        ("error", True, "cancelled"),
    ],
)
def test_stop_reasons_map_to_acp(stop_reason: str, cancel_requested: bool, answer: str) -> None:
    waiter = PromptWaiter("s", "turn", cancel_requested=cancel_requested)
    waiter.outcome = TurnOutcome(stop_reason, None, "mock/thinker")
    assert prompt_answer(waiter).stop_reason == answer


def test_a_spent_budget_is_max_turn_requests_that_says_which_budget() -> None:
    """PROTOCOL "ACP mode": budget maps to max_turn_requests; the sentence (in /budget's words) in _meta."""
    waiter = PromptWaiter("s", "turn")
    sentence = "The session's cost budget of $5.00 is spent ($5.02 used); raise it with session/budget to continue."
    waiter.outcome = TurnOutcome("budget", ErrorInfo(code=-32011, message=sentence), "anthropic/claude-opus-4-6")
    answer = prompt_answer(waiter)
    assert answer.stop_reason == "max_turn_requests"
    assert answer.meta == {
        "ponder": {
            "stopReason": "budget",
            "message": "The session's cost budget of $5.00 is spent ($5.02 used); raise it with /budget to continue.",
            "code": -32011,
        }
    }


def test_a_failed_turn_is_an_error_with_the_providers_message() -> None:
    waiter = PromptWaiter("s", "turn")
    info = ErrorInfo(code=-32603, message="anthropic answered 529: Overloaded.", provider_status=529)
    waiter.outcome = TurnOutcome("error", info, "anthropic/claude-sonnet-4-5")
    with pytest.raises(AcpError) as failed:
        prompt_answer(waiter)
    assert failed.value.code == -32603 and failed.value.message == info.message
    assert failed.value.data == {
        "message": info.message,
        "provider": "anthropic",
        "modelId": "anthropic/claude-sonnet-4-5",
        "providerStatus": 529,
        "ponderCode": -32603,
    }
    auth = ErrorInfo(code=-32003, message="Provider 'openai' rejected the key.", provider_status=401)
    waiter.outcome = TurnOutcome("error", auth, "openai/gpt-5.2")
    with pytest.raises(AcpError) as rejected:
        prompt_answer(waiter)
    assert rejected.value.code == -32000  # ACP's "authentication required"


@pytest.mark.anyio
async def test_a_cancel_that_overtakes_a_prompts_admission_still_cancels_it(home: Path, tmp_path: Path) -> None:
    bridge = AcpBridge(FakeConnection())  # type: ignore[arg-type]
    bridge.attach(FakeSessions(home, tmp_path))  # type: ignore[arg-type]
    admitting = bridge.begin_prompt("s")  # the prompt arrived; its user message is being stored
    other = bridge.begin_prompt("elsewhere")
    await bridge.cancel_turns("s")  # session/cancel is handled meanwhile
    assert admitting.cancel_requested and not other.cancel_requested
    await bridge.admitted(admitting, "turn")
    assert "turn" in bridge._doomed  # cancelled the moment it starts
    assert sorted(bridge.sessions_waiting()) == ["elsewhere", "s"]
    bridge.end_prompt(admitting)
    assert bridge.sessions_waiting() == ["elsewhere"]
