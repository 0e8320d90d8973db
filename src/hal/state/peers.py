"""The servers of one PostgreSQL database and where clients reach them (``server_peers``;
docs/adr/0026-warm-standby.md, "Servers that know each other").

Every server, the leader and each standby, keeps one row: its name (``HOST:PID``, as
``GET /v1/ha`` says it), its advertised URL, its role, and a heartbeat by the database's
clock. ``beat`` writes the row (made again if it went) and reads the others in one
statement, every ``HEARTBEAT_S``: the leader from its lease thread, on the lock's own
connection, a standby from its wait loop. A row whose heartbeat is older than ``LIVE_S``
(three periods) is not live: its server died without a clean exit, or cannot reach the
database. ``remove`` deletes a server's row at its clean exit.

A beat also deletes the rows of servers silent for ``FORGET_S``, and the leader's the
rows of other servers that still say ``leader`` (one killed before it could remove its
row: the epoch has moved on, it never leads again under that name), so the table holds
the live servers and the recently gone. SQLite has one server and no standbys: nothing
is written there.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

HEARTBEAT_S = 3.0  # how often each server refreshes its row
LIVE_S = 3 * HEARTBEAT_S  # a row refreshed longer ago than this: its server is not live
FORGET_S = 3600.0  # a row this old is deleted by the leader's beat

_NOW = "extract(epoch from clock_timestamp())"  # the database's clock, Unix seconds

_BEAT = f"""
WITH beat AS (
    INSERT INTO server_peers (id, url, role, started, heartbeat)
    VALUES (:id, :url, :role, {_NOW}, {_NOW})
    ON CONFLICT (id) DO UPDATE
    SET url = excluded.url, role = excluded.role, heartbeat = excluded.heartbeat
), gone AS (
    DELETE FROM server_peers
    WHERE id <> :id AND (
        heartbeat < {_NOW} - :forget OR (:role = 'leader' AND role = 'leader')
    )
)
SELECT id, url, role, {_NOW} - heartbeat AS age FROM server_peers
WHERE id <> :id AND {_NOW} - heartbeat <= :live
    AND NOT (:role = 'leader' AND role = 'leader')
ORDER BY role <> 'leader', id
"""


@dataclass(frozen=True, slots=True)
class Peer:
    """A live server of this database, as its last heartbeat wrote it."""

    server: str  # HOST:PID
    url: str  # where clients reach it
    role: str  # leader, standby or starting
    age_s: float  # since its last heartbeat, by the database's clock

    def as_json(self) -> dict[str, object]:
        return {"server": self.server, "url": self.url, "role": self.role}


def beat(conn: Connection, server: str, url: str, role: str) -> tuple[Peer, ...]:
    """Write this server's row (its heartbeat now) and return the other live servers, the
    leader first: one statement, one round trip (PostgreSQL runs a ``WITH``'s writes
    whether or not the query reads them; its ``SELECT`` sees the rows as they were
    before them, hence the filters repeated there). ``conn`` commits it (an autocommit
    connection, or the caller's commit)."""
    rows = conn.execute(
        text(_BEAT),
        {"id": server, "url": url, "role": role, "live": LIVE_S, "forget": FORGET_S},
    ).all()
    return tuple(Peer(row.id, row.url, row.role, float(row.age)) for row in rows)


def remove(conn: Connection, server: str) -> None:
    """Delete this server's row (a clean exit): clients stop learning its address."""
    conn.execute(text("DELETE FROM server_peers WHERE id = :id"), {"id": server})
