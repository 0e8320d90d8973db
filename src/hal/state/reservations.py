"""Advance reservations on the server: create, update, delete, and the submit check.

Reservations live in ``Cluster.reservations`` (name → ``hal.core.reservation.Reservation``),
loaded from the store at start and written through ``Cluster.change`` with a
``reservation.created|updated|deleted|ended`` event (one-off ones are purged once over,
``end_expired``), so a change is durable before it is seen
and wakes the scheduler (which reads them from ``ClusterSnapshot.reservations``).

Checks on create and update (Slurm's, with messages that say what to do):

* only an administrator may create, change or delete a reservation;
* the window: ``end > start``, not over already, no longer than the period when
  recurring (``HOURLY``/``DAILY``/``WEEKLY``);
* the nodes: ``Nodes=`` must name known nodes; ``NodeCnt=N`` picks the first N nodes (in
  name order, of ``PartitionName`` when given) that are free for the window;
* at least one of ``Users=`` and ``Accounts=``;
* no other reservation holds one of its nodes at the same time, unless one of the two
  has ``OVERLAP``;
* no running job holds one of its nodes past its start (by its time limit; unlimited
  jobs for ever), unless ``IGNORE_JOBS``.

Slurm's implied flags are kept here: ``SPEC_NODES`` when the nodes were named, with
``ALL_NODES`` for ``Nodes=ALL``. A reservation that an unfinished job uses cannot be
deleted (Slurm's "Requested reservation is in use"); one with ``PURGE_COMP`` is deleted
once it has been idle that long (``end_expired``).
"""

from __future__ import annotations

import math
import pwd
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hal.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from hal.core.job import Job, JobSpec
from hal.core.priority import ROOT_ACCOUNT
from hal.core.reservation import (
    IMPLIED,
    Reservation,
    ReservationFlag,
    judged_account,
    windows_clash,
)
from hal.core.states import JobState, PendingReason
from hal.state.store import EventRow, Transaction

if TYPE_CHECKING:
    from hal.state.cluster import Caller, Cluster
    from hal.state.mirror import Mirror

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
CLASH_HORIZON_S = 366 * 86_400.0  # recurring reservations are compared a year ahead
ALL = "ALL"  # Nodes=ALL: every node of the cluster
_SUFFIX = re.compile(r"_(\d+)$")


@dataclass(frozen=True, slots=True)
class ReservationRequest:
    """Fields of a create or an update; ``None``: not given (update: keep). A create
    without a name gets Slurm's ``<first account, else first user>_<n>``; ``nodes``
    ``("ALL",)`` is every node."""

    name: str
    start: float | None = None
    end: float | None = None
    duration: float | None = None
    nodes: tuple[str, ...] | None = None
    node_count: int | None = None
    users: tuple[str, ...] | None = None
    accounts: tuple[str, ...] | None = None
    flags: frozenset[ReservationFlag] | None = None
    partition: str | None = None
    purge_after: float | None = None  # with flags: PURGE_COMP's seconds (0: none)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _admin(caller: Caller, verb: str) -> None:
    if not caller.admin:
        raise PermissionDenied(
            f"user {caller.name} may not {verb} reservations: only an administrator can "
            "(ask one, or use a token of an admin user)"
        )


def current(cluster: Cluster) -> list[Reservation]:
    """The reservations not yet over, each with its window in force now (or next), by
    name: what ``show reservation`` lists and the scheduler sees."""
    now = cluster.clock.now()
    return [r.at(now) for _, r in sorted(cluster.reservations.items()) if not r.ended(now)]


def get(cluster: Cluster, name: str) -> Reservation:
    r = cluster.reservations.get(name)
    if r is None or r.ended(cluster.clock.now()):
        raise NotFound(f"Reservation {name} not found; `scontrol show reservation` lists them")
    return r.at(cluster.clock.now())


