"""``session/prompt {output_schema, output_retries}`` over the real protocol, each provider a real
HTTP server on 127.0.0.1 (PROTOCOL.md "Structured output and headless runs"): the native path where
the provider's strict mode takes the schema as it is, the ``final_output`` tool otherwise, what each
request carries, retries with the validation errors, ``schema_failed``, a provider that refuses
native mode, and the schemas refused at admission."""

import copy
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcError
from tests.support.harness import in_memory_daemon
from tests.support.replay import ReplayServer, ScriptedResponse
from tests.support.steer_streams import FAMILIES, Family

pytestmark = pytest.mark.anyio

SSE = {"content-type": "text/event-stream"}
# A Pydantic model's JSON Schema from a real project: $defs, $ref, and three optional fields.
INVOICES = json.loads((Path(__file__).parents[1] / "fixtures" / "schemas" / "invoice_list.json").read_text())
ITEM = {
    "invoice_no": "INV-7",
    "description": "Laptop stand",
    "quantity": "2",
    "date": "2026-11-02",
    "unit_price": "40",
    "amount": "80",
    "total": "96",
    "email": None,
}
ANSWER = {"items": [ITEM]}
# Every property required, nothing open: what OpenAI's strict mode takes as it is.
STRICT = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "array", "items": {"type": "integer"}}},
    "required": ["city", "days"],
}


async def run(
    home: Path,
    server: ReplayServer,
    family: Family,
    schema: dict[str, Any],
    *,
    retries: int | None = None,
    text: str = "Extract the invoices.",
) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    """One prompt with ``schema`` in a new session of ``family``'s model: (turn_end, the turn's events, client)."""
    async with in_memory_daemon(home, env=family.daemon_env(server)) as (client, _):
        started = await client.request(
            "session/start",
            {"model_id": family.model_id, "thinking_level": "off", "cwd": str(home), "approval_policy": "auto"},
        )
        params: dict[str, Any] = {"session_id": started["session"]["session_id"], "text": text}
        params["output_schema"] = schema
        if retries is not None:
            params["output_retries"] = retries
        turn = await client.request("session/prompt", params)
        with anyio.fail_after(30):
            events = await client.collect_turn(turn["turn_id"])
        stored = await client.request("session/messages", {"session_id": params["session_id"]})
        return events[-1], events, stored["messages"]


def enqueue(server: ReplayServer, body: bytes, status: int = 200) -> None:
    server.enqueue(ScriptedResponse(status=status, body=body, headers=SSE if status == 200 else {}))


def native_schema_of(family: str, body: dict[str, Any]) -> Any:
    """The schema a request body asks the provider's native structured output for (None: none)."""
    if family == "anthropic":
        return (body.get("output_config") or {}).get("format", {}).get("schema")
    if family == "openai-chat":
        return (body.get("response_format") or {}).get("json_schema", {}).get("schema")
    if family == "openai-responses":
        return (body.get("text") or {}).get("format", {}).get("schema")
    return (body.get("generationConfig") or {}).get("responseJsonSchema")


def final_output_tool(family: str, body: dict[str, Any]) -> Any:
    """The ``final_output`` tool's input schema as a request body offers it (None: not offered)."""
    for tool in body.get("tools") or []:
        if family == "anthropic" and tool["name"] == "final_output":
            return tool["input_schema"]
        if family == "openai-chat" and tool["function"]["name"] == "final_output":
            return tool["function"]["parameters"]
        if family == "openai-responses" and tool["name"] == "final_output":
            assert tool["strict"] is False, "a schema with optional fields is never sent strictly"
            return tool["parameters"]
        if family == "gemini":
            for declaration in tool["functionDeclarations"]:
                if declaration["name"] == "final_output":
                    return declaration.get("parametersJsonSchema", declaration.get("parameters"))
    return None


