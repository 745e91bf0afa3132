"""``ponder acp`` in-process, on asyncio and trio: every message it writes is validated
against the vendored ACP schema (tests/support/acp_wire.py) before the test sees it."""

import json
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.jsonrpc.client import RpcClient, RpcError
from tests.support.acp_harness import acp_daemon, drain, text_by_message, updates

pytestmark = pytest.mark.anyio


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def option(options: list[dict[str, Any]], config_id: str) -> dict[str, Any]:
    return next(o for o in options if o["id"] == config_id)


def values(config_option: dict[str, Any]) -> list[str]:
    """The selectable values of a select option, flattening groups."""
    out: list[str] = []
    for item in config_option["options"]:
        out.extend(o["value"] for o in item["options"]) if "group" in item else out.append(item["value"])
    return out


async def new_session(client: RpcClient, cwd: Path, model: str | None = None) -> str:
    result = await client.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    if model is not None:
        await client.request(
            "session/set_config_option", {"sessionId": result["sessionId"], "configId": "model", "value": model}
        )
    return result["sessionId"]


async def prompt(client: RpcClient, session_id: str, *blocks: Any, request_id: Any = None) -> dict[str, Any]:
    return await client.request(
        "session/prompt", {"sessionId": session_id, "prompt": list(blocks)}, request_id=request_id
    )


async def first_update(client: RpcClient, kind: str) -> dict[str, Any]:
    async for method, params in client.notifications:
        if method == "session/update" and params["update"]["sessionUpdate"] == kind:
            return params["update"]
    raise AssertionError(f"no {kind} update")


async def sync(client: RpcClient) -> None:
    """A round trip: everything ponder wrote before it has reached the client."""
    await client.request("session/list", {})


async def wait_idle(daemon: Any, session_id: str) -> None:
    with anyio.fail_after(5):
        live = await daemon.sessions.get(session_id)
        while live.current is not None:
            await anyio.sleep(0.01)


# --- initialize and unknown methods ----------------------------------------------------------


async def test_initialize_negotiates_version_and_advertises_capabilities(home: Path) -> None:
    async with acp_daemon(home) as (client, _daemon):
        result = await client.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {"auth": {"terminal": True}},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        assert result["protocolVersion"] == 1
        caps = result["agentCapabilities"]
        assert caps["loadSession"] is True
        assert caps["promptCapabilities"] == {"image": True, "audio": False, "embeddedContext": True}
        assert caps["mcpCapabilities"] == {"http": False, "sse": False}
        assert set(caps["sessionCapabilities"]) == {"list", "resume", "close", "delete"}
        assert caps["_meta"]["ponder"]["methods"] == [
            "_ponder/models/list",
            "_ponder/auth/status",
            "_ponder/session/rename",
            "_ponder/session/fork",
            "_ponder/session/budget",
        ]
        assert result["agentInfo"]["name"] == "ponder"
        methods = {m["id"]: m for m in result["authMethods"]}
        assert "ANTHROPIC_API_KEY" in methods["ponder-credentials"]["description"]
        assert methods["copilot-login"]["type"] == "terminal"
        assert methods["copilot-login"]["args"] == ["--login", "copilot"]

        # A client asking for another version hears the one ponder speaks; without
        # terminal auth it is not offered the terminal sign-in.
        for asked in (7, "2024-11-05"):
            other = await client.request("initialize", {"protocolVersion": asked})
            assert other["protocolVersion"] == 1
            assert [m["id"] for m in other["authMethods"]] == ["ponder-credentials"]
        with pytest.raises(RpcError) as missing:
            await client.request("initialize", {})
        assert missing.value.code == -32602


