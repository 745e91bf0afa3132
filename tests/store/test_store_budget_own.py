"""Whether a session's budget is its own (migration ``m009``): a real SQLite file."""

import sqlite3
from pathlib import Path

from daemon.store import SessionRow, Store
from daemon.store.migrations import MIGRATIONS, migrate
from protocol.objects import Budget

BEFORE = MIGRATIONS[: MIGRATIONS.index(next(m for m in MIGRATIONS if m.__name__ == "m009_budget_own"))]


def test_sessions_stored_before_keep_a_stored_budget_as_their_own_and_the_others_follow_the_config(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn, BEFORE)
        for session_id, cost, tokens in (("ses_copied", None, 5000), ("ses_none", None, None)):
            conn.execute(
                "INSERT INTO sessions (id, cwd, model_id, thinking_level, approval_policy, created_at, updated_at, "
                "budget_max_cost, budget_max_tokens) VALUES (?, '/', 'mock/thinker', 'default', 'ask', 't', 't', ?, ?)",
                (session_id, cost, tokens),
            )
    finally:
        conn.close()
    default = Budget(max_cost=2.0)
    with Store(path) as store:
        copied, none = store.get_session("ses_copied"), store.get_session("ses_none")
        assert copied is not None and none is not None
        assert (copied.budget_own, copied.budget_in_force(default)) == (True, Budget(max_tokens=5000))
        assert (none.budget_own, none.budget_in_force(default)) == (False, default)
        assert none.to_wire("idle", default).budget == default


def test_own_budgets_are_kept_and_set_budget_makes_one_own(tmp_path: Path) -> None:
    with Store(tmp_path / "sessions.db") as store:
        follows = store.create_session(
            SessionRow(id="ses_f", cwd="/", model_id="mock/thinker", thinking_level="default", budget_own=False)
        )
        # A row that does not own its budget never stores one, whatever it carries.
        stray = SessionRow(
            id="ses_s", cwd="/", model_id="mock/thinker", thinking_level="default", budget=Budget(max_tokens=9),
            budget_own=False,
        )  # fmt: skip
        assert store.create_session(stray).budget is None
        assert (follows.budget, follows.budget_own) == (None, False)
        cleared = store.set_budget("ses_f", None)
        assert (cleared.budget, cleared.budget_own, cleared.budget_in_force(Budget(max_tokens=1))) == (None, True, None)
        raised = store.set_budget("ses_f", Budget(max_tokens=10))
        assert (raised.budget, raised.budget_own) == (Budget(max_tokens=10), True)
