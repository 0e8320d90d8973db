"""One control plane per database: the lock a server holds while it runs.

Two servers on one database would each keep their own mirror and run their own
scheduler: both would start jobs on the same nodes, and each would write its own stale
view of a job over the other's (a job cancelled through one is started by the other).
Until the mirror follows the event table (docs/adr/0003-state-store.md), a server takes
this lock before it reads anything and holds it until it stops; a second server is
refused with a ``Conflict`` naming who holds it.

- SQLite: ``flock`` on ``<database file>.lock`` beside the file; it holds the holder's
  pid and host. The kernel drops it when the process ends, even by SIGKILL.
- PostgreSQL: a session advisory lock on one connection kept open; PostgreSQL drops it
  when that connection ends, as it does in an outage (or a ``pg_terminate_backend``).
  The leader checks the connection every second (``keep``, from its lease keeper,
  ``hal.state.leader``) and takes the lock again on a new one; if a second server took
  it meanwhile, this one is *fenced*: its mirror can no longer be trusted, and it stops
  (``HalServer``), leaving the database to the other. The lock's connection has TCP
  keepalives on both ends (``KEEPALIVE``): PostgreSQL ends the session of a host that
  stopped answering within about 11 s, and the leader notices a database that did.
  A standby server waits for the lock in a session of its own (``LockWaiter``:
  ``pg_advisory_lock``, which PostgreSQL grants the moment the holder's session ends),
  instead of asking again every second.

Commands that only read or write a few rows (``hal server --init-admin``, ``hal up``'s
token, the HTC broker) do not take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import socket
import threading
import time
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from hal.core.errors import Conflict, Unavailable
from hal.db import CONNECT_TIMEOUT_S
from hal.state.store import SqlStateStore

# the advisory lock's key: "HALSRV" in ASCII, a constant no other tool is likely to use
ADVISORY_KEY = 0x48414C535256
# TCP keepalives of the lock's connection, seconds: first probe after IDLE s of silence,
# then every INTERVAL s, COUNT unanswered probes end it (5 + 2 x 3 = 11 s). Set on the
# client (libpq: the leader notices a database host that vanished) and on PostgreSQL's
# end of the session (it ends a vanished leader's session, and frees the lock).
KEEPALIVE = {"idle": 5, "interval": 2, "count": 3}
# keepalives probe an idle connection only: data sent and not acknowledged (a renewal
# into a network cut) is given up after this long instead of TCP's ~15 min of retries
USER_TIMEOUT_MS = 11_000
# a standby's wait for the lock after its session ended (an outage, a database restart)
# asks this long after it reconnected: the leader takes its lock again first (its lease
# keeper tries every second), and a restart of the database costs no takeover
REWAIT_GRACE_S = 3.0


class ServerLock:
    """Held by the running server; ``take`` refuses a second one, ``release`` lets go."""

    def __init__(self, fd: int | None, conn: Connection | None) -> None:
        self._fd = fd
        self._conn = conn
        self._lost = False  # PostgreSQL: its session ended, the lock is to be taken again

    @classmethod
    def take(cls, store: SqlStateStore) -> ServerLock:
        """The database's server lock, or ``Conflict`` when another server holds it."""
        if not store.is_sqlite:
            return cls(None, _advisory_lock(store))
        path = make_url(store.url).database
        if not path or path == ":memory:":  # private to this process: nobody to refuse
            return cls(None, None)
        return cls(_file_lock(Path(path)), None)

    @classmethod
    def try_take(cls, store: SqlStateStore) -> ServerLock | None:
        """``take``, or None while another server holds the lock (a standby's retry)."""
        try:
            return cls.take(store)
        except Conflict:
            return None

    @property
    def connection(self) -> Connection | None:
        """The lock's own connection (PostgreSQL; autocommit): the leader's lease is
        renewed on it, so the lease lives exactly as long as the lock's session."""
        return self._conn

    def backend_pid(self) -> int | None:
        """The PostgreSQL backend that holds the lock for this process (None: SQLite)."""
        if self._conn is None:
            return None
        return int(self._conn.execute(text("SELECT pg_backend_pid()")).scalar_one())

    def keep(self, store: SqlStateStore) -> bool:
        """Make sure the lock is still held: on PostgreSQL its session may have ended (an
        outage, a terminated backend), and then it is taken again on a new connection.
        Returns True when it was taken again. Raises ``Conflict`` when another server
        holds it now, and the database's error while it cannot be reached (call again
        later). One round trip on PostgreSQL, nothing on SQLite (a ``flock`` held by a
        live process is never lost)."""
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return False
            except DBAPIError:
                self._close_conn()
                self._lost = True
        if not self._lost:
            return False
        self._conn = _advisory_lock(store)
        self._lost = False
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the flock goes with the descriptor
            self._fd = None
        if self._conn is not None:
            # let go at once: the backend of a closed connection drops its locks only as
            # it exits, a moment later (a server restarted at once would be refused)
            with contextlib.suppress(DBAPIError):
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_KEY})
        self._close_conn()
        self._lost = False

    def _close_conn(self) -> None:
        if self._conn is not None:
            # closed, not given back to the pool: the session ends, and its lock with it
            self._conn.invalidate()
            self._conn.close()
            self._conn = None


