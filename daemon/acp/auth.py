"""ACP authentication: where ponder's credentials come from, and reloading them.

Provider keys come from the environment and ``config.toml``; Copilot signs in with
GitHub's device flow (``ponder login copilot``), which stores a token in ponder's home.
The ``agent`` auth method ``ponder-credentials`` says so, and ``authenticate`` with it
re-reads ``config.toml`` and the stored sign-in, so a key added (or a sign-in done)
meanwhile works without restarting the editor's agent. Clients that can run the agent
in a terminal (``clientCapabilities.auth.terminal``) are also offered the Copilot device
login itself as a ``terminal`` method: ``ponder acp --login copilot`` shows the code
there. Credentials already in use are never replaced: only providers without any pick
up what was found.
"""

import logging

from daemon.acp import types as t
from daemon.config import BUILTIN_PROVIDERS, Config, load_config

log = logging.getLogger("ponder.acp")

CREDENTIALS_METHOD = "ponder-credentials"
COPILOT_LOGIN_METHOD = "copilot-login"


def auth_methods(config: Config, *, terminal: bool) -> list[t.AuthMethod]:
    env_vars = [var for builtin in BUILTIN_PROVIDERS.values() for var in builtin.key_envs]
    methods = [
        t.AuthMethod(
            id=CREDENTIALS_METHOD,
            name="Provider API keys",
            description=(
                f"ponder reads API keys from the environment ({', '.join(env_vars)}) and from "
                f"[providers.NAME] api_key in {config.home / 'config.toml'}; GitHub Copilot signs in with "
                "`ponder login copilot` in a terminal. Add a key or sign in, then choose this to load it. "
                "The offline mock/* models need no key."
            ),
        )
    ]
    if terminal:
        methods.append(
            t.AuthMethod(
                id=COPILOT_LOGIN_METHOD,
                name="Sign in to GitHub Copilot",
                description="Shows a code to enter at GitHub's device login page, then waits for the sign-in.",
                type="terminal",
                args=["--login", "copilot"],
            )
        )
    return methods


def reload_credentials(config: Config) -> list[str]:
    """Give providers without credentials the ones ``config.toml`` now has; return those that got one."""
    # The environment cannot have changed since start-up; config.toml and the stored
    # Copilot sign-in (which load_config applies) can.
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