async def test_unknown_methods_and_ponder_extensions(home: Path, work: Path) -> None:
    async with acp_daemon(home) as (client, _daemon):
        for method in ("_ponder/nope", "_zed/whatever", "models/list", "session/start", "logout"):
            with pytest.raises(RpcError) as error:
                await client.request(method, {})
            assert error.value.code == -32601, method
            assert error.value.data == {"method": method}
        await client.notify("_zed/hello", {"x": 1})  # unknown extension notifications are ignored
        await client.notify("$/cancelRequest", {"id": 1})  # ponder's spelling means nothing here
        listed = await client.request("_ponder/models/list", {})
        assert "mock/thinker" in [m["id"] for m in listed["models"]]
        status = await client.request("_ponder/auth/status", {})
        assert {p["provider"] for p in status["providers"]} >= {"anthropic", "openai"}

        session_id = await new_session(client, work)
        await client.request("_ponder/session/rename", {"sessionId": session_id, "title": "Renamed"})
        assert updates(drain(client), "session_info_update")[0]["title"] == "Renamed"
        forked = await client.request("_ponder/session/fork", {"sessionId": session_id})
        assert forked["sessionId"] != session_id
        with pytest.raises(RpcError) as unknown:
            await client.request("_ponder/session/fork", {"sessionId": "ses_nope"})
        assert unknown.value.code == -32002
        assert unknown.value.data == {"sessionId": "ses_nope"}


# --- sessions and config options ------------------------------------------------------------


async def test_session_new_offers_available_models_grouped_and_thinking_levels(home: Path, work: Path) -> None:
    async with acp_daemon(home, env={"ANTHROPIC_API_KEY": "sk-test-not-real"}) as (client, daemon):
        result = await client.request("session/new", {"cwd": str(work), "mcpServers": []})
        model = option(result["configOptions"], "model")
        assert model["category"] == "model" and model["type"] == "select"
        groups = {g["group"]: [o["value"] for o in g["options"]] for g in model["options"]}
        listed = (await client.request("_ponder/models/list", {}))["models"]
        available = {m["id"] for m in listed if m["available"]}
        assert {v for vs in groups.values() for v in vs} == available
        assert "anthropic" in groups and "mock" in groups and "gemini" not in groups
        assert model["currentValue"] == "anthropic/claude-sonnet-4-6"
        level = option(result["configOptions"], "thought_level")
        assert level["category"] == "thought_level"
        assert values(level) == ["off", "low", "medium", "high", "max"]
        thinking = daemon.sessions.thinking_for(await daemon.sessions.row(result["sessionId"]))
        assert level["currentValue"] == thinking.effective

        with pytest.raises(RpcError) as relative:
            await client.request("session/new", {"cwd": "relative/dir", "mcpServers": []})
        assert relative.value.code == -32602


async def test_set_config_option_recomputes_levels_and_keeps_the_requested_level(home: Path, work: Path) -> None:
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, work)

        async def set_option(config_id: str, value: Any) -> list[dict[str, Any]]:
            answer = await client.request(
                "session/set_config_option", {"sessionId": session_id, "configId": config_id, "value": value}
            )
            return answer["configOptions"]

        options = await set_option("thought_level", "max")
        assert option(options, "thought_level")["currentValue"] == "max"
        options = await set_option("model", "mock/tools")
        assert option(options, "model")["currentValue"] == "mock/tools"
        level = option(options, "thought_level")
        assert values(level) == ["off", "low", "medium", "high"]
        assert level["currentValue"] == "high"  # max was asked for; mock/tools tops out at high
        assert level["description"]  # says why
        options = await set_option("model", "mock/thinker")
        assert option(options, "thought_level")["currentValue"] == "max"  # sticky, as with model/set
        options = await set_option("model", "mock/echo")
        assert values(option(options, "thought_level")) == ["off"]
        assert option(options, "thought_level")["currentValue"] == "off"
        # The client's own changes are answered, not also announced.
        assert updates(drain(client), "config_option_update") == []

        for config_id, value, code in [
            ("mode", "x", -32602),
            ("thought_level", "enormous", -32602),
            ("thought_level", "high", -32602),  # mock/echo has no thinking
            ("model", True, -32602),
            ("model", "nope/model", -32002),
        ]:
            with pytest.raises(RpcError) as error:
                await set_option(config_id, value)
            assert error.value.code == code, (config_id, value)
        with pytest.raises(RpcError) as error:
            await client.request(
                "session/set_config_option", {"sessionId": "ses_nope", "configId": "model", "value": "mock/echo"}
            )
        assert error.value.code == -32002


