"""A throwaway PostgreSQL server for the tests: ``initdb`` into a temporary directory, a Unix
socket only (no TCP port), started once per test session; each test gets a schema of its own.

Found from ``PATH``, ``/usr/lib/postgresql/<version>/bin`` (Debian's layout) or
``/usr/local/pgsql/bin``. As root the cluster is owned by (and the server runs as) the
``postgres`` user, since ``initdb`` refuses root. Two roles: the cluster's owner (``trust``
over the socket) and ``ponder_pw``, who must give a password (``scram-sha-256``), for the tests
of a password in the URL and a refused login.

Where PostgreSQL cannot be started the fixture skips saying why, except in CI (``CI`` or
``PONDER_REQUIRE_POSTGRES`` set, as ``.ci/run`` does), where it fails.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

PASSWORD_ROLE = "ponder_pw"
PASSWORD = "s3cret-pg-pass-word"  # long enough for util.redact to mask it


class PostgresUnavailable(Exception):
    """PostgreSQL could not be found or started here (the sentence says why)."""


def required() -> bool:
    """Whether a missing PostgreSQL fails the tests instead of skipping them (CI)."""
    return bool(os.environ.get("PONDER_REQUIRE_POSTGRES")) or os.environ.get("CI", "").lower() in ("1", "true")


def find_bindir() -> Path:
    candidates: list[str] = []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.dirname(os.path.realpath(on_path)))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates.append("/usr/local/pgsql/bin")
    for candidate in candidates:
        if os.access(os.path.join(candidate, "initdb"), os.X_OK) and os.access(
            os.path.join(candidate, "postgres"), os.X_OK
        ):
            return Path(candidate)
    raise PostgresUnavailable("PostgreSQL's initdb is not installed (apt-get install postgresql)")


class ThrowawayPostgres:
    """One server in a temporary directory; ``url(schema)`` names a database schema for one test."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self._as_user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True, capture_output=True)
            self._as_user = "postgres"
        self.root = Path(tempfile.mkdtemp(prefix="ponder-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.owner = self._as_user or pwd.getpwuid(os.geteuid()).pw_name
        if self._as_user is not None:
            shutil.chown(self.root, self._as_user)
            shutil.chown(self.socket_dir, self._as_user)
        self.process: subprocess.Popen[bytes] | None = None
        self._initdb()
        self.start()
        self._make_password_role()

    def _run_as_owner(self, args: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(args, user=self._as_user, capture_output=True, check=False, **kwargs)  # type: ignore[call-overload,no-any-return]

    def _initdb(self) -> None:
        done = self._run_as_owner(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-U",
                self.owner,
            ]
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {done.stderr.decode(errors='replace').strip()[-400:]}")
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"local all {PASSWORD_ROLE} scram-sha-256\nlocal all all trust\n")

    def start(self) -> None:
        """Start (or restart) the server; returns once it accepts connections (at once if it runs)."""
        if self.process is not None and self.process.poll() is None:
            return
        log = open(self.root / "server.log", "ab")
        self.process = subprocess.Popen(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.data),
                "-k",
                str(self.socket_dir),
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            user=self._as_user,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (self.root / "server.log").read_text(errors="replace")[-600:]
                raise PostgresUnavailable(f"postgres exited at start: {tail.strip()}")
            if self._psql("SELECT 1", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise PostgresUnavailable("postgres did not accept connections within 30 s")

    def stop(self) -> None:
        """Stop the server: a fast shutdown, which cuts every connection at once (what clients see of
        a server going away) and keeps what was committed."""
        if self.process is not None:
            interrupt(self.process)  # SIGINT: PostgreSQL's fast shutdown

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _psql(self, sql: str, *, check: bool = True, database: str = "postgres") -> subprocess.CompletedProcess[bytes]:
        psql = self.bindir / "psql"
        program = str(psql) if psql.exists() else (shutil.which("psql") or "psql")
        done = self._run_as_owner(
            [program, "-X", "-q", "-h", str(self.socket_dir), "-U", self.owner, "-d", database, "-c", sql]
        )
        if check and done.returncode != 0:
            raise PostgresUnavailable(f"psql failed: {done.stderr.decode(errors='replace').strip()}")
        return done

    def _make_password_role(self) -> None:
        self._psql(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'")
        self._psql(f"CREATE DATABASE {PASSWORD_ROLE} OWNER {PASSWORD_ROLE}")

    def new_schema(self) -> str:
        """A fresh schema (``t_<hex>``) in the owner's database; its name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._psql(f"CREATE SCHEMA {name}")
        return name

    def url(self, schema: str | None = None, *, user: str | None = None, password: str | None = None) -> str:
        """A ``postgresql://`` URL over the socket; ``schema`` is put first on the search path."""
        role = user or self.owner
        auth = urllib.parse.quote(role, safe="")
        if password is not None:
            auth += ":" + urllib.parse.quote(password, safe="")
        database = PASSWORD_ROLE if role == PASSWORD_ROLE else "postgres"
        query = {"host": str(self.socket_dir)}
        if schema is not None:
            query["options"] = f"-csearch_path={schema}"
        return f"postgresql://{auth}@/{database}?{urllib.parse.urlencode(query)}"


def interrupt(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to a throwaway server (both PostgreSQL and PgBouncer shut down at once on it),
    killed if it has not exited within 30 s."""
    if process.poll() is not None:
        return
    process.send_signal(2)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
