"""The schema of a PostgreSQL store as its own ordered chain of migrations, kept in
``ponder_schema`` (one row: the version).

``PG_MIGRATIONS[i]`` takes a schema at version ``i`` to ``i + 1``. Every step runs in one
transaction that first takes an advisory lock (``migrate``), so many daemons starting together
against an empty database run each step once: the others wait, re-read the version and find
nothing to do. Append new steps; never edit or reorder a step that has shipped. The tables
mirror SQLite's (``migrations``) column for column, so the queries are the same: ``rowid`` of
``compactions`` is a real column here (SQLite has it built in), ``BYTEA`` holds the images,
and ``id``/``updated_at`` compare byte-wise (``COLLATE "C"``), as SQLite's text does.

Change notification is part of the schema: a trigger on ``sessions`` (every message save,
title, budget, plan or account touches its row) and one on ``compactions`` send
``NOTIFY "ponder.<schema>"`` with ``<op>:<origin>:<session id>`` (PostgreSQL sends it on commit
and folds duplicates within a transaction; the origin is the writing store's, since p002).
"""

from __future__ import annotations

from collections.abc import Callable

from daemon.errors import StoreUnavailable
from daemon.store.backend import SqlConnection

PgMigration = Callable[[SqlConnection], None]

PG_MIGRATIONS: list[PgMigration] = []


def pg_migration(fn: PgMigration) -> PgMigration:
    PG_MIGRATIONS.append(fn)
    return fn