async def test_config_option_update_when_options_change_otherwise(home: Path, work: Path) -> None:
    async with acp_daemon(home) as (client, daemon):
        session_id = await new_session(client, work)
        await daemon.sessions.set_model(session_id, "mock/tools", None)  # not through the client
        await sync(client)
        [update] = updates(drain(client), "config_option_update")
        assert option(update["configOptions"], "model")["currentValue"] == "mock/tools"

        # A key added to config.toml, loaded by authenticate: its models become selectable.
        (home / "config.toml").write_text('[providers.openai]\napi_key = "sk-test-not-real"\n', encoding="utf-8")
        assert await client.request("authenticate", {"methodId": "ponder-credentials"}) == {}
        [update] = updates(drain(client), "config_option_update")
        assert "openai" in [g["group"] for g in option(update["configOptions"], "model")["options"]]
        # Nothing changed: nothing announced.
        await client.request("authenticate", {"methodId": "ponder-credentials"})
        assert updates(drain(client), "config_option_update") == []
        for method_id in ("copilot-login", "nope"):
            with pytest.raises(RpcError) as error:
                await client.request("authenticate", {"methodId": method_id})
            assert error.value.code == -32602


# --- prompt turns --------------------------------------------------------------------------


async def test_prompt_streams_thoughts_and_answer_then_answers_end_turn(home: Path, work: Path) -> None:
    log: list[Any] = []
    async with acp_daemon(home, log=log) as (client, daemon):
        session_id = await new_session(client, work, "mock/thinker")
        result = await prompt(client, session_id, text("Why is the sky blue?\nPlease be brief."), request_id="p1")
        assert result == {"stopReason": "end_turn"}
        received = drain(client)

        kinds = [u["sessionUpdate"] for u in updates(received)]
        assert kinds.index("agent_message_chunk") > max(i for i, k in enumerate(kinds) if k == "agent_thought_chunk")
        thoughts = text_by_message(updates(received, "agent_thought_chunk"))
        answers = text_by_message(updates(received, "agent_message_chunk"))
        assert len(thoughts) == 1 and len(answers) == 1  # one stable messageId per block
        assert list(thoughts) != list(answers)
        live = await daemon.sessions.get(session_id)
        reply = live.history[-1]
        assert list(thoughts.values()) == [p.text for p in reply.parts if p.type == "thinking"]
        assert list(answers.values()) == [p.text for p in reply.parts if p.type == "text"]
        [usage] = updates(received, "usage_update")
        assert usage["size"] == 200_000 and usage["used"] > 0
        [info] = updates(received, "session_info_update")
        assert info["title"] == "Why is the sky blue?"

        # The answer comes after every update of the turn.
        answer_at = next(i for i, m in enumerate(log) if m.get("id") == "p1")
        assert all(m.get("method") != "session/update" for m in log[answer_at + 1 :])

        # The title is set once; later prompts keep it.
        await prompt(client, session_id, text("And at sunset?"))
        assert updates(drain(client), "session_info_update") == []


async def test_prompt_content_blocks_become_the_user_message(home: Path, work: Path) -> None:
    async with acp_daemon(home) as (client, daemon):
        session_id = await new_session(client, work, "mock/echo")
        blocks = [
            text("Look at "),
            {"type": "resource_link", "name": "a.py", "uri": "file:///src/a.py"},
            text(" and "),
            {
                "type": "resource",
                "resource": {"uri": "file:///src/b.txt", "text": "B-CONTENT", "mimeType": "text/plain"},
            },
            {
                "type": "resource",
                "resource": {"uri": "file:///src/c.bin", "blob": "AAEC", "mimeType": "application/octet-stream"},
            },
        ]
        refused = blocks.pop()  # a binary blob that is not an image: -32006, nothing stored
        with pytest.raises(RpcError) as error:
            await prompt(client, session_id, *blocks, refused)
        assert error.value.code == -32006 and error.value.data["reason"] == "format"
        assert error.value.data["index"] == 4 and "Block 4 (resource)" in error.value.message
        assert await prompt(client, session_id, *blocks) == {"stopReason": "end_turn"}
        live = await daemon.sessions.get(session_id)
        assert len(live.history) == 2  # the refused prompt left nothing
        parts = live.history[0].parts
        assert [p.type for p in parts] == ["text", "resource_link", "text", "resource"]
        # A link outside the cwd stays a link in ACP mode; the embedded text is kept as sent.
        assert (parts[1].uri, parts[1].name) == ("file:///src/a.py", "a.py")
        assert (parts[3].uri, parts[3].text, parts[3].mime_type) == ("file:///src/b.txt", "B-CONTENT", "text/plain")
        echoed = "".join(u["content"]["text"] for u in updates(drain(client), "agent_message_chunk"))
        assert echoed == (
            'Look at [linked resource: a.py <file:///src/a.py>] and <file uri="file:///src/b.txt">\nB-CONTENT\n</file>'
        )

        with pytest.raises(RpcError) as error:
            await prompt(client, session_id, {"type": "image", "data": "AAAA", "mimeType": "image/png"})
        assert error.value.code == -32006 and error.value.data["reason"] == "format"
        for bad in ([], [text("   ")]):
            with pytest.raises(RpcError) as error:
                await prompt(client, session_id, *bad)
            assert error.value.code == -32602
        with pytest.raises(RpcError) as error:
            await prompt(client, "ses_nope", text("hi"))
        assert error.value.code == -32002


