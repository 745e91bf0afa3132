"""Creates provider adapters on first use and keeps one per (provider, wire API).

Which adapter speaks each wire API, and which providers wrap it, is
``daemon.vendors.table``'s; adapter modules are imported here lazily, on first use: a
daemon that only answers ``initialize`` never imports httpx.
"""

import importlib
from typing import Any

from daemon.config.settings import Config, ProviderConfig
from daemon.errors import ProviderNotConfigured
from daemon.providers.base import Provider
from daemon.vendors.table import PROVIDERS, WIRE_APIS


def load(target: str) -> Any:
    """The object a ``"module:attribute"`` string names (an adapter, a discovery), importing its module now."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class ProviderRegistry:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._adapters: dict[tuple[str, str], Provider] = {}

    def provider_config(self, provider: str) -> ProviderConfig:
        settings = self.config.providers.get(provider)
        if settings is None:
            raise ProviderNotConfigured(provider, f"add [providers.{provider}] to config.toml")
        return settings

    def get(self, provider: str, api: str) -> Provider:
        """The adapter for ``provider`` speaking ``api``; raises ProviderNotConfigured."""
        key = (provider, api)
        adapter = self._adapters.get(key)
        if adapter is None:
            settings = self.provider_config(provider)
            if not settings.configured:
                raise ProviderNotConfigured(provider, settings.problem or settings.key_hint)
            adapter = self._adapters[key] = self._create(settings, api)
        return adapter

    def _create(self, settings: ProviderConfig, api: str) -> Provider:
        wire = WIRE_APIS.get(api)
        if wire is None:
            raise ProviderNotConfigured(settings.name, f"unknown api {api!r} in config.toml")
        if api == "mock":
            return load(wire.adapter)(self.config.mock_delay_ms)
        info = PROVIDERS.get(settings.name)
        if info is not None and info.adapter is not None:  # wraps the wire API's adapter (a token of its own)
            return load(info.adapter)(settings, api, self.config.home)
        return load(wire.adapter)(settings)

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            await adapter.aclose()
        self._adapters.clear()
