"""``ponder sessions [--limit N]`` (the table) answered from the store itself, without a daemon.

What the table shows (each stored session's id, update time, messages, tokens, cost, model and
title) is what ``session/list`` answers from the store alone in a daemon that loaded nothing
else, so starting one to ask it (a second interpreter, and its whole start-up) bought nothing.
This opens the store as that daemon would (the home made private, the logging it would set
up, the same ``Store``: its schema check and migration), reads the same page, and prints what
``initialize`` would have reported first: its ``problems``, which for a plain home are only
the sandbox's (the same probe, started first so that it runs beside this process's imports).

Anything less plain is left to a daemon, which says it as before: a PostgreSQL store, a config
with problems, declared models (the catalogue checks them), permission rules or hooks (checked
when loaded), a home or store that cannot be opened. ``--json`` and one session's view
(``ponder sessions ID``) always ask a daemon: they print what it returned.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from daemon.cli.ending import exit_now, reader_went_away

# config.toml's permission rules file (``daemon.permissions.always.FILE_NAME``): when there is one,
# the daemon loads the rules at start and reports their problems.
PERMISSIONS_FILE = "permissions.toml"


class Listing(NamedTuple):
    """What ``ponder sessions [--limit N]`` (the table) runs with (``cli.main.plain_listing``)."""

    home: str | None
    log_level: str
    limit: int


def list_sessions_then_exit(listing: Listing) -> None:
    """``list_sessions``, then end the process (``ending.exit_now``); returns only when a daemon must answer."""
    try:
        code = list_sessions(listing)
    except BrokenPipeError:
        code = reader_went_away()
    except KeyboardInterrupt:
        code = 130
    if code is not None:
        exit_now(code)
    return None


def list_sessions(listing: Listing) -> int | None:
    """Print the table as ``ponder sessions`` does and return the exit status; None (having
    printed nothing) when a daemon must answer instead (see the module docstring)."""
    from daemon.sandbox.probe import ProbeRun

    probe = ProbeRun()  # its bwrap child runs while this process imports the rest, as in ponder serve

    from daemon.config.home import make_private_dir
    from daemon.config.settings import load_config, resolve_home
    from daemon.errors import StoreError
    from daemon.logs import setup_logging
    from daemon.sandbox.service import Sandbox
    from daemon.store.store import Store

    config = load_config(resolve_home(listing.home))
    if (
        config.store_url
        or config.problems
        or any(provider.models for provider in config.providers.values())
        or config.permission_rules
        or config.hooks
        or (config.home / PERMISSIONS_FILE).exists()
    ):
        return None
    setup_logging(config.log_dir, listing.log_level, stderr=False)  # as the daemon would log
    try:
        make_private_dir(config.home)
        store = Store(config.db_path)
    except (OSError, StoreError):
        return None  # the daemon reports it at initialize, and refuses session/list with it
    sandbox = Sandbox(config.sandbox, config.home, probing=probe)
    try:
        with store:
            rows, _cursor = store.list_sessions(None, listing.limit, None)
        problem = sandbox.problem()
    except StoreError:
        return None
    finally:
        sandbox.close()

    import msgspec

    from daemon.cli.sessions import print_table
    from daemon.cli.wording import for_person

    if problem is not None:
        print(f"ponder: {for_person(problem)}", file=sys.stderr)
    return print_table([msgspec.to_builtins(row.to_wire("idle", config.budget)) for row in rows])
