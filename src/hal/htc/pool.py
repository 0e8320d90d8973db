"""Planning the worker pool: which sessions get new workers and which workers go.

``plan_pool`` is pure (sessions and a clock value in, a ``PoolPlan`` out); the broker
carries the plan out (launching jobs through the control plane, draining workers).

- A session's *held* workers are the ones it can count on: pending jobs, loading and
  ready workers. Draining workers and workers past their lease are not held, so the
  session gets a replacement while they finish.
- Launching is immediate up to the target (``fairshare.allocate``).
- Releasing waits on ``ReleasePolicy``; pending jobs are cancelled before warm workers
  are drained, and among warm workers the least loaded go first.
- Leases: a worker job is recycled after ``worker_lease_seconds`` so that the batch
  queue gets a turn at its CPUs (no starvation of batch by a session that never ends).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from hal.htc import protocol as p
from hal.htc.fairshare import ReleasePolicy, SessionDemand, allocate
from hal.htc.rest import WorkerLaunch
from hal.htc.session import Session, Worker

MAX_LAUNCHES_PER_ROUND = 64  # a huge max_workers must not submit thousands of jobs at once


@dataclass(slots=True)
class PoolPlan:
    targets: dict[str, int] = field(default_factory=dict)
    launch: dict[str, int] = field(default_factory=dict)  # session -> new workers
    release: list[Worker] = field(default_factory=list)


def held(session: Session, now: float) -> list[Worker]:
    lease = session.options.worker_lease_seconds
    return [
        w
        for w in session.workers.values()
        if w.state in ("pending", "loading") or (w.state == "ready" and now - w.ready_at < lease)
    ]


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
        mine = held(s, now)
        # Leased-out ready workers are drained (a replacement is launched below).
        lease = s.options.worker_lease_seconds
        plan.release += [
            w for w in s.workers.values() if w.state == "ready" and now - w.ready_at >= lease
        ]
        if target > len(mine):
            n = min(target - len(mine), budget)
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
            order = sorted(
                mine,
                key=lambda w: (w.state != "pending", w.state != "loading", s.book.load(w.job_id)),
            )
            plan.release += order[:n]
    return plan


MAX_START_FAILURES = 3
DRAIN_MARGIN_S = 300  # a worker job's time limit past its lease (``worker_time_limit``)


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
    """A worker job's time limit: its lease plus a margin to drain. The agent enforces
    it, so a worker that hangs is still reclaimed (and a task longer than it is killed
    with its worker: ``Broker.worker_gone`` says so)."""
    return int(lease_seconds + DRAIN_MARGIN_S)
