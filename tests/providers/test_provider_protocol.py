"""Every adapter the provider table names declares the ``Provider`` interface.

Adapters subclass the protocol explicitly so that mypy holds each one to its signatures;
this test fails, naming the adapter, when a new one is added without it, or leaves a
member to the protocol's placeholder instead of implementing it.
"""

from __future__ import annotations

import pytest

from daemon.providers.base import Provider
from daemon.providers.registry import load
from daemon.vendors.table import PROVIDERS, WIRE_APIS

ADAPTERS = sorted({api.adapter for api in WIRE_APIS.values()} | {p.adapter for p in PROVIDERS.values() if p.adapter})


@pytest.mark.parametrize("path", ADAPTERS)
def test_every_adapter_declares_the_provider_interface(path: str) -> None:
    adapter = load(path)
    assert Provider in adapter.__mro__, f"{path} does not subclass daemon.providers.base.Provider"
    for member in ("stream", "aclose"):  # no default: each adapter opens and closes its own connections
        assert getattr(adapter, member) is not getattr(Provider, member), f"{path} does not implement {member}"


def test_the_table_names_every_adapter_module() -> None:
    modules = {path.split(":")[0].rsplit(".", 1)[1] for path in ADAPTERS}
    assert {"anthropic", "openai_chat", "openai_responses", "gemini", "ollama", "mock", "copilot"} <= modules
