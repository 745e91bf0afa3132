"""Turn assembly: from a live session and an admitted prompt to an ``agent.Turn`` (the model's
spec, its provider adapter, the resolved thinking, the tools and the settings of config.toml)."""

import functools
import logging
from typing import Any

from daemon import agent
from daemon.agent import CompactionSetup, Summarizer
from daemon.agent.watchdog import Watchdogs
from daemon.catalog.catalog import Catalog, ModelSpec
from daemon.catalog.decide import with_budget
from daemon.config.settings import Config
from daemon.errors import PonderError
from daemon.models.budgets import budget_range
from daemon.permissions.book import PermissionBook
from daemon.providers.base import Provider, StreamLimits
from daemon.providers.registry import ProviderRegistry
from daemon.sandbox.service import Sandbox
from daemon.sessions.accounts import SessionAccounts, TurnAccount
from daemon.sessions.bridge import ClientBridge
from daemon.sessions.live import LiveSession, PendingTurn
from daemon.sessions.plans import SessionPlans
from daemon.sessions.thinking_settings import TurnLevels
from daemon.sessions.tool_runner import ToolRunner
from daemon.store import AsyncStore
from daemon.tools import Tool, builtin_tools
from daemon.tools.source import ToolSource
from daemon.tools.update_plan import PLAN_GUIDANCE
from protocol import events as ev
from protocol.objects import Thinking, Usage

log = logging.getLogger("ponder.sessions")