def required_everywhere(schema: Any) -> list[list[str]]:
    """Every ``required`` list in a schema, in document order: what no path may ever change."""
    found = []
    if isinstance(schema, dict):
        if isinstance(schema.get("required"), list):
            found.append(schema["required"])
        for value in schema.values():
            found += required_everywhere(value)
    elif isinstance(schema, list):
        for value in schema:
            found += required_everywhere(value)
    return found


@pytest.mark.parametrize("family_name", sorted(FAMILIES))
async def test_a_pydantic_schema_with_an_optional_field_goes_through_each_providers_path(
    family_name, home, replay_server
):
    family = FAMILIES[family_name]
    # Anthropic's output format takes it (objects closed, optional fields allowed); OpenAI's strict
    # mode would need the optional fields required, and Gemini's schema has no `default`: the tool.
    native = family_name == "anthropic"
    if native:
        family.enqueue_text(replay_server, json.dumps(ANSWER))
    else:
        family.enqueue_tools(replay_server, [("call_out", "final_output", ANSWER)])
    end, events, messages = await run(home, replay_server, family, INVOICES)
    assert end["stop_reason"] == "end_turn", end
    assert end["structured_output"] == ANSWER
    body = replay_server.requests[-1].json()
    if native:
        sent = native_schema_of(family_name, body)
        assert final_output_tool(family_name, body) is None
        item = sent["$defs"]["InvoiceItem"]
        assert sent["additionalProperties"] is False and item["additionalProperties"] is False
        # closed, and nothing else changed: the optional fields stay optional
        unclosed = copy.deepcopy(sent)
        del unclosed["additionalProperties"], unclosed["$defs"]["InvoiceItem"]["additionalProperties"]
        assert unclosed == INVOICES
    else:
        assert native_schema_of(family_name, body) is None
        assert final_output_tool(family_name, body) == INVOICES  # the user's schema, as given
        # the call shows as tool_call events, never runs, and is stored with its result
        assert [e["name"] for e in events if e["type"] == "tool_call_end"] == ["final_output"]
        assert not [e for e in events if e["type"].startswith("tool_execution")]
        results = [b for m in messages if m["role"] == "tool" for b in m["content"]]
        assert results == [{"type": "tool_result", "call_id": "call_out", "is_error": False, "text": "Accepted."}]
    assert required_everywhere(native_schema_of(family_name, body) or final_output_tool(family_name, body)) == [
        ["items"],
        ["invoice_no", "description", "quantity", "date", "unit_price", "amount", "total"],
    ]


@pytest.mark.parametrize("family_name", ["openai-chat", "openai-responses", "gemini"])
async def test_a_schema_strict_mode_takes_goes_natively(family_name, home, replay_server):
    family = FAMILIES[family_name]
    family.enqueue_text(replay_server, json.dumps({"city": "Lyon", "days": [1, 2]}))
    end, _, _ = await run(home, replay_server, family, STRICT)
    assert end["stop_reason"] == "end_turn", end
    assert end["structured_output"] == {"city": "Lyon", "days": [1, 2]}
    body = replay_server.requests[-1].json()
    assert final_output_tool(family_name, body) is None
    expected = STRICT if family_name == "gemini" else {**STRICT, "additionalProperties": False}
    assert native_schema_of(family_name, body) == expected
    if family_name == "openai-responses":
        assert body["text"]["format"] == {
            "type": "json_schema",
            "name": "final_output",
            "schema": expected,
            "strict": True,
        }
    if family_name == "openai-chat":
        assert body["response_format"]["json_schema"]["strict"] is True
    if family_name == "gemini":
        assert body["generationConfig"]["responseMimeType"] == "application/json"