def _file_lock(database: Path) -> int:
    path = database.with_name(database.name + ".lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # a read-only file system, a directory the user may not write
        raise Unavailable(
            f"the server cannot create {path} ({err.strerror}); give the server's user "
            "write access to the database's directory (SQLite writes its -wal and -shm "
            "files there too)"
        ) from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise Conflict(
            f"another HAL server ({holder}) is using the database {database}; "
            "stop it first, or give this one its own --data-dir or --db"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd


@functools.lru_cache(maxsize=8)
def _lock_engine(url: str, application_name: str | None) -> Engine:
    """An engine for the lock's connection alone: not pooled (closing it ends the
    session, and the lock with it), with TCP keepalives (``KEEPALIVE``), named as the
    server's other connections are, and not subject to their connect-time check. One
    per database and name: a leader takes the lock again on it after an outage, and a
    standby waits for the lock on it."""
    args: dict[str, object] = {
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE["idle"],
        "keepalives_interval": KEEPALIVE["interval"],
        "keepalives_count": KEEPALIVE["count"],
        "tcp_user_timeout": USER_TIMEOUT_MS,
    }
    if "connect_timeout" not in make_url(url).query:
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    if application_name is not None:
        args["application_name"] = application_name
    return create_engine(url, poolclass=NullPool, connect_args=args)


class LockWaiter:
    """A standby's wait for the lock (PostgreSQL): ``wait``, on a thread, opens a lock
    session and asks for the lock with ``pg_advisory_lock``, which returns when
    PostgreSQL grants it: the moment the holder's session ends (its process killed, its
    session terminated as a stale leader's), with no poll's delay. ``cancel`` (from
    any thread) ends a wait. A wait ended otherwise (a new leader ends this server's
    sessions, an outage) answers None: the caller waits again."""

    def __init__(self, store: SqlStateStore) -> None:
        self.store = store
        self.granted_at = 0.0  # time.monotonic() of the last grant
        self._conn: Connection | None = None
        self._cancelled = threading.Event()
        self._mutex = threading.Lock()

    def wait(self, grace: float = 0.0) -> ServerLock | None:
        """Block until the lock is this server's (a ``ServerLock`` on the waiting
        session), or None: cancelled, or the session ended. ``grace``: seconds between
        the session's start and the ask, for a wait after an outage (``REWAIT_GRACE_S``):
        the leader, which takes its lock again within a second of the database's return,
        keeps it, instead of a standby that reconnected first taking it over."""
        try:
            conn = _lock_session(self.store)
        except DBAPIError:
            return None
        if grace > 0 and self._cancelled.wait(grace):
            conn.close()
            return None
        with self._mutex:
            if self._cancelled.is_set():
                conn.close()
                return None
            self._conn = conn
        granted = False
        try:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": ADVISORY_KEY})
            granted = True
        except DBAPIError:  # cancelled, ended by a new leader, an outage
            pass
        with self._mutex:
            self._conn = None
            if granted and not self._cancelled.is_set():
                self.granted_at = time.monotonic()
                return ServerLock(None, conn)
        with contextlib.suppress(DBAPIError):
            conn.invalidate()  # (a cancelled session's lock, if granted, goes with it)
            conn.close()
        return None

    def cancel(self) -> None:
        """End the wait in progress, and any later one."""
        with self._mutex:
            self._cancelled.set()
            conn = self._conn
            if conn is not None:
                with contextlib.suppress(Exception):  # (the session may be gone already)
                    conn.connection.dbapi_connection.cancel_safe()  # type: ignore[union-attr]


def _lock_session(store: SqlStateStore) -> Connection:
    """A lock session: its own connection, autocommit, with keepalives on both ends."""
    conn = _lock_engine(store.url, store.application_name).connect()
    try:
        # autocommit: the lock is the session's; no transaction stays open around it
        conn.execution_options(isolation_level="AUTOCOMMIT")
        # PostgreSQL's end of the keepalives (ignored on a Unix socket): a leader host
        # that vanished loses its session, and the lock, within about 11 s
        for name, value in KEEPALIVE.items():
            conn.execute(text(f"SET tcp_keepalives_{name} = {int(value)}"))
        conn.execute(text(f"SET tcp_user_timeout = {USER_TIMEOUT_MS}"))
    except BaseException:
        conn.close()
        raise
    return conn


def _advisory_lock(store: SqlStateStore) -> Connection:
    conn = _lock_session(store)
    try:
        took = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_KEY})
        if took.scalar_one():
            return conn
        holder = conn.execute(
            text(
                "SELECT a.pid, a.client_addr FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid = :hi AND l.objid = :lo AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            {"hi": ADVISORY_KEY >> 32, "lo": ADVISORY_KEY & 0xFFFFFFFF},
        ).first()
    except BaseException:
        conn.close()
        raise
    conn.close()
    who = "unknown"
    if holder is not None:
        where = holder.client_addr or "a local socket"
        who = f"PostgreSQL backend pid {holder.pid}, connected from {where}"
    raise Conflict(
        f"another HAL server ({who}) is using this PostgreSQL "
        "database; stop it first, or give this one its own --db"
    )
