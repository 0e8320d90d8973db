"""SQL engine set-up shared by the planes that keep state in SQL (``state``, ``cache``,
``htc``): one rule for database URLs and one SQLite configuration.

Imports only SQLAlchemy; the planes stay independent of each other (the cache and HTC
planes may not import ``hal.state``), so this small piece lives on its own.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url


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


def make_engine(url: str) -> Engine:
    """An engine for ``url``. SQLite gets WAL, ``synchronous=NORMAL`` and a busy timeout
    (several processes — server, HTC broker — may write one file); PostgreSQL gets
    pre-ping so a restarted server is reconnected instead of failing a request."""
    url = normalise_url(url)
    if is_sqlite(url):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers never block the writer. synchronous=NORMAL keeps every committed
    # transaction across a crash of the *process* (SIGKILL); only an OS crash or power loss
    # can lose the last commits. busy_timeout lets a second process wait instead of failing.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
