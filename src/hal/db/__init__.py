"""SQL engine set-up shared by the planes that keep state in SQL (``state``, ``cache``,
``htc``): one rule for database URLs and one SQLite configuration.

Imports only SQLAlchemy; the planes stay independent of each other (the cache and HTC
planes may not import ``hal.state``), so this small piece lives on its own.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError

# PostgreSQL waits this long for a connection before failing it, so a server that does not
# answer (a host down, a firewall dropping packets) fails requests instead of hanging them
CONNECT_TIMEOUT_S = 10
# how long a SQLite write waits for another process's lock before it fails (503)
SQLITE_BUSY_TIMEOUT_S = 30.0


def normalise_url(url: str) -> str:
    """Accept ``postgres://``, ``postgresql://`` and ``sqlite:///path`` as users write them;
    PostgreSQL goes through psycopg 3."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def is_sqlite(url: str) -> bool:
    return make_url(normalise_url(url)).get_backend_name() == "sqlite"


def make_engine(url: str, *, application_name: str | None = None) -> Engine:
    """An engine for ``url``. SQLite gets WAL, ``synchronous=NORMAL`` and a busy timeout
    (several processes — server, HTC broker — may write one file); PostgreSQL gets
    pre-ping so a restarted server is reconnected instead of failing a request, and
    ``application_name`` on each connection when given (``pg_stat_activity`` names the
    process; a new leader ends its predecessor's sessions by it, ``hal.state.leader``)."""
    url = normalise_url(url)
    if is_sqlite(url):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S}
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in make_url(url).query:  # the URL's own setting wins
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    if application_name is not None:  # wins over the URL's: fencing relies on it
        connect_args["application_name"] = application_name
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


# SQLite's result codes (``sqlite3.Error.sqlite_errorname``, primary part) that mean the
# file cannot be used now, with what an operator does about each
_SQLITE_UNAVAILABLE = {
    "SQLITE_BUSY": "the database file is locked by another process (find it with "
    "`fuser` or `lsof` on the file)",
    "SQLITE_LOCKED": "the database file is locked by another process (find it with "
    "`fuser` or `lsof` on the file)",
    "SQLITE_READONLY": "the database file is read-only (give the server's user write "
    "access to the file, its -wal and -shm files and its directory)",
    "SQLITE_CANTOPEN": "the database file cannot be opened (check that it and its "
    "directory exist and that the server's user may write them)",
    "SQLITE_PERM": "the database file may not be written (check its permissions)",
    "SQLITE_IOERR": "the database file cannot be read or written (I/O error: check the disk)",
    "SQLITE_FULL": "the disk holding the database file is full (free some space)",
}


def unavailable_reason(err: BaseException) -> str | None:
    """Why the database cannot serve now, said for an operator, when ``err`` (raised by
    SQLAlchemy) means that: PostgreSQL down, restarting, unreachable or out of space or
    connections; a SQLite file locked by another process, read-only, gone or on a full
    disk. None for any other error (a bug, a constraint): that one is not retried."""
    if not isinstance(err, DBAPIError):
        return None
    orig = err.orig
    if type(orig).__module__ == "sqlite3":
        # by result code (SQLITE_READONLY_DBMOVED counts as SQLITE_READONLY)
        name = str(getattr(orig, "sqlite_errorname", ""))
        for prefix, why in _SQLITE_UNAVAILABLE.items():
            if name == prefix or name.startswith(prefix + "_"):
                return why
        return None
    if err.connection_invalidated or isinstance(err, InterfaceError):
        return "the connection to PostgreSQL was lost"
    state = str(getattr(orig, "sqlstate", None) or "")
    if state == "25006":  # read_only_sql_transaction: a standby, or a read-only database
        return "PostgreSQL accepts no writes (a standby, or default_transaction_read_only)"
    reason = _PG_CLASSES.get(state[:2])
    if reason is not None:
        return reason
    if not state and type(orig).__name__ == "OperationalError":  # psycopg's, no server
        return "PostgreSQL cannot be reached"
    return None


# SQLSTATE classes that mean PostgreSQL cannot serve now (the server's log names which
# error it was; the client is told the kind)
_PG_CLASSES = {
    "08": "the connection to PostgreSQL failed",
    "53": "PostgreSQL is out of resources (disk space, memory or connections)",
    "57": "PostgreSQL is shutting down, starting up or cancelled the statement",
    "58": "PostgreSQL reports a system error (I/O)",
}


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers never block the writer. synchronous=NORMAL keeps every committed
    # transaction across a crash of the *process* (SIGKILL); only an OS crash or power loss
    # can lose the last commits. busy_timeout lets a second process wait instead of failing.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
