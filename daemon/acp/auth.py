"""ACP authentication: where ponder's credentials come from, and reloading them.

Provider keys come from the environment and ``config.toml``; providers with a device login
(``ProviderInfo.login``) sign in with ``ponder login NAME``, which stores a token in ponder's home.
The ``agent`` auth method ``ponder-credentials`` says so, and ``authenticate`` with it
re-reads ``config.toml`` and the stored sign-in, so a key added (or a sign-in done)
meanwhile works without restarting the editor's agent. Clients that can run the agent
in a terminal (``clientCapabilities.auth.terminal``) are also offered each device login
itself as a ``terminal`` method: ``ponder acp --login NAME`` shows the code
there. Credentials already in use are never replaced: only providers without any pick
up what was found.
"""

import logging

from daemon.acp import types as t
from daemon.config.settings import Config, load_config
from daemon.vendors.table import DEVICE_LOGIN_PROVIDERS, OFFLINE_PROVIDERS, PROVIDERS

log = logging.getLogger("ponder.acp")

CREDENTIALS_METHOD = "ponder-credentials"
LOGIN_METHOD = "{provider}-login"
# Every device login so far is GitHub's (daemon.auth); a second kind would say its own.
LOGIN_DESCRIPTION = "Shows a code to enter at GitHub's device login page, then waits for the sign-in."


def auth_methods(config: Config, *, terminal: bool) -> list[t.AuthMethod]:
    env_vars = [var for info in PROVIDERS.values() for var in info.key_envs]
    logins = [PROVIDERS[name] for name in DEVICE_LOGIN_PROVIDERS]
    sign_ins = "".join(
        f"{info.display_name} signs in with `ponder login {info.name}` in a terminal. " for info in logins
    )
    methods = [
        t.AuthMethod(
            id=CREDENTIALS_METHOD,
            name="Provider API keys",
            description=(
                f"ponder reads API keys from the environment ({', '.join(env_vars)}) and from "
                f"[providers.NAME] api_key in {config.home / 'config.toml'}; {sign_ins}"
                "Add a key or sign in, then choose this to load it. "
                f"The offline {', '.join(f'{name}/*' for name in OFFLINE_PROVIDERS)} models need no key."
            ),
        )
    ]
    if terminal:
        methods.extend(
            t.AuthMethod(
                id=LOGIN_METHOD.format(provider=info.name),
                name=f"Sign in to {info.display_name}",
                description=LOGIN_DESCRIPTION,
                type="terminal",
                args=["--login", info.name],
            )
            for info in logins
        )
    return methods


def reload_credentials(config: Config) -> list[str]:
    """Give providers without credentials the ones ``config.toml`` now has; return those that got one."""
    # The environment cannot have changed since start-up; config.toml and the stored
    # device sign-in (which load_config applies) can.
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
