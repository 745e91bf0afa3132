"""The hooks of one turn: the ones config.toml sets for an event, run one after another in the
session's cwd, each bracketed by ``hook_start`` and ``hook_end`` events; the first deny wins.

Decisions count only for ``pre_tool_use`` and ``user_prompt_submit``; ``post_tool_use``,
``stop`` and ``pre_compact`` hooks only watch (``observe``), and nothing they do ends a turn.
"""

import logging
from pathlib import Path
from typing import Any

import anyio
import msgspec

from daemon import agent
from daemon.permissions.hooks import Hook, run_hook
from daemon.util.clock import new_id
from protocol import events as ev

__all__ = ["HookRunner", "HookVerdict"]

log = logging.getLogger("ponder.hooks")


class HookVerdict(msgspec.Struct, frozen=True):
    decision: str | None  # allow | ask | deny, or None when no hook had a say
    reason: str = ""


class HookRunner:
    def __init__(
        self,
        hooks: dict[str, list[Hook]],
        emit: agent.Emit,
        base: dict[str, Any],
        cwd: Path,
        pass_env: tuple[str, ...],
    ) -> None:
        self.hooks = hooks
        self.emit = emit
        self.base = base  # session_id, turn_id, cwd: in every hook's input
        self.cwd = cwd
        self.pass_env = pass_env

    def any_for(self, event: str, tool_name: str | None = None) -> bool:
        return any(h.matches(tool_name) for h in self.hooks.get(event, []))

    async def run(self, event: str, fields: dict[str, Any], tool_name: str | None = None) -> HookVerdict:
        """Run the matching hooks in order; the first deny ends the run; else ask over allow."""
        strongest = HookVerdict(None)
        for hook in self.hooks.get(event, []):
            if not hook.matches(tool_name):
                continue
            hook_id = new_id("hook")
            await self.emit(ev.HookStart, {"hook_id": hook_id, "event": event, "command": hook.shown})
            payload = {"hook_event_name": event, **self.base, **fields}
            outcome = await run_hook(hook, payload, self.cwd, self.pass_env)
            await self.emit(
                ev.HookEnd,
                {
                    "hook_id": hook_id,
                    "event": event,
                    "status": outcome.status,
                    "duration_ms": outcome.duration_ms,
                    "output": outcome.output or outcome.reason,
                },
            )
            if outcome.status != "completed":
                log.info("%s hook %s: %s (%s)", event, hook.shown, outcome.status, outcome.reason)
            if outcome.decision == "deny":
                return HookVerdict("deny", outcome.reason)
            if outcome.decision == "ask" or (outcome.decision == "allow" and strongest.decision is None):
                strongest = HookVerdict(outcome.decision, outcome.reason)
        return strongest

    async def observe(self, event: str, fields: dict[str, Any]) -> None:
        """Run a watching event's hooks; whatever they do, the turn goes on."""
        if not self.any_for(event):
            return
        try:
            await self.run(event, fields)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            log.exception("%s hooks failed", event)
