"""Budgets in ACP (issue #24: every face can raise a spent budget), ``ponder acp`` in-process on
asyncio and trio, every message checked against the vendored ACP schema.

A turn a spent budget stops answers ``max_turn_requests`` (PROTOCOL.md "ACP mode") and says which
budget is spent and how to raise it; ``/budget`` and ``_ponder/session/budget`` see and change it,
and the next prompt goes on.
"""

import re
from pathlib import Path
from typing import Any

import pytest

from daemon.jsonrpc.client import RpcClient, RpcError
from tests.support.acp_harness import acp_daemon, drain, updates

pytestmark = pytest.mark.anyio


async def new_session(client: RpcClient, cwd: Path) -> str:
    return (await client.request("session/new", {"cwd": str(cwd), "mcpServers": []}))["sessionId"]


async def ask(client: RpcClient, session_id: str, text: str) -> tuple[dict[str, Any], list[str]]:
    """The prompt's answer and the text of the agent messages it sent."""
    answer = await client.request(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    )
    said = [u["content"]["text"] for u in updates(drain(client), "agent_message_chunk")]
    return answer, said


async def test_a_spent_budget_stops_with_max_turn_requests_and_budget_raises_it(home: Path, tmp_path: Path) -> None:
    (home / "config.toml").write_text("[budget]\nmax_tokens = 1\n")  # every session without its own
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, tmp_path)
        drain(client)
        first, _ = await ask(client, session_id, "hello")
        assert first == {"stopReason": "end_turn"}  # within the budget before the call; it spends it

        stopped, said = await ask(client, session_id, "and again")
        assert stopped["stopReason"] == "max_turn_requests"
        meta = stopped["_meta"]["ponder"]
        assert meta["stopReason"] == "budget" and meta["code"] == -32011
        assert re.fullmatch(
            r"The session's token budget of 1 tokens is spent \([\d,]+ used\); raise it with /budget to continue\.",
            meta["message"],
        ), meta
        assert said == [meta["message"]]

        shown, said = await ask(client, session_id, "/budget")
        assert shown == {"stopReason": "end_turn", "_meta": {"ponder": {"action": "budget"}}}
        assert re.fullmatch(
            r"This session's budget is 1 tokens \(config\.toml's \[budget\]\); it has used [\d,]+ tokens\.", said[0]
        )

        raised, said = await ask(client, session_id, "/budget 2m tokens")
        assert raised["stopReason"] == "end_turn"
        assert said[0].startswith("This session's budget is 2,000,000 tokens (its own)")
        again, _ = await ask(client, session_id, "now go on")
        assert again == {"stopReason": "end_turn"}


async def test_ponder_session_budget_reads_sets_and_clears(home: Path, tmp_path: Path) -> None:
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, tmp_path)
        read = await client.request("_ponder/session/budget", {"sessionId": session_id})
        assert read == {"budget": None, "own": False, "tokensUsed": 0, "costUsed": None}

        await ask(client, session_id, "hello")
        set_ = await client.request("_ponder/session/budget", {"sessionId": session_id, "budget": {"maxTokens": 1}})
        assert set_["budget"] == {"maxTokens": 1} and set_["own"] is True and set_["tokensUsed"] > 1
        stopped, _ = await ask(client, session_id, "more")
        assert stopped["stopReason"] == "max_turn_requests"

        cleared = await client.request("_ponder/session/budget", {"sessionId": session_id, "budget": None})
        assert cleared["budget"] is None and cleared["own"] is True
        again, _ = await ask(client, session_id, "more")
        assert again == {"stopReason": "end_turn"}

        with pytest.raises(RpcError) as unpriced:  # mock models have no price: a cost budget is refused
            await client.request("_ponder/session/budget", {"sessionId": session_id, "budget": {"maxCost": 5}})
        assert unpriced.value.code == -32602 and "ponder knows no price for mock/" in unpriced.value.message
        with pytest.raises(RpcError) as unknown:
            await client.request("_ponder/session/budget", {"sessionId": "ses_nope", "budget": None})
        assert unknown.value.code == -32002


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("/budget lots", "/budget does not understand 'lots'. Use /budget to see the budget"),
        ("/budget 5", "/budget does not understand '5'"),
        ("/budget $5", "ponder knows no price for mock/"),
    ],
)
async def test_a_budget_line_ponder_cannot_use_is_invalid_params(
    home: Path, tmp_path: Path, line: str, says: str
) -> None:
    async with acp_daemon(home) as (client, _daemon):
        session_id = await new_session(client, tmp_path)
        with pytest.raises(RpcError) as refused:
            await client.request(
                "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": line}]}
            )
        assert refused.value.code == -32602 and says in refused.value.message, refused.value.message
        read = await client.request("_ponder/session/budget", {"sessionId": session_id})
        assert read["budget"] is None and read["own"] is False  # nothing changed
