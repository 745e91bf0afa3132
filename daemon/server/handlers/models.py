"""``models/list``, ``model/set`` and ``thinking/set``."""

from typing import TYPE_CHECKING

from msgspec import UNSET

from daemon.errors import InvalidParams
from daemon.server.core import Daemon
from daemon.server.params import optional
from protocol import methods as m

if TYPE_CHECKING:
    from daemon.sessions.manager import SessionManager


class ModelHandlers:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    @property
    def sessions(self) -> "SessionManager":
        return self.daemon.sessions  # built by the time a handler runs (routes: ``load_parts``)

    async def models_list(self, params: m.ModelsListParams) -> m.ModelsListResult:
        return await self.daemon.models_list(params.provider)

    async def model_set(self, params: m.ModelSetParams) -> m.ModelSetResult:
        from daemon.models.levels import parse_level  # with the session manager: off the start path

        level = optional(parse_level, params.thinking_level, "$.params.thinking_level")
        row, spec = await self.sessions.set_model(params.session_id, params.model_id, level)
        return m.ModelSetResult(
            session_id=row.id, model=self.daemon.catalog.to_wire(spec), thinking=self.sessions.thinking_for(row)
        )

    async def thinking_set(self, params: m.ThinkingSetParams) -> m.ThinkingSetResult:
        from daemon.models.levels import parse_display, parse_fallback, parse_level  # with the sessions: later

        if (
            params.level is None
            and params.display is None
            and params.fallback is None
            and params.budget_tokens is UNSET
        ):
            raise InvalidParams(
                "thinking/set needs at least one of level, display, budget_tokens or fallback.", path="$.params"
            )
        row = await self.sessions.set_thinking(
            params.session_id,
            optional(parse_level, params.level, "$.params.level"),
            display=optional(parse_display, params.display, "$.params.display"),
            fallback=optional(parse_fallback, params.fallback, "$.params.fallback"),
            budget_tokens=params.budget_tokens,
        )
        return m.ThinkingSetResult(session_id=row.id, thinking=self.sessions.thinking_for(row))