@pytest.mark.parametrize(
    ("choice", "written", "asked_twice"),
    [
        ("allow_once", True, True),
        ("allow_session", True, False),
        ("allow_always", True, False),
        ("deny", False, True),
        ("deny_always", False, False),
        ("reject_once", False, True),  # not one of the options offered: a deny
        ("cancelled", False, True),
    ],
)
async def test_mutating_tools_ask_for_permission(
    home: Path, work: Path, choice: str, written: bool, asked_twice: bool
) -> None:
    asked: list[Any] = []
    log: list[Any] = []

    async def on_request(method: str, params: Any) -> Any:
        assert method == "session/request_permission"
        asked.append(params)
        if choice == "cancelled":
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": choice}}

    async with acp_daemon(home, on_request=on_request, log=log) as (client, _daemon):
        session_id = await new_session(client, work, "mock/tools")
        script = (
            'tool: write_file {"path": "a.txt", "content": "one"}\ntool: write_file {"path": "a.txt", "content": "two"}'
        )
        assert await prompt(client, session_id, text(script)) == {"stopReason": "end_turn"}
        received = updates(drain(client))

    assert len(asked) == (2 if asked_twice else 1)
    first = asked[0]
    assert [(o["optionId"], o["kind"]) for o in first["options"]] == [
        ("allow_once", "allow_once"),
        ("allow_session", "allow_always"),
        ("allow_always", "allow_always"),
        ("deny", "reject_once"),
        ("deny_always", "reject_always"),
    ]
    assert [o["name"] for o in first["options"]][1:3] == ["Allow for this session", "Always allow in this project"]
    # "always" answers write the same rule as the ponder protocol's: the file's path, for this project.
    kept = home / "permissions.toml"
    if choice.endswith("_always"):
        rules = tomllib.loads(kept.read_text())["rules"]
        decision = "allow" if choice == "allow_always" else "deny"
        assert rules == [{"project": str(work.resolve()), "tool": "write_file", "decision": decision, "path": "a.txt"}]
    else:
        assert not kept.exists()
    target = str((work / "a.txt").resolve())
    call = first["toolCall"]
    assert call["kind"] == "edit" and call["title"] == "Write a.txt (3 bytes)"
    assert call["rawInput"] == {"path": "a.txt", "content": "one"}
    assert call["locations"] == [{"path": target}]
    assert call["content"] == [{"type": "diff", "path": target, "oldText": None, "newText": "one"}]
    # The tool call is announced before the question about it.
    announced = next(
        i
        for i, m in enumerate(log)
        if m.get("method") == "session/update" and m["params"]["update"].get("toolCallId") == call["toolCallId"]
    )
    question = next(i for i, m in enumerate(log) if m.get("method") == "session/request_permission")
    assert announced < question

    assert (work / "a.txt").exists() is written
    if written:
        assert (work / "a.txt").read_text() == "two"
    by_call: dict[str, list[dict[str, Any]]] = {}
    for update in received:
        if "toolCallId" in update:
            by_call.setdefault(update["toolCallId"], []).append(update)
    for sequence in by_call.values():
        assert [u.get("status") for u in sequence] == ["pending", "in_progress", "completed" if written else "failed"]
        assert sequence[0]["sessionUpdate"] == "tool_call" and sequence[0]["kind"] == "edit"
        final = sequence[-1]["content"]
        if written:
            assert final[0]["type"] == "diff"
        else:
            assert "denied" in final[0]["content"]["text"] or "permission rule" in final[0]["content"]["text"]


