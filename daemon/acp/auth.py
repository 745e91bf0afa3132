"""ACP authentication: where ponder's credentials come from, and reloading them.

ponder takes provider credentials from the environment and ``config.toml``; there is
no login to run for them. The one ``agent`` auth method says so, and ``authenticate``
with it re-reads ``config.toml`` so a key added there works without restarting the
editor's agent. Credentials already in use are never replaced: only providers that had
none pick up a key.
"""

import logging

from daemon.acp import types as t
from daemon.config import BUILTIN_PROVIDERS, Config, load_config

log = logging.getLogger("ponder.acp")

CREDENTIALS_METHOD = "ponder-credentials"


def auth_methods(config: Config) -> list[t.AuthMethod]:
    env_vars = [var for builtin in BUILTIN_PROVIDERS.values() for var in builtin.key_envs]
    return [
        t.AuthMethod(
            id=CREDENTIALS_METHOD,
            name="Provider API keys",
            description=(
                f"ponder reads API keys from the environment ({', '.join(env_vars)}) and from "
                f"[providers.NAME] api_key in {config.home / 'config.toml'}. Add a key there, then choose "
                "this to load it. The offline mock/* models need no key."
            ),
        )
    ]


def reload_credentials(config: Config) -> list[str]:
    """Give providers without credentials the ones ``config.toml`` now has; return those that got one."""
    # The environment cannot have changed since start-up; only config.toml can.
    fresh = load_config(config.home, env={})
    loaded: list[str] = []
    for name, settings in fresh.providers.items():
        current = config.providers.get(name)
        if current is None or current.configured or not settings.configured:
            continue  # a new provider section needs a restart; keys in use are kept
        current.api_key, current.key_source = settings.api_key, settings.key_source
        loaded.append(name)
        log.info("credentials for %s loaded from %s", name, settings.key_source)
    return loaded
