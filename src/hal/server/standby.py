"""``Leadership``: a server's part in its database's leadership — whether it leads, stands
by or is starting, the leader it knows of, and the standby's wait for the lock
(``stand_by``). The mechanism under it (lock, epoch, lease, fencing) is
``hal.state.leader``; docs/admin/failover.md says what an administrator sees. Each
server's heartbeat (``Leadership.beat``, ``hal.state.peers``) tells it the others'
addresses, which ``GET /v1/ha`` lists and every answer carries (``X-HAL-Servers``), so a
client given one address learns them all.

Only PostgreSQL has standbys: on SQLite (one host, one file) a second server is refused
as before, and so is one started with ``--no-standby``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import Connection, event
from sqlalchemy.exc import DBAPIError

from hal.state import peers as server_peers
from hal.state.leader import (
    LEASE_S,
    LeaderRecord,
    LeaseKeeper,
    application_name,
    end_stale_leader,
    fence_others,
    read_leader,
    record_takeover,
)
from hal.state.peers import HEARTBEAT_S, Peer
from hal.state.server_lock import REWAIT_GRACE_S, LockWaiter, ServerLock
from hal.state.store import SqlStateStore

log = logging.getLogger("hal.server")

Role = Literal["leader", "standby", "starting"]
RETRY_S = 1.0  # a standby looks at the leader this often (it waits for the lock)
PRELOAD_S = 5.0  # and reads the jobs ahead this often (``stand_by``)


class Leadership:
    """Whether this server leads its database; made with the store, before anything
    reads it. ``standby``: on PostgreSQL, wait for the lead when another server holds
    it, instead of refusing to start."""

    def __init__(self, store: SqlStateStore, *, standby: bool = False) -> None:
        self.store = store
        self.standby = standby
        # "leader" until ``claim`` says otherwise: an app used without its lifespan (a
        # test client, an embedder) serves as a server on its own database would
        self.role: Role = "leader"
        self.url = ""  # where clients reach this server (``--advertise-url``)
        self.name = store.application_name or application_name()
        self.leader: LeaderRecord | None = None  # the last one read or recorded
        self._lock: ServerLock | None = None
        self._keeper: LeaseKeeper | None = None
        self.lead_timings: dict[str, float] = {}  # seconds of each step of ``_lead``
        # the other live servers of this database, as this server's last heartbeat read
        # them (``hal.state.peers``; PostgreSQL only), and the ``X-HAL-Servers`` header
        # every answer carries: this server and those, the leader first ("": none known)
        self.peers: tuple[Peer, ...] = ()
        self.servers_header = ""
        self._beaten = -HEARTBEAT_S  # (time.monotonic() of the last heartbeat)
        self._beaten_as: str = ""  # the role the lease thread last saw
        self._written = False  # this server's row is in ``server_peers``

    @property
    def leading(self) -> bool:
        return self._lock is not None

    @property
    def fenced(self) -> str:
        """Why this server must stop leading; "" while it may lead."""
        return self._keeper.fenced if self._keeper is not None else ""

    @property
    def server(self) -> str:
        """``HOST:PID``: this server, as ``/v1/ha`` names it."""
        return self.name.removeprefix("hal-server:")

    def leader_url(self) -> str | None:
        """Where a standby sends clients: the leader's URL while its lease is fresh and it
        is not this server; None while no leader answers."""
        known = self.leader
        if known is None or not known.answering or known.url == self.url:
            return None
        return known.url

    def status(self) -> dict[str, object]:
        """``GET /v1/ha``'s answer."""
        known = self.leader
        fresh = known is not None and (self.leading or known.answering)
        return {
            "role": self.role,
            "epoch": known.epoch if known is not None else None,
            "leader_url": (self.url if self.leading else self.leader_url()) or None,
            "leader_since": (
                datetime.fromtimestamp(known.since, UTC).isoformat()
                if known is not None and fresh
                else None
            ),
            "server": self.server,
            "peers": [peer.as_json() for peer in self.servers()],
        }

    def servers(self) -> list[Peer]:
        """Every live server of this database as this one knows them: itself (its role
        now) and the others its last heartbeat read, the leader first."""
        own = Peer(self.server, self.url, self.role, 0.0)
        found = [own, *(p for p in self.peers if p.server != own.server)]
        return sorted(found, key=lambda peer: peer.role != "leader")

    def beat(self, conn: Connection) -> None:
        """This server's heartbeat (``hal.state.peers.beat``): its row written, the other
        servers read, the header made. Every ``HEARTBEAT_S``: the leader's lease thread
        on the lock's connection (autocommit, ``_beat_leading``), a standby's wait loop
        through ``beat_standby``."""
        if not self.url:  # (an app served without an address: nobody to tell)
            return
        self._beaten = time.monotonic()
        found = server_peers.beat(conn, self.server, self.url, self.role)
        self._written = True
        self.take_peers(found)

    def take_peers(self, peers: tuple[Peer, ...]) -> None:
        """The other live servers, as a heartbeat read them: kept for ``/v1/ha``, and
        the ``X-HAL-Servers`` header made (this server's URL and theirs, the leader
        first) once here rather than at every answer."""
        self.peers = peers
        self.servers_header = ",".join(peer.url for peer in self.servers())

    def beat_standby(self) -> None:
        """A standby's heartbeat, on a connection of the store's (``beat``)."""
        try:
            with self.store.engine.connect() as conn:
                self.beat(conn)
                conn.commit()
        except Exception as err:  # (no server_peers yet: a leader of an older HAL)
            log.debug("no heartbeat written: %s", err)

    def _forget_self(self) -> None:
        """A clean exit: this server's row deleted, on the lock's connection while it
        leads, else on the store's (a standby's). Best effort: a row left behind stops
        being live within ``hal.state.peers.LIVE_S``."""
        if not self._written:
            return
        self._written = False
        self.peers, self.servers_header = (), ""
        conn = self._lock.connection if self._lock is not None else None
        try:
            if conn is not None:
                server_peers.remove(conn, self.server)
                return
            with self.store.engine.connect() as own:
                server_peers.remove(own, self.server)
                own.commit()
        except Exception as err:  # (the database out of reach at exit)
            log.debug("this server's row not removed: %s", err)

    def claim(self) -> bool:
        """Take the lead if this server can: True when it leads (now or already). False
        when it stands by (``standby``, PostgreSQL, another server leads); ``Conflict``
        when it may not stand by."""
        if self._lock is not None:
            return True
        if self.store.is_sqlite or not self.standby:
            lock = ServerLock.take(self.store)
        else:
            self.look()
            try:
                found = ServerLock.try_take(self.store)
            except DBAPIError as err:  # (a new leader may end this session as it asks)
                log.debug("the lock not asked for: %s", err)
                found = None
            if found is None:
                self.role = "standby"
                return False
            lock = found
        self._lead(lock)
        return True

    def lead_on(self, lock: ServerLock) -> bool:
        """Lead with ``lock``, granted to a standby's ``LockWaiter``: True when it leads;
        False when the database failed it meanwhile (the lock let go: wait again)."""
        try:
            self._lead(lock)
        except DBAPIError as err:
            log.debug("the lead not taken: %s", err)
            self.role = "standby"
            return False
        return True

    def release(self) -> None:
        """Stop leading, or standing by: the lease's renewals, this server's row among
        the peers, then the lock (after the last write)."""
        if self._keeper is not None:
            self._keeper.stop()
            with contextlib.suppress(Exception):  # (removed already by a failed start)
                event.remove(self.store.engine, "connect", self._keeper.check_connect)
            self._keeper = None
        self._forget_self()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def look(self) -> None:
        """A standby's look at the leader: remember it, and end its lock session when
        its lease ran out (``hal.state.leader.end_stale_leader``)."""
        try:
            with self.store.engine.connect() as conn:
                self.leader = read_leader(conn)
                stale = self.leader is not None and self.leader.age_s > LEASE_S
                if stale and self.leader is not None and end_stale_leader(conn):
                    log.warning(
                        "the leader %s:%d renewed no lease for %.1f s: its session was "
                        "ended, this server takes the lead",
                        self.leader.host,
                        self.leader.pid,
                        self.leader.age_s,
                    )
                conn.commit()
        except DBAPIError as err:
            # no server_leader yet (a database no leader migrated), or this session
            # ended by a server taking the lead: the lock's answer decides
            log.debug("the leader not read: %s", err)
            self.leader = None

    def _beat_leading(self, conn: Connection) -> None:
        """The leader's heartbeat, from its lease thread: at once after the takeover (the
        row then says ``leader``), then every ``HEARTBEAT_S``."""
        due = time.monotonic() - self._beaten >= HEARTBEAT_S
        if due or (self.role == "leader" and self._beaten_as != "leader"):
            self._beaten_as = self.role
            self.beat(conn)

    def _lead(self, lock: ServerLock) -> None:
        """The lock is this server's: on PostgreSQL, migrate, record the takeover (the
        epoch goes up), end every other server's sessions, then renew the lease and
        check each new connection from now on (``hal.state.leader``)."""
        self.role = "starting"
        conn = lock.connection
        if conn is None:  # SQLite: the flock is the whole story
            self._lock = lock
            return
        t0 = time.monotonic()
        try:
            self.store.migrate()  # (server_leader, on a fresh database)
            t1 = time.monotonic()
            epoch = record_takeover(conn, self.url, socket.gethostname(), os.getpid())
            ended = fence_others(conn, self.name)
            self.leader = read_leader(conn)
            keeper = LeaseKeeper(self.store, lock, epoch, renewed=self._beat_leading)
            t2 = time.monotonic()
            self.lead_timings = {"lead_migrate": round(t1 - t0, 3), "fence": round(t2 - t1, 3)}
        except BaseException:
            lock.release()
            raise
        event.listen(self.store.engine, "connect", keeper.check_connect)
        keeper.start()
        self._lock, self._keeper = lock, keeper
        log.info(
            "leading the database (epoch %d; %d other server sessions ended)",
            epoch,
            ended,
            extra={"epoch": epoch},
        )


