"""Creates provider adapters on first use and keeps one per (provider, wire API).

Adapter modules are imported here lazily: a daemon that only answers ``initialize``
never imports httpx.
"""

from typing import Any

from daemon.config import Config, ProviderConfig
from daemon.errors import ProviderNotConfigured
from daemon.providers.base import Provider


class ProviderRegistry:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._adapters: dict[tuple[str, str], Any] = {}

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

    def _create(self, settings: ProviderConfig, api: str) -> Any:
        if api == "mock":
            from daemon.providers.mock import MockProvider

            return MockProvider(self.config.mock_delay_ms)
        if settings.name == "copilot":
            from daemon.providers.copilot import CopilotProvider

            return CopilotProvider(settings, api, self.config.home)
        if api == "anthropic":
            from daemon.providers.anthropic import AnthropicProvider

            return AnthropicProvider(settings)
        if api == "openai-chat":
            from daemon.providers.openai_chat import OpenAIChatProvider

            return OpenAIChatProvider(settings)
        if api == "openai-responses":
            from daemon.providers.openai_responses import OpenAIResponsesProvider

            return OpenAIResponsesProvider(settings)
        if api == "gemini":
            from daemon.providers.gemini import GeminiProvider

            return GeminiProvider(settings)
        if api == "ollama":
            from daemon.providers.ollama import OllamaProvider

            return OllamaProvider(settings)
        raise ProviderNotConfigured(settings.name, f"unknown api {api!r} in config.toml")

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            close = getattr(adapter, "aclose", None)
            if close is not None:
                await close()
        self._adapters.clear()
