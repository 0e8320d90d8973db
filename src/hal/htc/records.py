"""``SessionRecords``: the durable part of HTC, one row per session.

Only metadata and end-of-session counters live here (written when a session opens,
changes state, and every few seconds while it runs); tasks and results never touch the
database. The table is HTC's own, created in the control plane's database (same URL as
``hal.state``'s store, reached through SQLAlchemy Core here, not through ``hal.state``).
Calls are synchronous; the broker makes them from one executor thread.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Engine

from hal.db import make_engine, normalise_url

metadata = MetaData()

sessions = Table(
    "htc_sessions",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(256), nullable=False, default=""),
    Column("user_name", String(256), nullable=False),
    Column("service", Text, nullable=False),  # JSON of the SessionOptions
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("priority", Integer, nullable=False),
    Column("created", Float, nullable=False),
    Column("ended", Float, nullable=True),
    Column("submitted", BigInteger, nullable=False, default=0),
    Column("completed", BigInteger, nullable=False, default=0),
    Column("failed", BigInteger, nullable=False, default=0),
    Column("retried", BigInteger, nullable=False, default=0),
    Column("worker_deaths", BigInteger, nullable=False, default=0),
)

LIVE_STATES = ("OPEN", "CLOSED")
COUNTERS = ("submitted", "completed", "failed", "retried", "worker_deaths")


class SessionRecords:
    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        self.engine: Engine = make_engine(self.url)  # SQLite: waits for the server's lock
        metadata.create_all(self.engine, checkfirst=True)

    def close(self) -> None:
        self.engine.dispose()

    def insert(self, row: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(sessions).values(**row))

    def update(self, session_id: str, values: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))

    def mark_lost(self, now: float, keep: Collection[str] = ()) -> int:
        """Sessions left open by a broker that is gone: their tasks were in its memory
        (all but ``keep``: the journaled sessions the new broker reopened)."""
        live = [sessions.c.state.in_(LIVE_STATES)]
        if keep:
            live.append(sessions.c.id.not_in(list(keep)))
        with self.engine.begin() as conn:
            result = conn.execute(
                update(sessions)
                .where(*live)
                .values(
                    state="LOST",
                    ended=now,
                    reason="the HTC broker stopped while the session was open; its queued "
                    "tasks were held in memory. Open a new session and resubmit",
                )
            )
            return int(result.rowcount or 0)

    def load(self, session_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        query = select(sessions).order_by(sessions.c.created)
        if session_id is not None:
            query = query.where(sessions.c.id == session_id)
        if user is not None:
            query = query.where(sessions.c.user_name == user)
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        return [info_from_row(r) for r in rows]


def info_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """A table row in the shape of ``rest.SessionInfo``."""
    options = json.loads(row["service"])
    service = options.get("service", {})
    label = service.get("target") or " ".join(service.get("argv", []))
    return {
        "id": row["id"],
        "name": row["name"],
        "user": row["user_name"],
        "service": label,
        "state": row["state"],
        "reason": row["reason"],
        "priority": row["priority"],
        "min_workers": options.get("min_workers", 0),
        "max_workers": options.get("max_workers", 0),
        "journal": bool(options.get("journal", False)),
        "created": row["created"],
        "ended": row["ended"],
        **{c: row[c] for c in COUNTERS},
    }