async def test_edits_are_reported_as_diffs_of_the_file(home: Path, work: Path) -> None:
    (work / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")

    async def allow(method: str, params: Any) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

    async with acp_daemon(home, on_request=allow) as (client, _daemon):
        session_id = await new_session(client, work, "mock/tools")
        script = (
            'tool: edit_file {"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}\n'
            'tool: read_file {"path": "notes.txt", "offset": 2}'
        )
        await prompt(client, session_id, text(script))
        received = updates(drain(client))
    final = [u for u in received if u.get("status") == "completed"]
    target = str((work / "notes.txt").resolve())
    assert final[0]["content"] == [
        {"type": "diff", "path": target, "oldText": "alpha\nbeta\n", "newText": "alpha\ngamma\n"}
    ]
    read = next(u for u in received if u["sessionUpdate"] == "tool_call" and u["kind"] == "read")
    assert read["locations"] == [{"path": target, "line": 2}]
    assert final[1]["content"][0]["type"] == "content"


async def test_session_cancel_mid_thought_answers_cancelled(home: Path, work: Path) -> None:
    async with acp_daemon(home, env={"PONDER_MOCK_DELAY_MS": "20"}) as (client, daemon):
        session_id = await new_session(client, work, "mock/thinker")
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                answers.append(await prompt(client, session_id, text("Think about this for a long time")))

            tg.start_soon(run)
            await first_update(client, "agent_thought_chunk")
            await client.notify("session/cancel", {"sessionId": session_id})
        assert answers == [{"stopReason": "cancelled"}]
        live = await daemon.sessions.get(session_id)
        assert live.history[-1].status == "interrupted"
        await client.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "model", "value": "mock/echo"}
        )
        assert await prompt(client, session_id, text("ok")) == {"stopReason": "end_turn"}


async def test_cancel_also_answers_a_queued_prompt_cancelled(home: Path, work: Path) -> None:
    async with acp_daemon(home, env={"PONDER_MOCK_DELAY_MS": "20"}) as (client, daemon):
        session_id = await new_session(client, work, "mock/thinker")
        answers: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def run(name: str) -> None:
                answers[name] = await prompt(client, session_id, text(f"{name} question"))

            tg.start_soon(run, "first")
            await first_update(client, "agent_thought_chunk")
            tg.start_soon(run, "second")
            live = await daemon.sessions.get(session_id)
            with anyio.fail_after(5):
                while not live.queued:  # admitted, queued behind the first
                    await anyio.sleep(0.005)
            await client.notify("session/cancel", {"sessionId": session_id})
        assert answers == {"first": {"stopReason": "cancelled"}, "second": {"stopReason": "cancelled"}}


async def test_cancel_withdraws_a_pending_permission_request(home: Path, work: Path) -> None:
    asking = anyio.Event()
    release = anyio.Event()
    log: list[Any] = []

    async def on_request(method: str, params: Any) -> Any:
        asking.set()
        await release.wait()
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}  # too late

    async with acp_daemon(home, on_request=on_request, log=log) as (client, daemon):
        session_id = await new_session(client, work, "mock/tools")
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                answers.append(
                    await prompt(client, session_id, text('tool: write_file {"path": "a.txt", "content": "x"}'))
                )

            tg.start_soon(run)
            await asking.wait()
            await client.notify("session/cancel", {"sessionId": session_id})
            await wait_idle(daemon, session_id)
            release.set()
        await sync(client)  # the late answer went out, and was ignored
        assert answers == [{"stopReason": "cancelled"}]
        assert not (work / "a.txt").exists()
        request = next(m for m in log if m.get("method") == "session/request_permission")
        withdrawn = [m for m in log if m.get("method") == "$/cancel_request"]
        assert [m["params"] for m in withdrawn] == [{"requestId": request["id"]}]
        final = [
            u for u in updates(drain(client)) if u.get("toolCallId") == request["params"]["toolCall"]["toolCallId"]
        ]
        assert final[-1]["status"] == "failed"


