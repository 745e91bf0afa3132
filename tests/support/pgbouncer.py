"""A throwaway PgBouncer in transaction mode in front of the throwaway PostgreSQL server
(``tests/support/postgres``): its own temporary directory, a Unix socket only, a small pool (so
clients share server connections, as they do behind a real pooler), and the same two roles as
the server: the cluster's owner (``trust``) and ``ponder_pw`` (``scram-sha-256``, with its
password in PgBouncer's ``auth_file``, which PgBouncer also uses to log in to the server).

Found on ``PATH`` or at ``/usr/sbin/pgbouncer`` (Debian's ``pgbouncer`` package). Where it
cannot be started the fixture skips saying why, except in CI (``tests/support/postgres.required``),
where it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

from tests.support.postgres import PASSWORD, PASSWORD_ROLE, ThrowawayPostgres, interrupt

PORT = 6432  # the socket's name (.s.PGSQL.6432); there is no TCP listener
POOL_SIZE = 4  # server connections per database and user: fewer than the clients of a test


class PgBouncerUnavailable(Exception):
    """PgBouncer could not be found or started here (the sentence says why)."""


def find_pgbouncer() -> str:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)
    if found is None:
        raise PgBouncerUnavailable("PgBouncer is not installed (apt-get install pgbouncer)")
    return found


class ThrowawayPgBouncer:
    """PgBouncer, ``pool_mode = transaction``, in front of ``server``; ``url(schema)`` reaches it."""

    def __init__(self, server: ThrowawayPostgres) -> None:
        self.program = find_pgbouncer()
        self.server = server
        self._as_user = "postgres" if os.geteuid() == 0 else None  # PgBouncer refuses to run as root
        self.root = Path(tempfile.mkdtemp(prefix="ponder-pgbouncer-"))
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        (self.root / "users.txt").write_text(f'"{PASSWORD_ROLE}" "{PASSWORD}"\n"{server.owner}" ""\n')
        (self.root / "hba.conf").write_text(f"local all {PASSWORD_ROLE} scram-sha-256\nlocal all all trust\n")
        (self.root / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={server.socket_dir}",
                    "[pgbouncer]",
                    "pool_mode = transaction",
                    "listen_addr =",
                    f"listen_port = {PORT}",
                    f"unix_socket_dir = {self.socket_dir}",
                    "auth_type = hba",
                    f"auth_hba_file = {self.root / 'hba.conf'}",
                    f"auth_file = {self.root / 'users.txt'}",
                    f"default_pool_size = {POOL_SIZE}",
                    "max_client_conn = 500",
                    # psycopg sends no such parameters, but libpq URLs often carry options:
                    # PgBouncer refuses unknown startup parameters unless told to ignore them.
                    "ignore_startup_parameters = extra_float_digits,options",
                    "server_login_retry = 1",
                    f"logfile = {self.root / 'pgbouncer.log'}",
                    "",
                ]
            )
        )
        if self._as_user is not None:
            for path in (self.root, self.socket_dir, *self.root.iterdir()):
                shutil.chown(path, self._as_user)
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start PgBouncer; returns once its socket accepts connections."""
        self.process = subprocess.Popen(
            [self.program, str(self.root / "pgbouncer.ini")],
            user=self._as_user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        socket = self.socket_dir / f".s.PGSQL.{PORT}"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PgBouncerUnavailable(f"pgbouncer exited at start: {self.log_tail()}")
            if socket.exists():
                return
            time.sleep(0.05)
        raise PgBouncerUnavailable("pgbouncer did not open its socket within 30 s")

    def log_tail(self) -> str:
        try:
            return (self.root / "pgbouncer.log").read_text(errors="replace")[-600:].strip()
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process is not None:
            interrupt(self.process)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, schema: str | None = None, *, user: str | None = None, password: str | None = None) -> str:
        """A ``postgresql://`` URL through PgBouncer's socket. PgBouncer drops the startup
        ``options`` (so no ``search_path`` there): ``schema`` goes in ponder's ``schema=`` query
        parameter instead, which ponder takes out of the URL and sets in every transaction."""
        role = user or self.server.owner
        auth = urllib.parse.quote(role, safe="")
        if password is not None:
            auth += ":" + urllib.parse.quote(password, safe="")
        database = PASSWORD_ROLE if role == PASSWORD_ROLE else "postgres"
        query = {"host": str(self.socket_dir), "port": str(PORT)}
        if schema is not None:
            query["options"] = f"-csearch_path={schema}"
        return f"postgresql://{auth}@/{database}?{urllib.parse.urlencode(query)}"