@pg_migration
def p001_initial(db: SqlConnection) -> None:
    """The whole schema as SQLite has it at m011 (lease epochs), plus change notification."""
    db.execute(
        """
        CREATE TABLE sessions (
            id                TEXT COLLATE "C" PRIMARY KEY,
            title             TEXT,
            cwd               TEXT COLLATE "C" NOT NULL,
            model_id          TEXT NOT NULL,
            thinking_level    TEXT NOT NULL,
            approval_policy   TEXT NOT NULL,
            system_prompt     TEXT,
            parent_id         TEXT,
            created_at        TEXT NOT NULL,
            updated_at        TEXT COLLATE "C" NOT NULL,
            message_count     INTEGER NOT NULL DEFAULT 0,
            thinking_display  TEXT,
            thinking_fallback TEXT,
            thinking_budget   INTEGER,
            totals_json       TEXT NOT NULL DEFAULT '{}',
            cost_amount       DOUBLE PRECISION,
            cost_currency     TEXT,
            context_used      BIGINT,
            context_size      BIGINT,
            budget_max_cost   DOUBLE PRECISION,
            budget_max_tokens BIGINT,
            sandbox_mode      TEXT,
            sandbox_network   INTEGER,
            budget_own        INTEGER NOT NULL DEFAULT 1,
            plan_json         TEXT
        )
        """
    )
    db.execute("CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC)")
    db.execute("CREATE INDEX sessions_by_cwd_updated ON sessions (cwd, updated_at DESC, id DESC)")
    db.execute(
        """
        CREATE TABLE messages (
            id                 TEXT PRIMARY KEY,
            session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq                BIGINT NOT NULL,
            role               TEXT NOT NULL,
            model_id           TEXT,
            thinking_requested TEXT,
            thinking_effective TEXT,
            stop_reason        TEXT,
            usage_json         TEXT,
            status             TEXT NOT NULL,
            created_at         TEXT NOT NULL,
            origin             TEXT,
            turn_id            TEXT,
            client_message_id  TEXT,
            admission_json     TEXT,
            UNIQUE (session_id, seq)
        )
        """
    )
    db.execute(
        "CREATE UNIQUE INDEX messages_by_client_id ON messages (session_id, client_message_id) "
        "WHERE client_message_id IS NOT NULL"
    )
    db.execute(
        """
        CREATE TABLE attachments (
            id         TEXT PRIMARY KEY,
            mime_type  TEXT NOT NULL,
            bytes      BIGINT NOT NULL,
            width      INTEGER,
            height     INTEGER,
            data       BYTEA NOT NULL,
            created_at TEXT NOT NULL
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
            provider           TEXT,
            model              TEXT,
            signature          TEXT CHECK (signature <> ''),
            provider_data_json TEXT,
            attachment_id      TEXT REFERENCES attachments (id),
            media_json         TEXT,
            PRIMARY KEY (message_id, position)
        )
        """
    )
    db.execute("CREATE INDEX parts_by_attachment ON parts (attachment_id) WHERE attachment_id IS NOT NULL")
    db.execute(
        """
        CREATE TABLE part_appends (
            id         BIGSERIAL PRIMARY KEY,
            message_id TEXT NOT NULL,
            position   INTEGER NOT NULL,
            text       TEXT NOT NULL,
            FOREIGN KEY (message_id, position) REFERENCES parts (message_id, position) ON DELETE CASCADE
        )
        """
    )
    db.execute("CREATE INDEX part_appends_by_part ON part_appends (message_id, position, id)")
    db.execute(
        """
        CREATE TABLE session_changes (
            id         BIGSERIAL PRIMARY KEY,
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
        CREATE TABLE compactions (
            rowid          BIGSERIAL,
            id             TEXT PRIMARY KEY,
            session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq            BIGINT NOT NULL,
            trigger        TEXT NOT NULL,
            summary        TEXT NOT NULL,
            first_kept_seq BIGINT NOT NULL,
            tokens_before  BIGINT NOT NULL,
            tokens_after   BIGINT NOT NULL,
            model_id       TEXT,
            usage_json     TEXT,
            created_at     TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX compactions_by_session ON compactions (session_id, seq)")
    db.execute(
        """
        CREATE TABLE turn_leases (
            session_id     TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            owner          TEXT NOT NULL,
            -- Unix seconds on the server's clock: every daemon compares against the same one.
            expires_at     DOUBLE PRECISION NOT NULL,
            epoch          BIGINT NOT NULL DEFAULT 0,
            -- The holder's database connection: gone (a crash, a lost network) frees the lease.
            holder_pid     INTEGER,
            holder_started TIMESTAMPTZ
        )
        """
    )
    db.execute(
        """
        CREATE TABLE lease_epochs (
            session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            epoch      BIGINT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE FUNCTION ponder_count_messages() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                UPDATE sessions SET message_count = message_count + 1 WHERE id = NEW.session_id;
            ELSE
                UPDATE sessions SET message_count = message_count - 1 WHERE id = OLD.session_id;
            END IF;
            RETURN NULL;
        END $$
        """
    )
    db.execute(
        "CREATE TRIGGER messages_count AFTER INSERT OR DELETE ON messages "
        "FOR EACH ROW EXECUTE FUNCTION ponder_count_messages()"
    )
    db.execute(
        """
        CREATE FUNCTION ponder_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            changed TEXT;
        BEGIN
            IF TG_OP = 'DELETE' THEN
                changed := OLD.id;
            ELSIF TG_TABLE_NAME = 'compactions' THEN
                changed := NEW.session_id;
            ELSE
                changed := NEW.id;
            END IF;
            PERFORM pg_notify('ponder.' || TG_TABLE_SCHEMA, left(TG_OP, 1) || ':' || changed);
            RETURN NULL;
        END $$
        """
    )
    db.execute(
        "CREATE TRIGGER sessions_notify AFTER INSERT OR UPDATE OR DELETE ON sessions "
        "FOR EACH ROW EXECUTE FUNCTION ponder_notify_change()"
    )
    db.execute(
        "CREATE TRIGGER compactions_notify AFTER INSERT ON compactions "
        "FOR EACH ROW EXECUTE FUNCTION ponder_notify_change()"
    )


@pg_migration
def p002_notify_origin(db: SqlConnection) -> None:
    """Notifications name the store that wrote the change: ``<op>:<origin>:<session id>``, the
    origin being the ``ponder.origin`` setting each store sets in its transactions. The change
    feed left its own store's writes out by the sender's backend pid, which behind a pooler is
    any daemon's."""
    db.execute(
        """
        CREATE OR REPLACE FUNCTION ponder_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            changed TEXT;
        BEGIN
            IF TG_OP = 'DELETE' THEN
                changed := OLD.id;
            ELSIF TG_TABLE_NAME = 'compactions' THEN
                changed := NEW.session_id;
            ELSE
                changed := NEW.id;
            END IF;
            PERFORM pg_notify(
                'ponder.' || TG_TABLE_SCHEMA,
                left(TG_OP, 1) || ':' || coalesce(current_setting('ponder.origin', true), '') || ':' || changed
            );
            RETURN NULL;
        END $$
        """
    )


@pg_migration
def p003_message_body(db: SqlConnection) -> None:
    """SQLite's m012: the message as one value, NULL for rows written before (read from the columns)."""
    db.execute("ALTER TABLE messages ADD COLUMN body BYTEA")


class PgSchemaTooNew(StoreUnavailable):
    """The database was written by a newer ponder; touching it could lose that version's data."""

    def __init__(self, version: int, understood: int) -> None:
        super().__init__(
            f"The PostgreSQL store was written by a newer ponder (schema {version}); "
            f"this one understands up to {understood}."
        )
        self.version = version


def pg_schema_version(db: SqlConnection) -> int:
    """The schema's version; 0 before the first migration. Inside a transaction."""
    # Not to_regclass(): it looks the name up without a lock, so it may miss a table another
    # daemon's migration just committed; reading the table takes a lock, which sees it.
    db.execute("SAVEPOINT version")
    try:
        row = db.execute("SELECT version FROM ponder_schema").fetchone()
    except Exception as error:
        if "ponder_schema" not in str(error):
            raise
        db.execute("ROLLBACK TO SAVEPOINT version")
        return 0
    finally:
        db.execute("RELEASE SAVEPOINT version")
    return 0 if row is None else int(row[0])


def pg_migrate(
    db: SqlConnection, lock_key: int, migrations: list[PgMigration] | None = None, *, begin: str = "BEGIN"
) -> int:
    """Apply the pending steps, each in a transaction under the advisory lock ``lock_key``;
    return the version. ``db`` must be in autocommit mode (no transaction open); ``begin``
    starts a transaction (with the settings the store sets in each: nothing is kept in the
    session, which a pooler may hand to another client between transactions)."""
    chain = PG_MIGRATIONS if migrations is None else migrations
    while True:
        db.execute(begin)  # cheap check first: usually nothing to do
        try:
            version = pg_schema_version(db)
        finally:
            db.execute("COMMIT")
        if version > len(chain):
            raise PgSchemaTooNew(version, len(chain))
        if version == len(chain):
            return version
        db.execute(begin)
        try:
            db.execute("SELECT pg_advisory_xact_lock(?)", (lock_key,))
            version = pg_schema_version(db)  # another daemon may have migrated meanwhile
            if version < len(chain):
                chain[version](db)
                db.execute("CREATE TABLE IF NOT EXISTS ponder_schema (version INTEGER NOT NULL)")
                db.execute("DELETE FROM ponder_schema")
                db.execute("INSERT INTO ponder_schema (version) VALUES (?)", (version + 1,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