async def test_cancel_request_cancels_a_prompt_with_32800(home: Path, work: Path) -> None:
    async with acp_daemon(home, env={"PONDER_MOCK_DELAY_MS": "20"}) as (client, daemon):
        session_id = await new_session(client, work, "mock/thinker")
        errors: list[RpcError] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await prompt(client, session_id, text("Think"), request_id="slow")
                except RpcError as exc:
                    errors.append(exc)

            tg.start_soon(run)
            await first_update(client, "agent_thought_chunk")
            await client.notify("$/cancel_request", {"requestId": "slow"})
        assert [e.code for e in errors] == [-32800]
        await wait_idle(daemon, session_id)  # the abandoned turn was stopped too
        assert (await daemon.sessions.get(session_id)).history[-1].status == "interrupted"


async def test_end_of_input_answers_a_running_prompt_cancelled(home: Path, work: Path) -> None:
    async with acp_daemon(home, env={"PONDER_MOCK_DELAY_MS": "20"}) as (client, _daemon):
        session_id = await new_session(client, work, "mock/thinker")
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                answers.append(await prompt(client, session_id, text("Think")))

            tg.start_soon(run)
            await first_update(client, "agent_thought_chunk")
            with anyio.fail_after(5):
                await client.to_daemon.aclose()  # type: ignore[attr-defined]
        assert answers == [{"stopReason": "cancelled"}]


async def test_the_tool_step_limit_is_max_turn_requests(home: Path, work: Path) -> None:
    (home / "config.toml").write_text("[defaults]\nmax_tool_steps = 1\n", encoding="utf-8")
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, work, "mock/tools")
        result = await prompt(client, session_id, text("tool: list_files {}\ntool: list_files {}"))
        assert result == {"stopReason": "max_turn_requests"}
        [call] = updates(drain(client), "tool_call")
        assert (call["kind"], call["title"]) == ("search", "List .")


async def test_provider_failures_are_errors_with_the_providers_message(home: Path, work: Path) -> None:
    (home / "config.toml").write_text(
        "[reliability]\nmax_attempts = 1\n"
        '[providers.anthropic]\nbase_url = "http://127.0.0.1:9"\n'
        '[providers.local]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[providers.local.models]]\nmodel = "broken"\n',
        encoding="utf-8",
    )
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, work, "local/broken")
        with pytest.raises(RpcError) as failed:
            await prompt(client, session_id, text("hello"))
        assert failed.value.data["provider"] == "local" and failed.value.data["modelId"] == "local/broken"
        assert failed.value.data["message"] == failed.value.message and failed.value.message

        # No credentials: ACP's "authentication required", with ponder's hint.
        await client.request(
            "session/set_config_option",
            {"sessionId": session_id, "configId": "model", "value": "anthropic/claude-sonnet-4-5"},
        )
        with pytest.raises(RpcError) as auth:
            await prompt(client, session_id, text("hello"))
        assert auth.value.code == -32000
        assert auth.value.data["provider"] == "anthropic" and "ANTHROPIC_API_KEY" in auth.value.data["hint"]
        # A key added to config.toml meanwhile is picked up by the next prompt (which
        # then reaches the unreachable test server and fails there, not for credentials).
        config = (home / "config.toml").read_text(encoding="utf-8")
        (home / "config.toml").write_text(
            config.replace("[providers.anthropic]\n", '[providers.anthropic]\napi_key = "sk-test-not-real"\n'),
            encoding="utf-8",
        )
        with pytest.raises(RpcError) as unreachable:
            await prompt(client, session_id, text("hello"))
        assert unreachable.value.code != -32000 and unreachable.value.data["provider"] == "anthropic"
        assert updates(drain(client), "config_option_update")  # anthropic's models became selectable


# --- load, resume, list, close, delete -----------------------------------------------------


