"""``ponder store status`` and ``ponder store copy --to URL`` as a person runs them: which store
the configuration names (SQLite by default, PostgreSQL by ``[store] url`` or
``PONDER_STORE_URL``), its schema; the home's sessions copied, and copied again idempotently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from daemon.conversation import ChatMessage, Part
from daemon.store import SessionRow, Store
from daemon.store.migrations import MIGRATIONS
from daemon.store.pg_migrations import PG_MIGRATIONS
from tests.support.postgres import PASSWORD, PASSWORD_ROLE, ThrowawayPostgres

ROOT = Path(__file__).resolve().parents[2]


def ponder(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "PONDER_STORE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "daemon", "--home", str(home), "store", *args],
        cwd=ROOT,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_names_the_store_in_use_and_its_schema(home: Path, postgres_url: str) -> None:
    sqlite = ponder(home, "status", "--json")
    assert sqlite.returncode == 0, sqlite.stderr
    assert json.loads(sqlite.stdout) == {
        "backend": "sqlite",
        "location": str(home / "sessions.db"),
        "schema_version": len(MIGRATIONS),
        "schema_latest": len(MIGRATIONS),
        "sessions": 0,
        "pooler": "none",
        "notifications": "none",
    }
    (home / "config.toml").write_text(f'[store]\nurl = "{postgres_url}"\n')
    configured = ponder(home, "status")
    assert configured.returncode == 0, configured.stderr
    lines = configured.stdout.splitlines()
    assert lines[0].startswith("store:    postgresql at ") and "(schema t_" in lines[0]
    assert lines[1] == f"schema:   {len(PG_MIGRATIONS)} (current)"
    assert lines[2] == "sessions: 0"
    assert lines[3:] == ["pooler:   none", "notifications from other daemons: LISTEN"]


def test_status_through_a_transaction_pooler_says_so_and_an_undeclared_one_is_a_sentence(
    home: Path, pgbouncer_url: str
) -> None:
    undeclared = ponder(home, "status", env={"PONDER_STORE_URL": pgbouncer_url})
    assert undeclared.returncode == 1
    assert "reached through a connection pooler" in undeclared.stderr and "PONDER_STORE_POOLER" in undeclared.stderr
    (home / "config.toml").write_text(f'[store]\nurl = "{pgbouncer_url}"\npooler = "transaction"\n')
    declared = ponder(home, "status")
    assert declared.returncode == 0, declared.stderr
    lines = declared.stdout.splitlines()
    assert lines[1] == f"schema:   {len(PG_MIGRATIONS)} (current)"
    assert lines[3] == "pooler:   transaction"
    assert lines[4].startswith("notifications from other daemons: off (behind a transaction pooler")


def test_a_refused_login_is_one_sentence_without_the_password(home: Path, postgres_server: ThrowawayPostgres) -> None:
    url = postgres_server.url(user=PASSWORD_ROLE, password=PASSWORD + "-wrong")
    refused = ponder(home, "status", env={"PONDER_STORE_URL": url})
    assert refused.returncode == 1
    assert (
        refused.stderr.startswith("ponder: The PostgreSQL store at ponder_pw@")
        and "refused the login" in refused.stderr
    )
    assert PASSWORD not in refused.stderr + refused.stdout


def test_copy_moves_the_homes_sessions_and_runs_again_idempotently(home: Path, postgres_url: str) -> None:
    with Store(home / "sessions.db") as store:
        for session_id in ("a", "b"):
            store.create_session(SessionRow(id=session_id, cwd="/", model_id="mock/echo", thinking_level="off"))
            store.save_message(
                ChatMessage(
                    message_id=f"{session_id}1",
                    session_id=session_id,
                    seq=1,
                    role="user",
                    parts=[Part(type="text", text="hi")],
                )
            )
    first = ponder(home, "copy", "--to", postgres_url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == (
        "copied 2 new session(s), 2 message(s), 0 compaction(s), 0 attachment(s) (2 session(s) in the home)"
    )
    again = ponder(home, "copy", "--to", postgres_url)
    assert again.stdout.strip() == (
        "copied 0 new session(s), 0 message(s), 0 compaction(s), 0 attachment(s) (2 session(s) in the home)"
    )
    status = ponder(home, "status", "--json", env={"PONDER_STORE_URL": postgres_url})
    assert json.loads(status.stdout)["sessions"] == 2
    wrong = ponder(home, "copy", "--to", "sqlite:///elsewhere.db")
    assert wrong.returncode == 1 and "must name a PostgreSQL server" in wrong.stderr
