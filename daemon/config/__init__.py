"""Settings and the home they live in: ``settings`` (``Config``, ``ProviderConfig``, ``Secret``,
``load_config``: ``config.toml`` and the environment, pure) and ``home`` (owner-only directories
and files in the ponder home).

This package re-exports nothing: importing ``home`` never loads the settings.
"""