async def test_load_replays_the_whole_history_byte_exact_after_a_restart(home: Path, work: Path) -> None:
    (work / "notes.txt").write_text("some notes\n", encoding="utf-8")
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, work, "mock/thinker")
        await prompt(client, session_id, text("Why is the sky blue?"))
        await client.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "model", "value": "mock/tools"}
        )
        # The session's level is "default", which follows to mock/tools' own default (off): ask for thinking.
        await client.request(
            "session/set_config_option", {"sessionId": session_id, "configId": "thought_level", "value": "medium"}
        )
        await prompt(
            client, session_id, text('tool: read_file {"path": "notes.txt"}\ntool: read_file {"path": "missing.txt"}')
        )
        live = updates(drain(client))

    log: list[Any] = []
    async with acp_daemon(home, log=log) as (client, _daemon):
        result = await client.request(
            "session/load", {"sessionId": session_id, "cwd": str(work), "mcpServers": []}, request_id="load"
        )
        assert option(result["configOptions"], "model")["currentValue"] == "mock/tools"
        replay = updates(drain(client))
        answer_at = next(i for i, m in enumerate(log) if m.get("id") == "load")
        assert all(m.get("method") != "session/update" for m in log[answer_at + 1 :])

        assert [u["content"]["text"] for u in replay if u["sessionUpdate"] == "user_message_chunk"] == [
            "Why is the sky blue?",
            'tool: read_file {"path": "notes.txt"}\ntool: read_file {"path": "missing.txt"}',
        ]
        for kind in ("agent_thought_chunk", "agent_message_chunk"):
            live_text = text_by_message([u for u in live if u["sessionUpdate"] == kind])
            replayed = text_by_message([u for u in replay if u["sessionUpdate"] == kind])
            assert replayed == live_text  # same ids, byte-exact text
            assert len(replayed) >= 3 if kind == "agent_thought_chunk" else len(replayed) == 2
        calls = [u for u in replay if u["sessionUpdate"] == "tool_call"]
        live_calls = [u["toolCallId"] for u in live if u["sessionUpdate"] == "tool_call"]
        assert [c["toolCallId"] for c in calls] == live_calls
        assert [(c["kind"], c["status"]) for c in calls] == [("read", "completed"), ("read", "failed")]
        assert "some notes" in calls[0]["content"][0]["content"]["text"]
        assert calls[0]["rawInput"] == {"path": "notes.txt"}
        assert calls[0]["locations"] == [{"path": str((work / "notes.txt").resolve())}]

        # load ends with where the session stands: the last call's context fill (issue 19).
        last_usage = [u for u in live if u["sessionUpdate"] == "usage_update"][-1]
        assert replay[-1] == last_usage and last_usage["size"] == 200_000

        # resume reconnects without replaying anything but that.
        resumed = await client.request("session/resume", {"sessionId": session_id, "cwd": str(work), "mcpServers": []})
        assert option(resumed["configOptions"], "thought_level")
        resumed = updates(drain(client))
        assert [u["sessionUpdate"] for u in resumed] == ["available_commands_update", "usage_update"]
        assert resumed[-1] == last_usage
        for method in ("session/load", "session/resume"):
            with pytest.raises(RpcError) as error:
                await client.request(method, {"sessionId": "ses_nope", "cwd": str(work), "mcpServers": []})
            assert error.value.code == -32002