def with_plan_guidance(system_prompt: str | None) -> str:
    """The session's system prompt, then when a plan helps (``update_plan`` is offered with the tools)."""
    return PLAN_GUIDANCE if not system_prompt else f"{system_prompt}\n\n{PLAN_GUIDANCE}"


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
        permissions: PermissionBook,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.config = config
        self.permissions = permissions  # the rules and hooks every turn's tool calls go through
        self.store = store
        self.catalog = catalog
        self.providers = providers
        self.bridge = bridge
        self.tool_sources = tool_sources
        self.accounts = SessionAccounts(store, catalog)
        # Models whose provider refused native structured output: the final_output tool for them.
        self.native_refusals = agent.NativeRefusals()
        # Every turn's streamed responses are watched here (its task: ``SessionManager.run``).
        self.watchdogs = Watchdogs()

    @functools.cached_property
    def tools(self) -> dict[str, Tool[Any]]:
        """The built-in tools; made at first use, so that start-up does not import them."""
        return builtin_tools(self.config.scan_time_limit_s)

    def build(
        self,
        live: LiveSession,
        pending: PendingTurn,
        emit: agent.Emit,
        messages: agent.MessageLog,
    ) -> agent.Turn:
        """The turn for ``pending``. The thinking is what the prompt asked for when it was sent,
        decided for the session's model now; the provider adjusts it per request where its API
        needs that (``adjust_thinking``, once per request, in the adapter)."""
        row = live.row
        spec = self.catalog.get(row.model_id)
        provider = self.providers.get(spec.provider, spec.api)
        runner = ToolRunner(
            self.config,
            self.bridge,
            live,
            pending.turn_id,
            self.tools,
            self.tool_sources,
            spec.supports_tools,
            self.permissions,
            emit,
            self.sandbox,
            SessionPlans(self.store, live, emit),
        )
        decided = pending.thinking.decide(self.catalog, spec)
        # A prompt's own limit (``ponder ask --max-turns``) replaces [defaults] max_tool_steps.
        max_steps = pending.max_turns if pending.max_turns is not None else self.config.max_tool_steps
        output = None
        if pending.output is not None:
            output = agent.TurnOutput.start(
                pending.output, provider, spec.id, self.native_refusals, takes_tools=spec.supports_tools
            )

        return agent.Turn(
            session_id=row.id,
            turn_id=pending.turn_id,
            compaction=self._compaction_setup(live, spec, provider, emit),
            compaction_request=pending.compaction,
            user_message=pending.user_message,
            model_id=spec.id,
            provider_name=spec.provider,
            model_name=spec.model,
            provider=provider,
            thinking=decided,
            # A level the provider refuses is retried once at the level it names (decided the
            # same way, display kept); the daemon's catalogue remembers the refusal.
            levels=TurnLevels(self.catalog, spec, pending.thinking),
            watchdogs=self.watchdogs,
            history=live.history,
            emit=emit,
            messages=messages,
            toolkit=runner,
            account=TurnAccount(self.accounts, live, spec, emit),
            system_prompt=with_plan_guidance(row.system_prompt) if spec.supports_tools else row.system_prompt,
            max_output_tokens=spec.max_output_tokens,
            media=agent.TurnMedia(
                model_id=spec.id,
                takes_images=spec.takes_images,
                load=self.store.get_attachments,
                mark=self.store.mark_image_omitted,
            ),
            output=output,
            settings=agent.TurnSettings(
                max_steps=max_steps,
                max_attempts=self.config.retry_max_attempts,
                stall_timeout_s=self.config.stall_timeout_s,
                no_progress_timeout_s=self.config.no_progress_timeout_s,
                limits=StreamLimits(
                    max_event_bytes=self.config.max_event_bytes, max_response_bytes=self.config.max_response_bytes
                ),
            ),
        )

    def _compaction_setup(
        self, live: LiveSession, spec: ModelSpec, provider: Provider, emit: agent.Emit
    ) -> CompactionSetup:
        """``[compaction]`` for this session's model, with its summarizer (``[compaction] model``
        when that model is known and its provider configured, else the session's own)."""
        settings = self.config.compaction
        summarizer_spec, summarizer_provider = spec, provider
        if settings.model is not None:
            try:
                summarizer_spec = self.catalog.get(settings.model)
                summarizer_provider = self.providers.get(summarizer_spec.provider, summarizer_spec.api)
            except PonderError as exc:
                log.warning("[compaction] model %s cannot be used (%s); the session's model summarizes", settings.model,
                            exc.message)  # fmt: skip
                summarizer_spec, summarizer_provider = spec, provider
        level = settings.thinking_level or "off"
        if level == "default":
            level = self.catalog.default_level(summarizer_spec)
        catalog = self.catalog

        def summarizer_thinking() -> Thinking:
            # Consults the levels providers refused since the daemon started, as a reply's decision does.
            return catalog.decide(summarizer_spec, level, learned=catalog.learned)

        return CompactionSetup(
            auto=settings.auto,
            reserve_tokens=settings.reserve_tokens,
            keep_recent_tokens=settings.keep_recent_tokens,
            context_window=catalog.context_window(spec)[0],
            strip_thinking=spec.thinking_bound_to_prefix,
            summarizer=Summarizer(
                provider=summarizer_provider,
                provider_name=summarizer_spec.provider,
                model_name=summarizer_spec.model,
                model_id=summarizer_spec.id,
                thinking=summarizer_thinking(),
                context_window=catalog.context_window(summarizer_spec)[0],
                max_output_tokens=summarizer_spec.max_output_tokens,
                rethink=summarizer_thinking,
            ),
            calibration=live.calibration,
            learn_window=functools.partial(catalog.windows.learn, spec.id),
            records=live.compactions,
            save=functools.partial(self.store.save_compaction, live.row.id),
            refit_thinking=functools.partial(with_budget, spec) if spec.thinking.takes_budget else None,
            budget_min=budget_range(spec)[0],
            on_summary_usage=functools.partial(self._record_summary_call, live, summarizer_spec, emit),
        )

    async def _record_summary_call(
        self, live: LiveSession, spec: ModelSpec, emit: agent.Emit, usage: Usage, estimated: bool
    ) -> None:
        """A summary call counts in the session's totals and against its budget like any model
        call, and is told as a ``usage`` event; the session's context fill stays the last one (the
        summarizer's own request is not the session's context)."""
        fields = await self.accounts.record_call(live, spec, usage, context=live.row.context)
        await emit(ev.UsageEvent, {**fields, "estimated": estimated})