async def create(cluster: Cluster, caller: Caller, req: ReservationRequest) -> Reservation:
    _admin(caller, "create")
    if not req.name:
        req = replace(req, name=_generated_name(cluster, req))
    if not NAME_PATTERN.match(req.name):
        raise InvalidRequest(
            f"invalid reservation name {req.name!r}: use 1-128 letters, digits, '_', '.', '-'",
            field="name",
        )
    now = cluster.clock.now()
    old = cluster.reservations.get(req.name)
    if old is not None and not old.ended(now):
        raise Conflict(
            f"reservation {req.name} exists; change it with `scontrol update "
            f"ReservationName={req.name} ...` or delete it first"
        )
    start = now if req.start is None else req.start
    end = _end(start, req.end, req.duration)
    nodes, implied = _named_nodes(cluster, req.nodes)
    base = Reservation(
        name=req.name,
        start=start,
        end=end,
        nodes=(),
        users=req.users or (),
        accounts=req.accounts or (),
        flags=(req.flags or frozenset()) | implied,
        partition=req.partition or "",
        purge_after=req.purge_after or 0.0,
    )
    await _check_who(cluster, base)
    r = _validated(cluster, base, nodes, req.node_count, now)
    await _save(cluster, r, "reservation.created")
    return r


async def update(cluster: Cluster, caller: Caller, req: ReservationRequest) -> Reservation:
    _admin(caller, "update")
    now = cluster.clock.now()
    old = get(cluster, req.name)
    start = old.start if req.start is None else req.start
    if req.end is None and req.duration is None:
        end = start + old.duration if req.start is not None else old.end
    else:
        end = _end(start, req.end, req.duration)
    implied = old.flags & IMPLIED
    nodes: Sequence[str] | None = old.nodes
    if req.nodes is not None or req.node_count is not None:
        nodes, implied = _named_nodes(cluster, req.nodes)
    flags, purge = old.flags - IMPLIED, old.purge_after
    if req.flags is not None:
        flags, purge = req.flags, req.purge_after or 0.0
    changed = replace(
        old,
        start=start,
        end=end,
        users=old.users if req.users is None else req.users,
        accounts=old.accounts if req.accounts is None else req.accounts,
        flags=flags | implied,
        partition=old.partition if req.partition is None else req.partition,
        purge_after=purge,
    )
    await _check_who(cluster, changed)
    r = _validated(cluster, changed, nodes, req.node_count, now)
    await _save(cluster, r, "reservation.updated")
    return r


async def delete(cluster: Cluster, caller: Caller, name: str) -> None:
    """Delete reservation ``name``, unless an unfinished job (pending or running) uses
    it: Slurm 22.05.8 refuses that ("Requested reservation is in use"), so a mistaken
    delete strands no job. Once its jobs have ended it may be deleted."""
    _admin(caller, "delete")
    get(cluster, name)
    users = sorted(j.id for j in cluster.unfinished.values() if j.spec.reservation == name)
    if users:
        shown = ", ".join(str(i) for i in users[:5]) + (", ..." if len(users) > 5 else "")
        raise Conflict(
            f"Requested reservation is in use: job{'s' if len(users) > 1 else ''} {shown} "
            f"(pending or running) use {name}; cancel them, move pending ones (scontrol "
            "update JobId=ID Reservation=OTHER) or wait for them to end, then delete it"
        )
    await _drop(cluster, name, "reservation.deleted", hold=True)


async def end_expired(cluster: Cluster) -> list[str]:
    """Purge the one-off reservations whose window is over, as slurmctld does: their
    unfinished jobs lose them, and pending ones are held with reason
    ``ReservationDeleted`` (they waited for ever) unless the reservation has
    ``NO_HOLD_JOBS_AFTER_END``, whose jobs may then run anywhere. Also deletes the
    ``PURGE_COMP`` ones idle for their time (``_idle``). Returns their names."""
    now = cluster.clock.now()
    ended = [r for r in cluster.reservations.values() if r.ended(now)]
    for r in ended:
        hold = ReservationFlag.NO_HOLD_JOBS_AFTER_END not in r.flags
        await _drop(cluster, r.name, "reservation.ended", hold=hold)
    idle = [r for r in cluster.reservations.values() if r.purge_after and _idle(cluster, r, now)]
    for r in idle:
        await _drop(cluster, r.name, "reservation.deleted", hold=True)
    return [r.name for r in ended + idle]


