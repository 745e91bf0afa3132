"""Waiting on a real daemon's events across turns a compaction may add: a prompt's turn (an
automatic compaction turn before it included), a manual compaction's turn, events by type.

Shared by the compaction tests, which all drive a ``ponder serve`` whose summaries run as
turns of their own, so a prompt's events are not one turn's events.
"""

from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import anyio

from daemon.jsonrpc.client import RpcClient

TURN_TIMEOUT_S = 120

Events = list[dict[str, Any]]


async def events_until(client: RpcClient, done: Callable[[Events], bool]) -> Events:
    """Every event (of any turn) until ``done(events)``; fails after ``TURN_TIMEOUT_S``."""
    events: Events = []
    with anyio.fail_after(TURN_TIMEOUT_S):
        async with aclosing(client.events()) as stream:
            async for event in stream:
                events.append(event)
                if done(events):
                    return events
    raise AssertionError("the event stream ended")


async def prompt(client: RpcClient, session_id: str, text: str) -> Events:
    """Every event until this prompt's turn ends (a compaction turn before it included)."""
    turn_id = (await client.request("session/prompt", {"session_id": session_id, "text": text}))["turn_id"]
    return await events_until(
        client, lambda events: events[-1]["type"] == "turn_end" and events[-1]["turn_id"] == turn_id
    )


async def compact(client: RpcClient, session_id: str, instructions: str | None = None) -> Events:
    """The events up to the end of a manual compaction's turn."""
    params = {"session_id": session_id} | ({"instructions": instructions} if instructions else {})
    compaction_id = (await client.request("session/compact", params))["compaction_id"]

    def ended(events: Events) -> bool:
        end = events[-1]
        return end["type"] == "turn_end" and any(
            e.get("compaction_id") == compaction_id and e["turn_id"] == end["turn_id"] for e in events
        )

    return await events_until(client, ended)


def of_type(events: Events, kind: str) -> Events:
    return [e for e in events if e["type"] == kind]