async def test_an_invalid_answer_goes_back_with_its_errors_then_a_valid_one_ends_the_turn(home, replay_server):
    family = FAMILIES["anthropic"]
    schema = {**INVOICES, "additionalProperties": True}  # open: not native, the tool
    wrong = {"items": [{**ITEM, "quantity": 2}]}
    family.enqueue_tools(replay_server, [("call_1", "final_output", wrong)])
    family.enqueue_tools(replay_server, [("call_2", "final_output", ANSWER)])
    end, _events, messages = await run(home, replay_server, family, schema)
    assert end["stop_reason"] == "end_turn" and end["structured_output"] == ANSWER
    # the second request carries the first call's result: the validation errors, as an error
    retry = replay_server.requests[-1].json()["messages"][-1]["content"][0]
    assert retry["type"] == "tool_result" and retry["tool_use_id"] == "call_1" and retry["is_error"] is True
    assert "$.items[0].quantity: 2 is not of type 'string'" in retry["content"]
    results = [b for m in messages if m["role"] == "tool" for b in m["content"]]
    assert [(r["call_id"], r["is_error"]) for r in results] == [("call_1", True), ("call_2", False)]
    assert results[1]["text"] == "Accepted."


async def test_prose_after_every_retry_ends_schema_failed_with_the_errors(home, replay_server):
    family = FAMILIES["openai-chat"]
    for _ in range(2):
        family.enqueue_text(replay_server, "Sure! The invoice is INV-7.")
    end, _events, messages = await run(home, replay_server, family, INVOICES, retries=1)
    assert end["stop_reason"] == "schema_failed", end
    assert end["structured_output"] is None
    assert end["error"]["code"] == -32602 and "did not match the output schema" in end["error"]["message"]
    assert end["error"]["errors"][0]["path"] == "$"
    assert "final_output" in end["error"]["errors"][0]["message"]
    assert len(replay_server.requests) == 2  # one answer, one retry: output_retries 1
    # the retry told the model why, as a user message of the turn
    notes = [m for m in messages if m["role"] == "user" and m["origin"] == "schema_retry"]
    assert len(notes) == 1 and "does not match the required output schema" in notes[0]["content"][0]["text"]
    assert replay_server.requests[1].json()["messages"][-1]["content"] == notes[0]["content"][0]["text"]


async def test_a_valid_json_text_answer_is_taken_in_tool_mode_too(home, replay_server):
    family = FAMILIES["openai-responses"]
    family.enqueue_text(replay_server, "```json\n" + json.dumps(ANSWER) + "\n```")
    end, _, _ = await run(home, replay_server, family, INVOICES)
    assert end["stop_reason"] == "end_turn" and end["structured_output"] == ANSWER


async def test_garbage_final_output_arguments_are_an_invalid_answer(home, replay_server):
    family = FAMILIES["anthropic"]
    schema = {**INVOICES, "additionalProperties": True}
    body = family.tools([("call_1", "final_output", {"items": []})]).replace(b'{\\"items\\": []}', b'{\\"items\\": [')
    enqueue(replay_server, body)
    family.enqueue_tools(replay_server, [("call_2", "final_output", {"items": []})])
    end, _, messages = await run(home, replay_server, family, schema)
    assert end["stop_reason"] == "end_turn" and end["structured_output"] == {"items": []}
    first = next(b for m in messages if m["role"] == "tool" for b in m["content"])
    assert first["is_error"] and "not valid JSON" in first["text"]


async def test_a_non_object_root_is_wrapped_and_unwrapped(home, replay_server):
    family = FAMILIES["openai-responses"]
    schema = {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "integer"}}}
    family.enqueue_text(replay_server, json.dumps({"value": [1, 2, 3]}))
    end, _, _ = await run(home, replay_server, family, schema)
    assert end["stop_reason"] == "end_turn", end
    assert end["structured_output"] == [1, 2, 3]
    # strict mode takes the wrapper as it is (closed): native, and $defs lifted to its root
    assert native_schema_of("openai-responses", replay_server.requests[-1].json()) == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        "required": ["value"],
        "$defs": {"n": {"type": "integer"}},
        "additionalProperties": False,
    }


