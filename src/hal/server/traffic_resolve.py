"""``EndpointIndex``: which job owns the far end of a TCP connection an agent reported.

An agent reports each of its running jobs' connections as (local endpoint, remote
endpoint, bytes) and the endpoints the job listens on (``hal.wire.agent.JobTraffic``).
The far end of job A's connection (local ``L``, remote ``R``) belongs to:

1. the job that reported the same connection from the other side: a flow whose local
   endpoint is ``R`` and whose remote is ``L`` (the *reverse flow*: it names the client
   side of a connection, whose port is an ephemeral one no job listens on);
2. else the job that listens on ``R``: on that address and port, or on the wildcard
   address (``0.0.0.0``, ``::``) and that port of a node known to have ``R``'s address
   (a node's addresses are learned from the local ends of its jobs' connections and
   listeners), or of any node when ``R`` is a loopback address.

Everything is keyed by (address, port) across the whole cluster, not by node: nodes
may share addresses (local agents on one machine all have 127.0.0.1 and the host's
address), and the kernel does not let two sockets on one host listen on the same
address and port, so such nodes never claim one endpoint twice. Several claims come
from separate hosts that each have the address (127.0.0.1 everywhere): the claim on the
reporting job's own node wins, and one job claiming it from several nodes is that job.
Otherwise the connection is *ambiguous*: it makes no edge and is counted
(``ambiguous``). One case resolves wrongly: a loopback connection to a process outside
HAL on the reporting job's host, while a HAL job on another host listens on the same
loopback address and port, is taken as traffic to that job.

A connection whose far end nobody claims yet (the peer's agent has not reported since
the connection opened) waits (``pending``) until a report claims its remote endpoint,
for as long as index entries live (``ttl``); then it is dropped and counted
(``unresolved``: peers outside HAL, or unmeasured). An entry lives ``ttl`` after the
report that made it (``max(MIN_TTL_S, 3 * interval_seconds)``), or until its job ends.

Bounded: at most ``MAX_ENTRIES`` connections and listeners indexed and ``MAX_PENDING``
flows waiting; past them new ones are not indexed (``overflow`` counts them).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Container, Iterable
from functools import lru_cache
from typing import NamedTuple, TypeVar

from hal.wire.agent import Endpoint, JobTraffic

MIN_TTL_S = 60.0
MAX_ENTRIES = 1_000_000
MAX_PENDING = 100_000

Key = tuple[str, int]  # (address, port), the address normalised (``key``)
T = TypeVar("T")


class Owner(NamedTuple):
    """A job as seen from one of its nodes (a named tuple: hashed at every lookup)."""

    job_id: int
    node: str


class Flow(NamedTuple):
    """One connection's bytes sent by ``owner`` over ``interval_s`` before ``seen`` (a
    named tuple: an agent's sync may carry thousands, and a frozen dataclass costs about
    twice as much to make)."""

    owner: Owner
    local: Key
    remote: Key
    bytes_sent: int
    interval_s: float
    seen: float


class Ambiguous:
    """Several jobs claim the far end (``EndpointIndex.resolve``)."""


AMBIGUOUS = Ambiguous()


@lru_cache(maxsize=65_536)
def _address(text: str) -> tuple[str, bool, bool]:
    """(normal form, loopback, wildcard) of an address as an agent wrote it: an
    IPv4-mapped IPv6 address is its IPv4 one; text that is no address is kept as is."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text, False, False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), ip.is_loopback, ip.is_unspecified


def key(endpoint: Endpoint) -> Key:
    return _address(endpoint.address)[0], endpoint.port


def is_loopback(address: str) -> bool:
    return _address(address)[1]


