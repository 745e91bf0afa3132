"""The schema of ``sessions.db`` as an ordered chain of migrations keyed on ``PRAGMA user_version``.

``MIGRATIONS[i]`` takes a database at ``user_version == i`` to ``i + 1``. Each step runs in
its own ``BEGIN IMMEDIATE`` transaction together with the ``user_version`` bump, so a crash
or a second daemon migrating the same file at the same moment never leaves a half-applied
step. Append new steps; never edit or reorder a step that has shipped.
"""

import sqlite3
from collections.abc import Callable

from daemon.errors import StoreUnavailable

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


class SchemaTooNew(StoreUnavailable):
    """The file was written by a newer ponder; touching it could lose that version's data."""

    def __init__(self, version: int, understood: int) -> None:
        super().__init__(
            f"sessions.db was written by a newer ponder (schema {version}); this one understands up to {understood}."
        )
        self.version = version


def check_not_too_new(db: sqlite3.Connection, migrations: list[Migration] | None = None) -> int:
    """The file's schema version; ``SchemaTooNew`` before anything is written when it is newer than ours."""
    chain = MIGRATIONS if migrations is None else migrations
    version = schema_version(db)
    if version > len(chain):
        raise SchemaTooNew(version, len(chain))
    return version


@migration
def m001_initial(db: sqlite3.Connection) -> None:
    db.execute(
        """
        CREATE TABLE sessions (
            id              TEXT PRIMARY KEY,
            title           TEXT,
            cwd             TEXT NOT NULL,
            model_id        TEXT NOT NULL,
            thinking_level  TEXT NOT NULL,
            approval_policy TEXT NOT NULL,
            system_prompt   TEXT,
            -- Not a foreign key: a fork keeps naming its origin after the origin is deleted.
            parent_id       TEXT,
            created_at      TEXT NOT NULL,
            updated_at      TEXT NOT NULL,
            -- Kept by the triggers below so session/list never counts messages.
            message_count   INTEGER NOT NULL DEFAULT 0
        )
        """
    )
    # Keyset paging of session/list walks these in order: newest first, id breaks ties.
    db.execute("CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC)")
    db.execute("CREATE INDEX sessions_by_cwd_updated ON sessions (cwd, updated_at DESC, id DESC)")

    db.execute(
        """
        CREATE TABLE messages (
            id                 TEXT PRIMARY KEY,
            session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq                INTEGER NOT NULL,
            role               TEXT NOT NULL,
            model_id           TEXT,
            thinking_requested TEXT,
            thinking_effective TEXT,
            stop_reason        TEXT,
            usage_json         TEXT,
            status             TEXT NOT NULL,
            created_at         TEXT NOT NULL,
            UNIQUE (session_id, seq)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE parts (
            message_id         TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
            position           INTEGER NOT NULL,
            type               TEXT NOT NULL,
            text               TEXT NOT NULL,
            redacted           INTEGER NOT NULL DEFAULT 0,
            call_id            TEXT,
            name               TEXT,
            arguments_json     TEXT,
            is_error           INTEGER NOT NULL DEFAULT 0,
            -- Round-trip data: NULL when absent, never ''.
            provider           TEXT,
            model              TEXT,
            signature          TEXT CHECK (signature <> ''),
            provider_data_json TEXT,
            PRIMARY KEY (message_id, position)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE session_changes (
            id         INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            kind       TEXT NOT NULL,
            value      TEXT,
            at         TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX session_changes_by_session ON session_changes (session_id, id)")

    db.execute(
        """
        CREATE TABLE turn_leases (
            session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            owner      TEXT NOT NULL,
            -- Unix seconds: compared across processes on one machine.
            expires_at REAL NOT NULL
        )
        """
    )

    # An upsert that takes the DO UPDATE path fires no INSERT trigger, so a checkpoint
    # followed by the final save of the same message counts once.
    db.execute(
        """
        CREATE TRIGGER messages_count_insert AFTER INSERT ON messages BEGIN
            UPDATE sessions SET message_count = message_count + 1 WHERE id = NEW.session_id;
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER messages_count_delete AFTER DELETE ON messages BEGIN
            UPDATE sessions SET message_count = message_count - 1 WHERE id = OLD.session_id;
        END
        """
    )


@migration
def m002_part_appends(db: sqlite3.Connection) -> None:
    # Text appended to a part by an incremental checkpoint of a reply still streaming, in
    # ``id`` order; the part's text is its own text followed by these. The final save of
    # the message rewrites its parts, which deletes them (ON DELETE CASCADE).
    db.execute(
        """
        CREATE TABLE part_appends (
            id         INTEGER PRIMARY KEY,
            message_id TEXT NOT NULL,
            position   INTEGER NOT NULL,
            text       TEXT NOT NULL,
            FOREIGN KEY (message_id, position) REFERENCES parts (message_id, position) ON DELETE CASCADE
        )
        """
    )
    db.execute("CREATE INDEX part_appends_by_part ON part_appends (message_id, position, id)")


@migration
def m003_thinking_controls(db: sqlite3.Connection) -> None:
    # A session's thinking controls beside its level (PROTOCOL.md "Thinking controls"):
    # NULL display / fallback follow config.toml's [defaults]; NULL budget is the level's own.
    db.execute("ALTER TABLE sessions ADD COLUMN thinking_display TEXT")
    db.execute("ALTER TABLE sessions ADD COLUMN thinking_fallback TEXT")
    db.execute("ALTER TABLE sessions ADD COLUMN thinking_budget INTEGER")


@migration
def m004_session_accounts(db: sqlite3.Connection) -> None:
    # Long sessions (PROTOCOL "Context, cost and compaction"): each session's running totals of
    # every model call (a Usage as JSON), their cost (NULL until some call had a known price),
    # the context fill after its last call, and its budget (NULL limits: none of that kind).
    for column in (
        "totals_json TEXT NOT NULL DEFAULT '{}'",
        "cost_amount REAL",
        "cost_currency TEXT",
        "context_used INTEGER",
        "context_size INTEGER",
        "budget_max_cost REAL",
        "budget_max_tokens INTEGER",
    ):
        db.execute(f"ALTER TABLE sessions ADD COLUMN {column}")


@migration
def m005_compactions(db: sqlite3.Connection) -> None:
    # A compaction record (PROTOCOL "Context, cost and compaction"): the summary that stands in
    # for the messages before ``first_kept_seq``. One row, written in one transaction: a crash
    # leaves the whole record or none. Messages are never touched by it. ``seq`` is the seq of
    # the last message that existed when it happened (it sorts after that message).
    db.execute(
        """
        CREATE TABLE compactions (
            id             TEXT PRIMARY KEY,
            session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq            INTEGER NOT NULL,
            trigger        TEXT NOT NULL,
            summary        TEXT NOT NULL,
            first_kept_seq INTEGER NOT NULL,
            tokens_before  INTEGER NOT NULL,
            tokens_after   INTEGER NOT NULL,
            model_id       TEXT,
            usage_json     TEXT,
            created_at     TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX compactions_by_session ON compactions (session_id, seq)")


@migration
def m006_attachments(db: sqlite3.Connection) -> None:
    # Prompt content (PROTOCOL "Prompt content"): each distinct image once, keyed by the sha256
    # of its stored bytes; parts name it. Shared by forks (the part rows are copied, not the
    # bytes); the last session that names one takes it along when deleted (``delete_session``).
    db.execute(
        """
        CREATE TABLE attachments (
            id         TEXT PRIMARY KEY,
            mime_type  TEXT NOT NULL,
            bytes      INTEGER NOT NULL,
            width      INTEGER,
            height     INTEGER,
            data       BLOB NOT NULL,
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute("ALTER TABLE parts ADD COLUMN attachment_id TEXT REFERENCES attachments (id)")
    # An image's or resource's description: mime_type, uri, size, width, height, truncated, omitted.
    db.execute("ALTER TABLE parts ADD COLUMN media_json TEXT")
    db.execute("CREATE INDEX parts_by_attachment ON parts (attachment_id) WHERE attachment_id IS NOT NULL")


@migration
def m007_message_origin(db: sqlite3.Connection) -> None:
    # Steering and continuing (PROTOCOL "Steering, the queue and continuing"): where a user
    # message came from (prompt, steer, continue), the turn that wrote each message (what
    # session/continue names in ``continued_from``), and a prompt's ``client_message_id`` with
    # the answer it first got (a prompt sent twice is admitted once, also after a restart).
    for column in ("origin TEXT", "turn_id TEXT", "client_message_id TEXT", "admission_json TEXT"):
        db.execute(f"ALTER TABLE messages ADD COLUMN {column}")
    db.execute(
        "CREATE UNIQUE INDEX messages_by_client_id ON messages (session_id, client_message_id) "
        "WHERE client_message_id IS NOT NULL"
    )


@migration
def m008_session_sandbox(db: sqlite3.Connection) -> None:
    # The sandbox a session asked for on session/start (PROTOCOL "Sandbox"): null follows
    # config.toml's [sandbox], so a restart keeps a read_only session read-only.
    db.execute("ALTER TABLE sessions ADD COLUMN sandbox_mode TEXT")
    db.execute("ALTER TABLE sessions ADD COLUMN sandbox_network INTEGER")


@migration
def m009_budget_own(db: sqlite3.Connection) -> None:
    # Whether a session set its own budget (session/start {budget}, session/budget), or follows
    # config.toml's [budget] as it is when the daemon reads it (PROTOCOL "Context, cost and
    # compaction"). Before, a session copied the default at its start: a stored budget is kept as
    # its own; a session with none follows the config from now on.
    db.execute("ALTER TABLE sessions ADD COLUMN budget_own INTEGER NOT NULL DEFAULT 1")
    db.execute("UPDATE sessions SET budget_own = 0 WHERE budget_max_cost IS NULL AND budget_max_tokens IS NULL")


@migration
def m010_session_plan(db: sqlite3.Connection) -> None:
    # The latest plan update_plan kept (PROTOCOL "Plans"): JSON {explanation, entries, updated_at}; null before any.
    db.execute("ALTER TABLE sessions ADD COLUMN plan_json TEXT")


@migration
def m011_lease_epochs(db: sqlite3.Connection) -> None:
    # Fencing (PROTOCOL "Store backends"): each lease carries the epoch it was taken at, and each
    # session counts its takings (never reset while it exists, so a stale holder's epoch never
    # comes back). Every write of a turn checks the lease still has its owner and epoch.
    db.execute("ALTER TABLE turn_leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0")
    db.execute(
        """
        CREATE TABLE lease_epochs (
            session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            epoch      INTEGER NOT NULL
        )
        """
    )


@migration
def m012_message_body(db: sqlite3.Connection) -> None:
    # The message as one value (``daemon.store.messages``), which a history read fetches instead
    # of ~15 columns a part: sqlite3 pays per value. NULL reads the columns and parts as before,
    # so rows written before stay NULL (no backfill: that would freeze today's encoding into
    # this step, and they read as fast as they did).
    db.execute("ALTER TABLE messages ADD COLUMN body BLOB")


def schema_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite3.Connection, migrations: list[Migration] | None = None) -> int:
    """Apply the pending steps; return the resulting version. ``db`` must be in autocommit mode."""
    chain = MIGRATIONS if migrations is None else migrations
    while True:
        # Cheap check outside a write lock: the common case is "nothing to do".
        if schema_version(db) >= len(chain):
            break
        db.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the lock: another process may have migrated meanwhile.
            version = schema_version(db)
            if version < len(chain):
                chain[version](db)
                # PRAGMA values cannot be bound; version is our own int.
                db.execute(f"PRAGMA user_version = {version + 1:d}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return check_not_too_new(db, chain)
