"""Which server leads a PostgreSQL database, and how a new leader fences the old one
(docs/adr/0026-warm-standby.md).

The advisory lock (``hal.state.server_lock``) says who may lead; PostgreSQL drops it when
the holder's session ends, at once for a process that died (its socket closes), within
the lock connection's TCP keepalives for a host that stopped answering. A leader that is
alive to the kernel but not running (SIGSTOP, a frozen VM, a stalled host) keeps its
session, and so its lock, for ever: hence a *lease* beside the lock. The leader renews
``server_leader.renewed`` every ``RENEW_S`` from a thread of its own (a busy event loop
does not lose the lead); a standby that finds the lease older than ``LEASE_S`` ends the
holder's lock session and takes the lock. Both timestamps are the database's clock:
the hosts' clocks never meet.

Taking the lead (``record_takeover``, ``fence_others``): the epoch goes up by one, and
every other session whose ``application_name`` starts with ``hal-server`` on this
database is ended, so nothing an old leader had open can commit afterwards. Every
connection a leader opens later is checked as it is made (``LeaseKeeper.check_connect``):
while the lock is not held by this process's lock session, it is refused; once the epoch
has moved on, the server is fenced for good (``fenced``) and stops.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from hal.core.errors import Conflict, Unavailable
from hal.state.server_lock import ADVISORY_KEY, ServerLock
from hal.state.store import SqlStateStore
from hal.state.store_protocol import DatabaseUnavailable

log = logging.getLogger("hal.server")

APPLICATION = "hal-server"  # the prefix of every server connection's application_name
RENEW_S = 1.0  # how often a leader renews its lease
LEASE_S = 6.0  # a lease this old (no renewal for 6 s): the leader is taken over
# a lease this old: a standby no longer sends clients to that leader (503, "retry")
ANSWERING_S = 3.0

_NOW = "extract(epoch from clock_timestamp())"  # the database's clock, Unix seconds
_LOCK_ROW = (
    "l.locktype = 'advisory' AND l.granted AND l.classid = :hi AND l.objid = :lo AND "
    "l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
_KEY = {"hi": ADVISORY_KEY >> 32, "lo": ADVISORY_KEY & 0xFFFFFFFF}


def application_name(host: str | None = None, pid: int | None = None) -> str:
    """``hal-server:HOST:PID``: this server's name in ``pg_stat_activity``."""
    import os

    return f"{APPLICATION}:{host or socket.gethostname()}:{pid or os.getpid()}"


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    """The ``server_leader`` row: who leads (or led last), and its lease's age."""

    epoch: int
    url: str
    host: str
    pid: int
    since: float  # Unix seconds, the database's clock
    age_s: float  # since the lease was last renewed

    @property
    def answering(self) -> bool:
        """Whether the leader renewed its lease lately: clients may be sent to it."""
        return self.age_s <= ANSWERING_S


def read_leader(conn: Connection) -> LeaderRecord | None:
    row = conn.execute(
        text(
            f"SELECT epoch, url, host, pid, since, {_NOW} - renewed AS age "
            "FROM server_leader WHERE id = 1"
        )
    ).first()
    if row is None:
        return None
    return LeaderRecord(
        int(row.epoch), row.url, row.host, int(row.pid), float(row.since), float(row.age)
    )


def record_takeover(conn: Connection, url: str, host: str, pid: int) -> int:
    """Record this server as the leader, one epoch on; return the new epoch. Called on
    the lock's connection once the lock is held."""
    epoch = conn.execute(
        text(
            "INSERT INTO server_leader (id, epoch, url, host, pid, since, renewed) "
            f"VALUES (1, 1, :url, :host, :pid, {_NOW}, {_NOW}) ON CONFLICT (id) DO UPDATE "
            "SET epoch = server_leader.epoch + 1, url = :url, host = :host, pid = :pid, "
            "since = excluded.since, renewed = excluded.renewed RETURNING epoch"
        ),
        {"url": url, "host": host, "pid": pid},
    ).scalar_one()
    return int(epoch)


def fence_others(conn: Connection, own: str) -> int:
    """End every other server's session on this database (an old leader's above all):
    nothing it had open can commit after this returns (each end is waited for, up to 5 s).
    Returns how many were ended."""
    ended = conn.execute(
        text(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE :prefix "
            "AND application_name <> :own AND pid <> pg_backend_pid()"
        ),
        {"prefix": APPLICATION + "%", "own": own},
    ).scalar_one()
    return int(ended)


