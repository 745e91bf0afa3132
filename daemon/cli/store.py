"""``ponder store status`` (which store the configuration names, where, its schema version and
how many sessions it holds) and ``ponder store copy --to URL`` (the home's SQLite sessions
into a PostgreSQL store, idempotent). Both open the store directly, without a daemon: the
status is the configuration's answer, and a copy is a maintenance step.
"""

from __future__ import annotations

import argparse
import json
import sys

import msgspec

from daemon.config.settings import Config, load_config, resolve_home
from daemon.errors import StoreError
from daemon.store.store import Store, StoreQueries


def _open(url: str | None, db_path: str, config: Config) -> StoreQueries:
    if url:
        from daemon.store.postgres import PostgresStore, is_postgres_url

        if not is_postgres_url(url):
            raise StoreError("The store URL must name a PostgreSQL server (postgresql://…).")
        return PostgresStore(url, pooler=config.store_pooler, listen_url=config.store_listen_url)
    return Store(db_path)


def run_store(args: argparse.Namespace) -> int:
    config = load_config(resolve_home(args.home))
    try:
        if args.store_command == "status":
            return _status(config, as_json=args.json)
        return _copy(config, args.to)
    except StoreError as error:
        print(f"ponder: {error.message}", file=sys.stderr)
        return 1


def _status(config: Config, *, as_json: bool) -> int:
    with _open(config.store_url, str(config.db_path), config) as store:
        status = store.status()
    if as_json:
        print(json.dumps(msgspec.to_builtins(status), indent=2))
        return 0
    print(f"store:    {status.backend} at {status.location}")
    state = "current" if status.schema_version == status.schema_latest else f"this ponder knows {status.schema_latest}"
    print(f"schema:   {status.schema_version} ({state})")
    print(f"sessions: {status.sessions}")
    if status.backend == "postgresql":
        print(f"pooler:   {status.pooler}")
        print(f"notifications from other daemons: {status.notifications}")
    return 0


def _copy(config: Config, url: str) -> int:
    """Into ``url``, through the configured pooler if one is declared (a direct URL works either way)."""
    from daemon.store.copy import copy_sessions

    db_path = str(config.db_path)
    with _open(None, db_path, config) as source, _open(url, db_path, config) as target:
        report = copy_sessions(source, target)
    print(
        f"copied {report.sessions} new session(s), {report.messages} message(s), {report.compactions} "
        f"compaction(s), {report.attachments} attachment(s) ({report.seen} session(s) in the home)"
    )
    if report.conflicts:
        print(
            f"left out {report.conflicts} message(s): the target already holds another message at their seq",
            file=sys.stderr,
        )
    return 0
