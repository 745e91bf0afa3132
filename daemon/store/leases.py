"""Turn leases: which daemon may run a session's turn, across daemons sharing one store.

A lease row names its owner (``owners.new_lease_owner``: one per daemon), an expiry on the
store's clock (``StoreBackend._lease_now``: the machine's for SQLite, the server's for
PostgreSQL) and a fencing epoch: each time an owner takes a session's lease that it did not
hold, the session's epoch (``lease_epochs``, never reset while the session exists) goes up by
one. The store that took it remembers (owner, epoch), and every write of the turn checks it
(``StoreBackend._check_fence``), so a daemon whose lease was taken over cannot write the session.

Another owner's unexpired lease is taken over when its holder is gone
(``StoreBackend._holder_alive``: the process on SQLite, the database connection on PostgreSQL).
"""

from __future__ import annotations

from daemon.store.backend import Body, SqlConnection, StoreBackend
from daemon.store.owners import new_lease_owner, process_start_time

__all__ = ["LeaseQueries", "new_lease_owner", "process_start_time"]


class LeaseQueries(StoreBackend):
    def acquire_lease(self, session_id: str, owner: str, ttl_s: float) -> bool:
        """Take (or extend) the session's turn lease for ``owner``.

        False while another owner holds it unexpired and that owner is alive.
        """
        return self._write(self._acquire_lease_body(session_id, owner, ttl_s))

    def _acquire_lease_body(self, session_id: str, owner: str, ttl_s: float) -> Body[bool]:
        def body(db: SqlConnection) -> bool:
            now = self._lease_now(db)
            held = db.execute(
                "SELECT owner, expires_at, epoch FROM turn_leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if held is not None and held[0] != owner and held[1] > now and self._holder_alive(db, session_id, held[0]):
                return False
            self._require_session(db, session_id)
            if held is not None and held[0] == owner and self._fences.get(session_id) == (owner, int(held[2])):
                epoch = int(held[2])  # ours still: extended, same epoch
            else:
                epoch = int(
                    db.execute(
                        "INSERT INTO lease_epochs (session_id, epoch) VALUES (?, 1) "
                        "ON CONFLICT (session_id) DO UPDATE SET epoch = lease_epochs.epoch + 1 RETURNING epoch",
                        (session_id,),
                    ).fetchone()[0]
                )
            db.execute(
                """
                INSERT INTO turn_leases (session_id, owner, expires_at, epoch) VALUES (?, ?, ?, ?)
                ON CONFLICT (session_id) DO UPDATE SET
                    owner = excluded.owner, expires_at = excluded.expires_at, epoch = excluded.epoch
                """,
                (session_id, owner, now + ttl_s, epoch),
            )
            self._stamp_holder(db, session_id)
            self._fences[session_id] = (owner, epoch)
            return True

        return body

    def lease_holder(self, session_id: str) -> str | None:
        """Who holds the session's turn lease, as a person reads it (``process 4242``); None when nobody."""
        row = self._read(
            lambda db: db.execute("SELECT owner FROM turn_leases WHERE session_id = ?", (session_id,)).fetchone()
        )
        if row is None:
            return None
        pid = str(row[0]).split(":", 1)[0]
        return f"process {pid}" if pid.isdigit() else "another process"

    def lease_epoch(self, session_id: str) -> int | None:
        """The epoch of the lease this store holds on ``session_id`` (None: it holds none)."""
        fence = self._fences.get(session_id)
        return None if fence is None else fence[1]

    def release_lease(self, session_id: str, owner: str) -> bool:
        """Drop ``owner``'s lease; False if it did not hold it."""

        def body(db: SqlConnection) -> bool:
            if self._fences.get(session_id, (owner,))[0] == owner:
                self._fences.pop(session_id, None)
            return (
                db.execute("DELETE FROM turn_leases WHERE session_id = ? AND owner = ?", (session_id, owner)).rowcount
                > 0
            )

        return self._write(body)