def _idle(cluster: Cluster, r: Reservation, now: float) -> bool:
    """``PURGE_COMP``: no unfinished job uses ``r``, and none has for ``r.purge_after``
    seconds, counted from the start of its window in force (an idle reservation that
    has started is purged that long after its start, as slurmctld) or from the end of
    its last job (jobs forgotten after MinJobAge count as long ended)."""
    start, _ = r.window_at(now)
    if start > now:
        return False
    since = start
    for job in cluster.jobs.values():
        if job.spec.reservation != r.name:
            continue
        if not job.state.is_terminal:
            return False
        if job.end_time is not None:
            since = max(since, job.end_time)
    return now - since >= r.purge_after


async def _drop(cluster: Cluster, name: str, kind: str, *, hold: bool) -> None:
    """Remove reservation ``name`` (event ``kind``) and take it from its unfinished jobs."""
    now = cluster.clock.now()
    async with cluster.change() as change:
        jobs = [
            _orphaned(j, hold=hold)
            for j in cluster.unfinished.values()
            if j.spec.reservation == name
        ]
        events = [EventRow(now, kind, data={"name": name})]
        events += [
            EventRow(now, "job.held", job_id=j.id, state=j.state.value)
            for j in jobs
            if j.reason is PendingReason.RESERVATION_DELETED
        ]

        def forget(tx: Transaction) -> None:
            tx.delete_reservation(name)

        await change.commit(jobs, events, extra=forget)
        cluster.reservations.pop(name, None)


def _orphaned(job: Job, *, hold: bool) -> Job:
    """``job`` without its reservation; with ``hold``, held if pending and not held by
    an administrator (whose hold and reason stay)."""
    job = job.evolve(spec=job.spec.with_changes(reservation=""))
    if job.state is not JobState.PENDING or job.held_by_admin:
        return job
    if not hold:
        return job  # free to run anywhere: the next pass gives it its reason
    return job.evolve(
        spec=job.spec.with_changes(hold=True), reason=PendingReason.RESERVATION_DELETED
    )


def check_job(cluster: Mirror, spec: JobSpec, limit: int, where: str = "") -> None:
    """At submit: ``--reservation`` names a reservation the job's user (and account, or
    the user's default one) may use, and the job has a time limit (``limit``, resolved;
    0: unlimited) that fits in its window."""
    name = spec.reservation
    if not name:
        return
    now = cluster.clock.now()
    r = cluster.reservations.get(name)
    if r is None or r.ended(now):
        raise InvalidRequest(
            f"Requested reservation is invalid: {name!r} does not exist "
            "(`scontrol show reservation` lists them)",
            field=where + "reservation",
        )
    defaults = cluster.config.priority.default_accounts
    account = judged_account(spec.account, spec.user, defaults)
    if not r.allows(spec.user, account):
        raise PermissionDenied(
            f"Access denied to requested reservation {name}: it is for users "
            f"{','.join(r.users) or '(any)'} and accounts {','.join(r.accounts) or '(any)'}"
        )
    # a one-off reservation has only what is left of its window (a recurring one's next
    # window is whole): a longer limit would never start
    room = r.duration if r.period else r.end - max(now, r.start)
    if limit <= 0 or limit > room:
        most = int(room)
        raise InvalidRequest(
            f"a job in reservation {name} needs a time limit that fits in it: give "
            f"--time of at most {most // 60} minutes ({most}s)"
            + ("" if room == r.duration else f"; it ends at {_when(r.end)}"),
            field=where + "time_limit_seconds",
        )


def placement_conflict(cluster: Cluster, job: Job, nodes: Sequence[str], now: float) -> str | None:
    """At apply time (a reservation may have been created or changed since the pass
    read the cluster): why ``job`` may not start on ``nodes`` now, or None. The rule is
    the reservation plugin's: a reservation job only inside its window on its nodes,
    any other job off nodes whose reservation window meets its run."""
    end = now + job.time_limit_s if job.time_limit_s else math.inf
    name = job.spec.reservation
    for r in cluster.reservations.values():
        if r.ended(now):
            if r.name == name:  # its window closed since the pass planned the job
                return f"reservation {r.name} has ended"
            continue
        if r.name == name:
            start, stop = r.window_at(now)
            if not start <= now or end > stop or not set(nodes) <= set(r.nodes):
                return f"outside reservation {r.name}"
        elif not name and r.overlaps(now, end) and set(nodes) & set(r.nodes):
            return f"nodes reserved by {r.name}"
    if name and name not in cluster.reservations:
        return f"reservation {name} no longer exists"
    return None


