"""Planning the worker pool: which sessions get new workers and which workers go.

``plan_pool`` is pure (sessions and a clock value in, a ``PoolPlan`` out); the broker
carries the plan out (launching jobs through the control plane, draining workers).

- Every worker job of a session counts against its ``max_workers`` from its launch until
  the control plane reports it ended (its record's states: ``session.Worker``), so a
  replacement for a draining worker is launched only within that limit.
- A session's *held* workers are those it can count on: all but the draining and
  exiting ones. Launching is immediate up to the target (``fairshare.allocate``).
- Releasing waits on ``ReleasePolicy``; pending jobs are cancelled before warm workers
  are drained, and among warm workers the least loaded go first.
- Leases: a worker job is recycled after ``worker_lease_seconds`` so that the batch
  queue gets a turn at its CPUs (no starvation of batch by a session that never ends).
  Recycling costs a worker start, so it is paced (``recycled``): a worker serves at
  least ``RECYCLE_COST_FACTOR`` times its own start-up time, and a quarter of a
  session's workers (at least one) are recycled at a time, never more than
  ``RECYCLE_DEFER_S`` after their lease.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from hal.htc import protocol as p
from hal.htc.fairshare import ReleasePolicy, SessionDemand, allocate
from hal.htc.rest import WorkerLaunch
from hal.htc.session import Session, Worker

MAX_LAUNCHES_PER_ROUND = 64  # a huge max_workers must not submit thousands of jobs at once
MAX_START_FAILURES = 3
DRAIN_MARGIN_S = 300  # a worker's time to finish its tasks once recycled
# A recycle is put off while it would cost more than a tenth of the time served, or while
# a quarter of the session's workers are starting or ending, but at most this long past
# the lease (the job's time limit has room for it: ``worker_time_limit``).
RECYCLE_DEFER_S = 60
RECYCLE_COST_FACTOR = 10
RECYCLE_SHARE = 4
LEAVING = ("draining", "exiting")


@dataclass(slots=True)
class PoolPlan:
    targets: dict[str, int] = field(default_factory=dict)
    launch: dict[str, int] = field(default_factory=dict)  # session -> new workers
    release: list[Worker] = field(default_factory=list)


def held(session: Session) -> list[Worker]:
    return [w for w in session.workers.values() if w.state not in LEAVING]


def recycled(session: Session, now: float) -> list[Worker]:
    """Ready workers to drain for their lease now, oldest first (``RECYCLE_*``)."""
    lease = session.options.worker_lease_seconds
    latest = lease + RECYCLE_DEFER_S
    due = []
    for w in session.workers.values():
        served = now - w.ready_at
        startup = w.ready_at - w.launched_at if w.launched_at else 0.0
        if w.state == "ready" and served >= min(max(lease, RECYCLE_COST_FACTOR * startup), latest):
            due.append(w)
    due.sort(key=lambda w: w.ready_at)
    changing = sum(1 for w in session.workers.values() if w.state != "ready")
    room = max(1, len(session.workers) // RECYCLE_SHARE) - changing
    return [w for i, w in enumerate(due) if i < room or now - w.ready_at >= latest]


def plan_pool(
    sessions: list[Session], pool_size: int, policy: ReleasePolicy, now: float
) -> PoolPlan:
    live = [s for s in sessions if s.live and s.start_failures < MAX_START_FAILURES]
    demands = [
        SessionDemand(
            session=s.id,
            user=s.user,
            priority=s.options.priority,
            min_workers=s.options.min_workers,
            max_workers=s.options.max_workers,
            demand=0 if s.state == "CLOSED" and not s.book.unfinished else s.book.unfinished,
        )
        for s in live
    ]
    plan = PoolPlan(targets=allocate(demands, pool_size))
    ready = {s.id: sum(1 for w in s.workers.values() if w.state == "ready") for s in live}
    short = {s.id for s in live if ready[s.id] < plan.targets[s.id]}
    budget = MAX_LAUNCHES_PER_ROUND
    for s in live:
        target = plan.targets[s.id]
        leaving = recycled(s, now)  # replaced below, within max_workers
        plan.release += leaving
        mine = [w for w in held(s) if w not in leaving]
        if target > len(mine):
            room = s.options.max_workers - len(s.workers)  # every job not seen ended
            n = min(target - len(mine), room, budget)
            if n > 0:
                plan.launch[s.id] = n
                budget -= n
            policy.forget(s.id)
            continue
        surplus = len(mine) - target
        n = policy.releasable(
            s.id,
            surplus,
            idle=s.book.unfinished == 0,
            others_short=bool(short - {s.id}),
            now=now,
        )
        if n:
            # not serving first (pending, restarting), then loading, then least loaded
            order = sorted(
                mine,
                key=lambda w: (w.state == "ready", w.state == "loading", s.book.load(w.job_id)),
            )
            plan.release += order[:n]
    return plan


def worker_launch(session: Session, broker_address: str) -> WorkerLaunch:
    """The HAL job that runs one warm worker for ``session``."""
    o = session.options
    command = [
        o.python,
        "-m",
        "hal.htc.worker",
        "--broker",
        broker_address,
        "--session",
        session.id,
    ]
    script = "#!/bin/sh\n# HAL HTC service worker\nexec " + shlex.join(command) + "\n"
    return WorkerLaunch(
        session=session.id,
        user=session.user,
        script=script,
        name=f"htc-{session.id}",
        cpus=o.cpus_per_worker,
        memory_bytes=o.memory_per_worker_bytes,
        partition=o.partition,
        workdir=o.workdir,
        environment={**o.environment, p.WORKER_KEY_ENV: session.worker_key},
        output=o.worker_output,
        time_limit_seconds=worker_time_limit(o.worker_lease_seconds),
    )


def worker_time_limit(lease_seconds: float) -> int:
    """A worker job's time limit: its lease, the most its recycle is put off, and a
    margin to drain. The agent enforces it, so a worker that hangs is still reclaimed
    (and a task longer than it is killed with its worker: ``Broker.worker_gone`` says
    so)."""
    return int(lease_seconds + RECYCLE_DEFER_S + DRAIN_MARGIN_S)