async def test_list_close_and_delete(home: Path, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import daemon.acp.server

    monkeypatch.setattr(daemon.acp.server, "LIST_PAGE", 2)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with acp_daemon(home, env={"PONDER_MOCK_DELAY_MS": "20"}) as (client, _daemon):
        ids = [await new_session(client, work) for _ in range(3)]
        other = await new_session(client, elsewhere)
        await client.request("_ponder/session/rename", {"sessionId": ids[0], "title": "First"})

        seen: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await client.request("session/list", {"cwd": str(work)} | ({"cursor": cursor} if cursor else {}))
            assert len(page["sessions"]) <= 2
            seen.extend(page["sessions"])
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert sorted(s["sessionId"] for s in seen) == sorted(ids)
        assert {s["cwd"] for s in seen} == {str(work.resolve())}
        assert next(s for s in seen if s["sessionId"] == ids[0])["title"] == "First"
        everything = await client.request("session/list", {})
        assert other in [s["sessionId"] for s in everything["sessions"]]
        with pytest.raises(RpcError) as bad:
            await client.request("session/list", {"cursor": "garbage"})
        assert bad.value.code == -32602

        # close cancels the running turn: its prompt is answered "cancelled".
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                answers.append(await prompt(client, ids[1], text("Think")))

            tg.start_soon(run)
            await first_update(client, "agent_thought_chunk")
            assert await client.request("session/close", {"sessionId": ids[1]}) == {}
        assert answers == [{"stopReason": "cancelled"}]

        assert await client.request("session/delete", {"sessionId": ids[2]}) == {}
        remaining = await client.request("session/list", {"cwd": str(work)})
        assert ids[2] not in [s["sessionId"] for s in remaining["sessions"]]
        for method in ("session/close", "session/delete"):
            with pytest.raises(RpcError) as error:
                await client.request(method, {"sessionId": ids[2]})
            assert error.value.code == -32002


async def test_mcp_servers_from_the_client_go_to_the_mcp_manager(home: Path, work: Path) -> None:
    class FakeMcp:
        def __init__(self) -> None:
            self.calls: list[tuple[str, Any, Any]] = []

        async def add_session_servers(self, session_id: str, servers: list[Any], *, cwd: str | None = None) -> None:
            self.calls.append(("add", session_id, (json.loads(json.dumps(servers)), cwd)))

        async def remove_session_servers(self, session_id: str) -> None:
            self.calls.append(("remove", session_id, None))

        async def tools_for(self, row: Any) -> dict[str, Any]:
            return {}

        async def aclose(self) -> None:
            pass

    async with acp_daemon(home) as (client, daemon):
        fake = daemon.mcp = FakeMcp()
        stdio = {
            "name": "docs",
            "command": "/usr/bin/docs-mcp",
            "args": ["--x"],
            "env": [{"name": "TOKEN", "value": "t"}],
        }
        http = {"type": "http", "name": "web", "url": "https://example.invalid/mcp", "headers": []}
        result = await client.request("session/new", {"cwd": str(work), "mcpServers": [stdio, http]})
        session_id = result["sessionId"]
        await client.request("session/close", {"sessionId": session_id})
        await client.request("session/resume", {"sessionId": session_id, "cwd": str(work)})
    assert fake.calls == [
        ("add", session_id, ([stdio], str(work.resolve()))),
        ("remove", session_id, None),
        ("add", session_id, ([], str(work.resolve()))),
    ]


async def test_a_cwd_that_cannot_be_resolved_is_invalid_params_or_only_noted(home: Path, work: Path) -> None:
    # Path.expanduser/resolve raise on these; the daemon answered -32603 before.
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, work)
        for method in ("session/load", "session/resume"):
            for cwd in ("~nosuchuser-ponder/x", "/tmp/a\x00b"):
                result = await client.request(method, {"sessionId": session_id, "cwd": cwd, "mcpServers": []})
                assert option(result["configOptions"], "model")  # the session keeps its own directory
        with pytest.raises(RpcError) as bad:
            await client.request("session/list", {"cwd": "/tmp/a\x00b"})
        assert bad.value.code == -32602
        drain(client)


async def test_initialize_lists_the_problems_and_sessions_answer_them(home: Path, work: Path) -> None:
    import sqlite3

    from daemon.store.migrations import MIGRATIONS

    db = sqlite3.connect(home / "sessions.db")
    db.execute("PRAGMA user_version = 99")
    db.close()
    problem = f"sessions.db was written by a newer ponder (schema 99); this one understands up to {len(MIGRATIONS)}."
    async with acp_daemon(home) as (client, _daemon):
        result = await client.request("initialize", {"protocolVersion": 1})
        assert result["agentCapabilities"]["_meta"]["ponder"]["problems"] == [problem]
        with pytest.raises(RpcError) as refused:
            await client.request("session/new", {"cwd": str(work), "mcpServers": []})
        assert problem in refused.value.message


async def test_a_cursor_the_store_refuses_is_invalid_params_at_params_cursor(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.errors import InvalidCursor
    from daemon.store import AsyncStore

    async def refuse(self: AsyncStore, cwd: str | None = None, limit: int = 50, cursor: str | None = None) -> Any:
        raise InvalidCursor()

    monkeypatch.setattr(AsyncStore, "list_sessions", refuse)
    async with acp_daemon(home) as (client, _daemon):
        with pytest.raises(RpcError) as error:
            await client.request("session/list", {"cursor": "garbage"})
    assert error.value.code == -32602
    assert error.value.data["errors"] == [{"path": "$.params.cursor", "message": error.value.message}]