# -- checks ------------------------------------------------------------------------


def _generated_name(cluster: Cluster, req: ReservationRequest) -> str:
    """Slurm's name for an unnamed reservation: its first account, else its first user,
    ``_`` and a number higher than any other reservation's (``root_7``; slurmctld counts
    every reservation it made, which HAL does not keep)."""
    key = (req.accounts or req.users or ("resv",))[0].lstrip("-")
    found = (_SUFFIX.search(name) for name in cluster.reservations)
    return f"{key}_{max((int(m.group(1)) for m in found if m), default=0) + 1}"


def _named_nodes(
    cluster: Cluster, nodes: Sequence[str] | None
) -> tuple[Sequence[str] | None, frozenset[ReservationFlag]]:
    """The nodes asked for (``ALL``: every node) and the flags that implies."""
    if nodes is None:
        return None, frozenset()
    if [n.upper() for n in nodes] == [ALL] and ALL not in cluster.nodes:
        return sorted(cluster.nodes), frozenset(
            {ReservationFlag.SPEC_NODES, ReservationFlag.ALL_NODES}
        )
    return nodes, frozenset({ReservationFlag.SPEC_NODES})


def _end(start: float, end: float | None, duration: float | None) -> float:
    if end is not None and duration is not None:
        raise InvalidRequest("give EndTime or Duration, not both", field="duration")
    if end is None and duration is None:
        raise InvalidRequest(
            "a reservation needs an end: give Duration= (e.g. 2:00:00) or EndTime=",
            field="duration",
        )
    if duration is not None:
        if duration <= 0:
            raise InvalidRequest(
                "Duration must be positive (e.g. Duration=1:00:00)", field="duration"
            )
        return start + duration
    assert end is not None
    return end


async def _check_who(cluster: Cluster, r: Reservation) -> None:
    """Refuse Users= naming no HAL user, ``[[users]]`` entry or account of this host, and
    Accounts= naming no configured account (with
    ``[[accounts]]``), as Slurm refuses them: a typo would keep the nodes from everyone
    for the whole window."""
    policy = cluster.config.priority
    if policy.accounts:
        known = {a.name for a in policy.accounts} | {ROOT_ACCOUNT}
        for account in r.accounts:
            if account.lstrip("-") not in known:
                raise InvalidRequest(
                    f"Invalid account or account/partition combination specified: "
                    f"{account!r} is no account (known: {', '.join(sorted(known))})",
                    field="accounts",
                )
    if not r.users:
        return
    stored = await cluster.db(cluster.store.users)
    users = {u.name for u in stored if not u.agent} | {u.user for u in policy.users}
    for user in r.users:
        if user.lstrip("-") not in users and not _unix_user(user.lstrip("-")):
            raise InvalidRequest(
                f"Invalid user id: {user!r} is no user of this cluster (`hal user list` "
                f"lists them; `hal user add {user.lstrip('-')}` adds one)",
                field="users",
            )