def end_stale_leader(conn: Connection) -> bool:
    """A standby's move on a leader that holds the lock but stopped renewing its lease
    (``LEASE_S``): end its lock session, so that the lock is free. Only a session older
    than the lease's last renewal is ended: a server that has just taken the lock (and
    not yet recorded itself) is left alone. True when one was ended."""
    ended = conn.execute(
        text(
            "SELECT pg_terminate_backend(a.pid, 5000) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid JOIN server_leader s ON s.id = 1 "
            f"WHERE {_LOCK_ROW} AND {_NOW} - s.renewed > :lease "
            "AND a.backend_start < to_timestamp(s.renewed)"
        ),
        {**_KEY, "lease": LEASE_S},
    ).first()
    return ended is not None and bool(ended[0])


def renew(conn: Connection, epoch: int) -> bool:
    """Renew the lease of ``epoch``; False when the epoch has moved on (taken over)."""
    done = conn.execute(
        text(f"UPDATE server_leader SET renewed = {_NOW} WHERE id = 1 AND epoch = :epoch"),
        {"epoch": epoch},
    )
    return done.rowcount == 1


_CHECK = (
    "SELECT (SELECT epoch FROM server_leader WHERE id = 1), EXISTS (SELECT 1 FROM pg_locks "
    "WHERE locktype = 'advisory' AND granted AND pid = %s AND classid = %s AND objid = %s "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
)


class Fenced(Unavailable):
    """A connection refused because this server does not hold the lead (now, or ever
    again): the request that needed it gets a 503 and nothing of it is written."""


class LeaseKeeper:
    """A leader's lock, epoch and lease on PostgreSQL, from the takeover on: renews the
    lease (a thread), takes the lock again when its session ended and nobody else
    took it, and checks each new connection of the server's engine. ``fenced`` says why
    this server must stop leading ("" while it leads). ``renewed``: called on the lock's
    connection after each renewal (the server's heartbeat, ``hal.state.peers``)."""

    def __init__(
        self,
        store: SqlStateStore,
        lock: ServerLock,
        epoch: int,
        renewed: Callable[[Connection], None] | None = None,
    ) -> None:
        self._store = store
        self._lock = lock
        self.epoch = epoch
        self.renewed = renewed
        self.fenced = ""
        self._lock_pid: int | None = lock.backend_pid()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hal-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (before the lock is released)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _fence(self, why: str) -> None:
        if not self.fenced:
            self.fenced = why
            log.critical("%s", why)
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(RENEW_S):
            self.tick()

    def tick(self) -> None:
        """One renewal: the lock's session checked (taken again if it ended and the lock
        is free), then the lease renewed for this epoch."""
        try:
            again = self._lock.keep(self._store)
        except Conflict:
            self._fence(
                "another HAL server took the lead while this server was cut off from the "
                "database or stopped; this server stops leading, as its view of the "
                "cluster may be stale (started again, it stands by)"
            )
            return
        except Exception as err:  # the database is out of reach: the next tick tries again
            log.debug("lease not renewed: %s", err)
            return
        conn = self._lock.connection
        if conn is None:  # (SQLite has no lease; not made there)
            return
        try:
            if again:
                self._lock_pid = self._lock.backend_pid()
                log.warning("took the database's server lock again (its session had ended)")
            if not renew(conn, self.epoch):
                self._fence(
                    f"another HAL server took the lead (epoch {self.epoch} is over); this "
                    "server stops leading, as its view of the cluster may be stale"
                )
                return
        except DBAPIError as err:
            log.debug("lease not renewed: %s", err)
            return
        if self.renewed is not None:
            try:
                self.renewed(conn)
            except DBAPIError as err:  # (the lease is what matters: the next tick again)
                log.debug("no heartbeat written: %s", err)

    def check_connect(self, dbapi_conn: Any, _record: Any) -> None:
        """The engine's "connect" hook: a connection is given to the server only while
        its lock session holds the lock; one made after another server took the lead
        fences this server. Raises ``Fenced`` to refuse it."""
        if self.fenced:
            raise Fenced(self.fenced)
        cur = dbapi_conn.cursor()
        try:
            cur.execute(_CHECK, (self._lock_pid, _KEY["hi"], _KEY["lo"]))
            epoch, held = cur.fetchone()
        finally:
            cur.close()
            dbapi_conn.rollback()
        if epoch is not None and int(epoch) != self.epoch:
            self._fence(
                f"another HAL server took the lead (epoch {epoch}, this server's was "
                f"{self.epoch}); this server stops leading and writes nothing more"
            )
            raise Fenced(self.fenced)
        if not held:  # (an outage ended it): a 503 clients retry, as for the outage itself
            raise DatabaseUnavailable(
                "this server's lock session on it ended and is being taken again"
            )