class EndpointIndex:
    def __init__(self) -> None:
        # owner → when the entry expires
        self._listening: dict[Key, dict[Owner, float]] = {}
        self._wildcard: dict[int, dict[Owner, float]] = {}  # by port
        self._connections: dict[tuple[Key, Key], dict[Owner, float]] = {}  # (local, remote)
        self._addresses: dict[str, dict[str, float]] = {}  # node → its addresses
        self._pending: dict[Key, list[Flow]] = {}  # waiting flows by their remote end
        self._entries = 0
        self.pending = 0
        self.ambiguous = 0  # flows several jobs claimed
        self.unresolved = 0  # flows dropped after waiting ``ttl`` for a claim
        self.overflow = 0  # entries or flows not kept: the bounds were reached

    # -- learning ------------------------------------------------------------------------
    def learn(self, owner: Owner, traffic: JobTraffic, now: float) -> list[Flow]:
        """Index ``traffic``'s listeners and connections; return its flows to resolve."""
        expires = now + ttl(traffic.interval_seconds)
        node_addresses = self._addresses.setdefault(owner.node, {})
        for endpoint in traffic.listening:
            address, loopback, wildcard = _address(endpoint.address)
            if wildcard:
                self._claim(self._wildcard, endpoint.port, owner, expires)
            else:
                self._claim(self._listening, (address, endpoint.port), owner, expires)
                if not loopback:
                    node_addresses[address] = expires
        flows = []
        interval = traffic.interval_seconds
        connections = self._connections
        for f in traffic.flows:
            address, loopback, wildcard = _address(f.local.address)
            local, remote = (address, f.local.port), key(f.remote)
            owners = connections.get((local, remote))
            if owners is not None:  # (``_claim``, inlined: the hot path of a sync)
                owners[owner] = expires
            else:
                self._claim(connections, (local, remote), owner, expires)
            if not loopback and not wildcard:
                node_addresses[address] = expires
            flows.append(Flow(owner, local, remote, f.bytes_sent, interval, now))
        return flows

    def _claim(
        self, table: dict[T, dict[Owner, float]], k: T, owner: Owner, expires: float
    ) -> None:
        owners = table.get(k)
        if owners is None:
            if self._entries >= MAX_ENTRIES:
                self.overflow += 1
                return
            owners = table[k] = {}
            self._entries += 1
        owners[owner] = expires

    # -- resolving -----------------------------------------------------------------------
    def resolve(self, flow: Flow, now: float) -> Owner | Ambiguous | None:
        """The owner of ``flow``'s far end (the module's docstring); None: unknown yet."""
        claims = _live(self._connections.get((flow.remote, flow.local)), now)
        if not claims:
            claims = _live(self._listening.get(flow.remote), now)
            address, port = flow.remote
            loopback = is_loopback(address)
            for owner in _live(self._wildcard.get(port), now):
                if loopback or self._addresses.get(owner.node, {}).get(address, 0.0) >= now:
                    claims.append(owner)
        if not claims:
            return None
        return _pick(claims, flow.owner.node)

    def wait(self, flow: Flow) -> None:
        """Keep ``flow`` until a report claims its far end (``retry``)."""
        if self.pending >= MAX_PENDING:
            self.overflow += 1
            return
        self._pending.setdefault(flow.remote, []).append(flow)
        self.pending += 1

    def waiting_for(self, claimed: Iterable[Key]) -> list[Flow]:
        """The waiting flows whose far end is one of ``claimed`` (taken out: the caller
        resolves them, or hands them back to ``wait``)."""
        found: list[Flow] = []
        for k in claimed:
            flows = self._pending.pop(k, None)
            if flows:
                found += flows
        self.pending -= len(found)
        return found

    def expire(self, now: float, active: Container[int]) -> None:
        """Forget entries past their time or of jobs not running; drop waiting flows
        that waited past their time (``unresolved``)."""
        self._entries -= _expire(self._listening, now, active)
        self._entries -= _expire(self._wildcard, now, active)
        self._entries -= _expire(self._connections, now, active)
        for node in list(self._addresses):
            addresses = self._addresses[node]
            for address in [a for a, t in addresses.items() if t < now]:
                del addresses[address]
            if not addresses:
                del self._addresses[node]
        for k in list(self._pending):
            kept = [f for f in self._pending[k] if f.seen + ttl(f.interval_s) >= now]
            self.unresolved += len(self._pending[k]) - len(kept)
            self.pending -= len(self._pending[k]) - len(kept)
            if kept:
                self._pending[k] = kept
            else:
                del self._pending[k]

    @property
    def entries(self) -> int:
        return self._entries


def ttl(interval_s: float) -> float:
    """How long a report's entries live (and its unclaimed flows wait)."""
    return max(MIN_TTL_S, 3 * interval_s)


def _expire(table: dict[T, dict[Owner, float]], now: float, active: Container[int]) -> int:
    """Drop ``table``'s claims past their time or of jobs not running; the number of
    keys left without one (dropped too)."""
    emptied = 0
    for k in list(table):
        owners = table[k]
        for owner in [o for o, t in owners.items() if t < now or o.job_id not in active]:
            del owners[owner]
        if not owners:
            del table[k]
            emptied += 1
    return emptied


def _live(owners: dict[Owner, float] | None, now: float) -> list[Owner]:
    return [o for o, t in owners.items() if t >= now] if owners else []


def _pick(claims: list[Owner], node: str) -> Owner | Ambiguous:
    if len(claims) == 1:
        return claims[0]
    here = [c for c in claims if c.node == node]
    if len(here) == 1:
        return here[0]
    if len({c.job_id for c in claims}) == 1:  # one job, seen from several of its nodes
        return min(claims, key=lambda c: c.node)
    return AMBIGUOUS