async def stand_by(
    leadership: Leadership,
    start: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    preload: Callable[[], object] | None = None,
) -> None:
    """A standby's life: wait for the lock (``LockWaiter``, on a thread) until it is this
    server's (or ``stop``), then ``start`` the control plane on it. Meanwhile, every
    ``RETRY_S``, look at the leader (and end a stale leader's session: then the lock is
    granted; a wait whose session ended asks again after ``REWAIT_GRACE_S``, so that the
    leader keeps its lock across a database restart), every ``HEARTBEAT_S`` write this
    server's row among the peers (``Leadership.beat``), and every ``PRELOAD_S``
    ``preload`` (on a thread): read ahead what the start
    will read, so the takeover decodes only what changed since
    (``hal.state.codec.JobRowMemo``). How long the takeover took, from the lock to a
    loaded server, is logged."""
    log.info("standing by: another HAL server leads this database")
    waiter = LockWaiter(leadership.store)
    waiting: asyncio.Future[ServerLock | None] | None = None
    stopping = asyncio.ensure_future(stop.wait())
    preloaded = looked = beaten = -PRELOAD_S
    failed: float | None = None  # when the last wait ended without the lock
    beating: asyncio.Future[None] | None = None  # the heartbeat under way (held)
    try:
        while not stop.is_set():
            if waiting is None and (failed is None or time.monotonic() - failed >= RETRY_S):
                # after a session that ended, the leader's lock first (``REWAIT_GRACE_S``):
                # the grace is before the ask; a lock freed later is granted at once
                grace = 0.0 if failed is None else REWAIT_GRACE_S
                waiting = asyncio.ensure_future(asyncio.to_thread(waiter.wait, grace))
            if waiting is not None and waiting.done():
                lock, waiting = waiting.result(), None
                if lock is not None:
                    leads = await asyncio.to_thread(leadership.lead_on, lock)
                    if leads:
                        granted = time.monotonic() - waiter.granted_at
                        leadership.lead_timings["granted_to_lead"] = round(granted, 3)
                        break
                failed = time.monotonic()  # (a session ended: wait again in a moment)
                continue
            if time.monotonic() - looked >= RETRY_S:
                looked = time.monotonic()
                await asyncio.to_thread(leadership.look)
            if time.monotonic() - beaten >= HEARTBEAT_S and (beating is None or beating.done()):
                # this server's row among the peers: not waited for (a lock granted now
                # is taken up at once, as without it)
                beaten = time.monotonic()
                beating = asyncio.ensure_future(asyncio.to_thread(leadership.beat_standby))
            if preload is not None and time.monotonic() - preloaded >= PRELOAD_S:
                preloaded = time.monotonic()
                try:
                    await asyncio.to_thread(preload)
                except DBAPIError as err:  # (a database no leader has migrated yet)
                    log.debug("nothing preloaded: %s", err)
            if waiting is None or not waiting.done():
                pending = [f for f in (waiting, stopping) if f is not None]
                await asyncio.wait(pending, timeout=RETRY_S, return_when=FIRST_COMPLETED)
        else:
            return
    finally:
        stopping.cancel()
        if waiting is not None:  # stopped while waiting: the wait ends, its lock let go
            waiter.cancel()
            with contextlib.suppress(Exception):
                late = await asyncio.wait_for(asyncio.shield(waiting), RETRY_S * 5)
                if late is not None:
                    late.release()
    took = time.monotonic()
    await start()
    log.warning(
        "took the lead: serving as the leader %.2f s after taking the lock",
        time.monotonic() - took,
    )