async def test_a_provider_that_refuses_native_mode_gets_the_tool_and_is_remembered(home, replay_server):
    family = FAMILIES["gemini"]
    refusal = {
        "error": {
            "code": 400,
            "message": "Function calling with a response mime type: 'application/json' is unsupported",
            "status": "INVALID_ARGUMENT",
        }
    }
    enqueue(replay_server, json.dumps(refusal).encode(), status=400)
    family.enqueue_tools(replay_server, [("call_1", "final_output", {"city": "Lyon", "days": []})])
    family.enqueue_tools(replay_server, [("call_2", "final_output", {"city": "Metz", "days": [3]})])
    async with in_memory_daemon(home, env=family.daemon_env(replay_server)) as (client, _):
        started = await client.request(
            "session/start", {"model_id": family.model_id, "thinking_level": "off", "cwd": str(home)}
        )
        session_id = started["session"]["session_id"]
        ends = []
        for _ in range(2):
            turn = await client.request(
                "session/prompt", {"session_id": session_id, "text": "Where?", "output_schema": STRICT}
            )
            with anyio.fail_after(30):
                events = await client.collect_turn(turn["turn_id"])
            ends.append(events[-1])
            if not ends[1:]:
                retries = [e for e in events if e["type"] == "retry"]
                assert len(retries) == 1 and "refused native structured output" in retries[0]["error"]["message"]
    assert [e["structured_output"] for e in ends] == [{"city": "Lyon", "days": []}, {"city": "Metz", "days": [3]}]
    bodies = [r.json() for r in replay_server.requests]
    assert [native_schema_of("gemini", b) is not None for b in bodies] == [True, False, False]
    assert [final_output_tool("gemini", b) is not None for b in bodies] == [False, True, True]


async def test_max_turns_ends_tool_limit(home, replay_server):
    family = FAMILIES["anthropic"]
    for i in range(3):
        family.enqueue_tools(replay_server, [(f"call_{i}", "list_files", {})])
    async with in_memory_daemon(home, env=family.daemon_env(replay_server)) as (client, _):
        started = await client.request(
            "session/start",
            {"model_id": family.model_id, "thinking_level": "off", "cwd": str(home), "approval_policy": "auto"},
        )
        turn = await client.request(
            "session/prompt", {"session_id": started["session"]["session_id"], "text": "Look.", "max_turns": 2}
        )
        with anyio.fail_after(30):
            events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "tool_limit"
    assert len(replay_server.requests) == 2