def _unix_user(name: str) -> bool:
    """An account of the server's host (Slurm checks its users against the passwd
    database; a HAL job runs as the account of its user's name)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _validated(
    cluster: Cluster,
    r: Reservation,
    nodes: Sequence[str] | None,
    node_count: int | None,
    now: float,
) -> Reservation:
    if r.end <= r.start:
        raise InvalidRequest(
            f"the reservation ends ({_when(r.end)}) before it starts ({_when(r.start)}); "
            "give a later EndTime or a positive Duration",
            field="end_time",
        )
    if r.ended(now):
        raise InvalidRequest(
            f"the reservation would end at {_when(r.end)}, which is in the past",
            field="end_time",
        )
    if r.period and r.duration > r.period:
        raise InvalidRequest(
            f"a recurring reservation may last at most its period ({r.period:g}s); "
            "shorten Duration",
            field="duration",
        )
    if not r.users and not r.accounts:
        raise InvalidRequest(
            "a reservation needs Users= or Accounts= (who may use it)", field="users"
        )
    if r.partition and r.partition not in cluster.partitions:
        raise InvalidRequest(
            f"unknown partition {r.partition!r} (known: {', '.join(sorted(cluster.partitions))})",
            field="partition",
        )
    others = [o for o in cluster.reservations.values() if o.name != r.name and not o.ended(now)]
    if nodes is not None and node_count is not None:
        raise InvalidRequest("give Nodes= or NodeCnt=, not both", field="node_count")
    if node_count is not None:
        return replace(r, nodes=_pick(cluster, r, node_count, others, now))
    if not nodes:
        raise InvalidRequest(
            "a reservation needs nodes: give Nodes=node[1-2] or NodeCnt=N", field="nodes"
        )
    unknown = [n for n in nodes if n not in cluster.nodes]
    if unknown:
        raise InvalidRequest(
            f"unknown node {unknown[0]!r}; `sinfo -N` lists the cluster's nodes", field="nodes"
        )
    r = replace(r, nodes=tuple(sorted(set(nodes))))
    for o in others:
        shared = r.shares_nodes_with(o)
        if shared and not (r.overlap or o.overlap):
            when = windows_clash(r, o, now + CLASH_HORIZON_S)
            if when is not None:
                raise Conflict(
                    f"reservation {o.name} holds {', '.join(shared)} at {_when(when)}; "
                    "choose other nodes or times, or add Flags=OVERLAP"
                )
    if ReservationFlag.IGNORE_JOBS not in r.flags:
        for name in r.nodes:
            job = _busy_past(cluster, name, r)
            if job is not None:
                raise Conflict(
                    f"Requested nodes are busy: node {name} runs job {job}, which may run "
                    "past the reservation's start; pick other nodes, a later StartTime, or "
                    "add Flags=IGNORE_JOBS"
                )
    return r


def _busy_past(cluster: Cluster, node: str, r: Reservation) -> int | None:
    """A running job on ``node``, not of ``r`` itself, whose time limit reaches past
    ``r``'s start (unlimited: always)."""
    usage = cluster.usage.get(node)
    if usage is None:
        return None
    t = r.start
    for job_id in sorted(usage.jobs):
        job = cluster.jobs.get(job_id)
        if job is None or not job.state.is_active or job.spec.reservation == r.name:
            continue
        begun = job.start_time if job.start_time is not None else cluster.clock.now()
        end = begun + job.time_limit_s if job.time_limit_s else math.inf
        if end > t:
            return job_id
    return None


def _pick(
    cluster: Cluster, r: Reservation, count: int, others: list[Reservation], now: float
) -> tuple[str, ...]:
    """``NodeCnt=N``: the first N nodes (by name) free for the reservation's windows."""
    names = sorted(cluster.nodes)
    if r.partition:
        part = cluster.partitions[r.partition]
        names = [n for n in names if part.contains(n)]
    if count <= 0 or count > len(names):
        where = f"partition {r.partition}" if r.partition else "the cluster"
        raise InvalidRequest(
            f"NodeCnt={count} but {where} has {len(names)} nodes; give 1 to {len(names)}",
            field="node_count",
        )
    chosen: list[str] = []
    for name in names:
        probe = replace(r, nodes=(name,))
        clash = any(
            name in o.nodes
            and not (r.overlap or o.overlap)
            and windows_clash(probe, o, now + CLASH_HORIZON_S) is not None
            for o in others
        )
        busy = ReservationFlag.IGNORE_JOBS not in r.flags and _busy_past(cluster, name, probe)
        if not clash and not busy:
            chosen.append(name)
            if len(chosen) == count:
                return tuple(chosen)
    raise Conflict(
        f"only {len(chosen)} of the {count} nodes asked for are free of other reservations "
        "and running jobs for that window; ask for fewer, a later StartTime, or add "
        "Flags=IGNORE_JOBS"
    )


async def _save(cluster: Cluster, r: Reservation, kind: str) -> None:
    event = EventRow(
        cluster.clock.now(),
        kind,
        data={"name": r.name, "start": r.start, "end": r.end, "nodes": list(r.nodes)},
    )
    async with cluster.change() as change:
        await change.commit([], [event], extra=lambda tx: tx.put_reservation(r))
        cluster.reservations[r.name] = r
