"""Turn assembly: from a live session and an admitted prompt to an ``agent.Turn`` (the model's
spec, its provider adapter, the resolved thinking, the tools and the settings of config.toml)."""

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from daemon import agent
from daemon.config.settings import Config
from daemon.conversation import ChatMessage
from daemon.models.catalog import Catalog
from daemon.providers.base import StreamLimits
from daemon.providers.registry import ProviderRegistry
from daemon.sessions.accounts import SessionAccounts
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.live import LiveSession, PendingTurn
from daemon.sessions.tool_runner import ToolRunner
from daemon.store import AsyncStore
from daemon.tools import Tool, builtin_tools
from daemon.tools.source import ToolSource


class TurnAssembly:
    """Builds each turn of every session from the daemon's parts."""

    def __init__(
        self,
        config: Config,
        store: AsyncStore,
        catalog: Catalog,
        providers: ProviderRegistry,
        bridge: ClientBridge,
        tool_sources: list[ToolSource],
    ) -> None:
        self.config = config
        self.store = store
        self.catalog = catalog
        self.providers = providers
        self.bridge = bridge
        self.tool_sources = tool_sources
        self.accounts = SessionAccounts(store, catalog)

    @functools.cached_property
    def tools(self) -> dict[str, Tool[Any]]:
        """The built-in tools; made at first use, so that start-up does not import them."""
        return builtin_tools(self.config.scan_time_limit_s)

    def build(
        self,
        live: LiveSession,
        pending: PendingTurn,
        emit: agent.Emit,
        save: Callable[[ChatMessage], Awaitable[None]],
    ) -> agent.Turn:
        """The turn for ``pending``. The thinking is what the prompt asked for when it was sent,
        decided for the session's model now; the provider adjusts it per request where its API
        needs that (``adjust_thinking``, once per request, in the adapter)."""
        row = live.row
        spec = self.catalog.get(row.model_id)
        provider = self.providers.get(spec.provider, spec.api)
        runner = ToolRunner(
            self.config, self.bridge, live, pending.turn_id, self.tools, self.tool_sources, spec.supports_tools
        )
        decided = pending.thinking.decide(self.catalog, spec)
        asked = pending.thinking

        return agent.Turn(
            session_id=row.id,
            turn_id=pending.turn_id,
            user_message=pending.user_message,
            model_id=spec.id,
            provider_name=spec.provider,
            model_name=spec.model,
            provider=provider,
            thinking=decided,
            # A level the provider refuses is retried once at the level it names (decided the
            # same way, display kept); the daemon's catalogue remembers the refusal.
            rethink=lambda level: self.catalog.decide(
                spec, level, display=asked.display, budget_tokens=asked.budget_tokens, source=asked.source
            ),
            learned=self.catalog.learned,
            history=live.history,
            emit=emit,
            save=save,
            append=self.store.append_to_message,
            next_seq=live.next_seq,
            approve=runner.approve,
            run_tool=runner.run,
            prepare=runner.prepare,
            system_prompt=row.system_prompt,
            record_usage=self.accounts.recorder(live, spec, emit),
            budget_spent=lambda: self.accounts.budget_spent(live.row),
            settings=agent.TurnSettings(
                max_steps=self.config.max_tool_steps,
                max_attempts=self.config.retry_max_attempts,
                stall_timeout_s=self.config.stall_timeout_s,
                no_progress_timeout_s=self.config.no_progress_timeout_s,
                limits=StreamLimits(
                    max_event_bytes=self.config.max_event_bytes, max_response_bytes=self.config.max_response_bytes
                ),
            ),
        )