@pytest.mark.parametrize(
    ("schema", "path", "words"),
    [
        ({"type": "objectx"}, "$.params.output_schema.type", "not a valid JSON Schema"),
        ({"properties": {"a": {"minimum": "one"}}}, "$.params.output_schema.properties.a.minimum", "not of type"),
        ({"$ref": "#"}, "$.params.output_schema", "cycle that never reaches a value"),
        (
            {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
            "$.params.output_schema.$defs.a",
            "cycle",
        ),
        ({"$ref": "https://example.com/s.json"}, "$.params.output_schema.$ref", "points outside the schema"),
        ({"$ref": "#/$defs/missing"}, "$.params.output_schema.$ref", "points to nothing"),
        (
            {"type": "object", "description": "x" * (2 * 1024 * 1024)},
            "$.params.output_schema",
            "at most 1,048,576 are taken",
        ),
    ],
)
async def test_a_schema_that_cannot_be_used_is_refused_and_nothing_is_stored(home, schema, path, words):
    async with in_memory_daemon(home) as (client, _):
        started = await client.request("session/start", {"model_id": "mock/echo", "cwd": str(home)})
        session_id = started["session"]["session_id"]
        with pytest.raises(RpcError) as refused:
            await client.request("session/prompt", {"session_id": session_id, "text": "hi", "output_schema": schema})
        assert refused.value.code == -32602
        assert words in refused.value.message
        assert refused.value.data["errors"][0]["path"] == path
        assert (await client.request("session/messages", {"session_id": session_id}))["messages"] == []


async def test_a_recursive_tree_schema_is_taken(home):
    tree = {
        "$defs": {
            "node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
        },
        "$ref": "#/$defs/node",
    }
    async with in_memory_daemon(home) as (client, _):
        started = await client.request("session/start", {"model_id": "mock/echo", "cwd": str(home)})
        turn = await client.request(
            "session/prompt",
            {"session_id": started["session"]["session_id"], "text": '{"kids": [{"kids": []}]}', "output_schema": tree},
        )
        events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn" and events[-1]["structured_output"] == {"kids": [{"kids": []}]}


async def test_a_steer_may_not_carry_an_output_schema(home):
    async with in_memory_daemon(home) as (client, _):
        started = await client.request("session/start", {"model_id": "mock/echo", "cwd": str(home)})
        with pytest.raises(RpcError) as refused:
            await client.request(
                "session/prompt",
                {
                    "session_id": started["session"]["session_id"],
                    "text": "hi",
                    "delivery": "steer",
                    "output_schema": {"type": "object"},
                },
            )
        assert refused.value.code == -32602 and refused.value.data["errors"][0]["path"] == "$.params.output_schema"


async def test_continue_keeps_the_prompts_output_schema_across_a_restart(home, replay_server):
    family = FAMILIES["anthropic"]
    schema = {**INVOICES, "additionalProperties": True}  # open: the final_output tool
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": "try again later"}}
    enqueue(replay_server, json.dumps(refusal).encode(), status=400)
    async with in_memory_daemon(home, env=family.daemon_env(replay_server)) as (client, _):
        started = await client.request(
            "session/start", {"model_id": family.model_id, "thinking_level": "off", "cwd": str(home)}
        )
        session_id = started["session"]["session_id"]
        turn = await client.request(
            "session/prompt",
            {"session_id": session_id, "text": "Extract.", "output_schema": schema, "output_retries": 0},
        )
        with anyio.fail_after(30):
            first = await client.collect_turn(turn["turn_id"])
    assert first[-1]["stop_reason"] == "error"
    family.enqueue_tools(replay_server, [("call_1", "final_output", {"items": "no"})])
    async with in_memory_daemon(home, env=family.daemon_env(replay_server)) as (client, _):
        continued = await client.request("session/continue", {"session_id": session_id})
        with anyio.fail_after(30):
            events = await client.collect_turn(continued["turn_id"])
    # the same schema, and the same retries (none): the invalid answer ends it
    assert final_output_tool("anthropic", replay_server.requests[-1].json()) == schema
    assert events[-1]["stop_reason"] == "schema_failed", events[-1]
    assert events[-1]["error"]["errors"][0]["path"] == "$.items"


async def test_a_model_without_tools_is_told_the_schema_and_answers_with_the_json(home, replay_server):
    (home / "config.toml").write_text(
        f'[providers.local]\napi = "openai-chat"\nbase_url = "{replay_server.url}"\n'
        '[[providers.local.models]]\nmodel = "tiny"\nsupports_tools = false\nthinking_levels = []\n'
    )
    family = FAMILIES["openai-chat"]
    family.enqueue_text(replay_server, "It is INV-7.")  # prose: sent back
    family.enqueue_text(replay_server, json.dumps(ANSWER))
    async with in_memory_daemon(home) as (client, _):
        started = await client.request("session/start", {"model_id": "local/tiny", "cwd": str(home)})
        turn = await client.request(
            "session/prompt",
            {"session_id": started["session"]["session_id"], "text": "Extract.", "output_schema": INVOICES},
        )
        with anyio.fail_after(30):
            events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn" and events[-1]["structured_output"] == ANSWER
    first, retry = (r.json() for r in replay_server.requests)
    assert "tools" not in first and "response_format" not in first
    system = first["messages"][0]
    assert system["role"] == "system" and json.dumps(INVOICES, ensure_ascii=False) in system["content"]
    assert "Answer again with only the corrected JSON" in retry["messages"][-1]["content"]
    assert "final_output" not in json.dumps(retry)
