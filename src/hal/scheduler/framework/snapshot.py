"""What the scheduler sees and what it answers: ``ClusterSnapshot`` in, ``Plan`` out.

The snapshot is an immutable picture of the cluster at a store revision. The scheduler never
writes state: it returns a ``Plan`` stamped with the revision it read, and the plan applier
(``hal.state``) re-checks every placement against the latest state before committing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from hal.core.data import DataView
from hal.core.dissonance import DissonanceView
from hal.core.job import Allocation, Job
from hal.core.node import Node, Partition
from hal.core.reservation import Reservation
from hal.core.states import JobState, PendingReason
from hal.core.traffic import TrafficView


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The cluster at ``revision`` as of ``now``.

    ``pending`` holds every PENDING job, ``running`` every job holding resources (RUNNING,
    SUSPENDED, COMPLETING) with its allocation. ``related`` holds, for every job id that a
    pending job's dependency names, that job in its current state (finished ones included);
    an id missing from it is a job the store does not know. ``data`` is the cache's
    contents as last seen (``hal.core.data``; None: no data plane configured), ``traffic``
    who talks to whom as last measured (``hal.core.traffic``; None: not kept),
    ``dissonance`` which classes of work clash and the classes of the running jobs
    (``hal.core.dissonance``; None: not kept).
    """

    revision: int
    now: float
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    pending: tuple[Job, ...]
    running: tuple[Job, ...]
    related: Mapping[int, Job] = field(default_factory=dict)
    data: DataView | None = None
    reservations: tuple[Reservation, ...] = ()  # advance reservations not yet ended
    traffic: TrafficView | None = None
    dissonance: DissonanceView | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Start ``job_id`` now on ``allocation``, in ``partition`` ("": the job's own; a
    job naming several, ``-p a,b``, starts in the one the pass found room in), with
    ``time_limit_s`` as its time limit when backfill lowered it (``--time-min``; None:
    the job's own limit). ``note``: why it got these nodes, when a plugin's choice
    decided them (``keys.PLACEMENT_NOTES``; "" for most jobs)."""

    job_id: int
    allocation: Allocation
    partition: str = ""
    time_limit_s: int | None = None
    note: str = ""


class PendingUpdate(NamedTuple):
    """A pending job's new reason and planner-estimated start (``None`` when unknown).

    A named tuple rather than a frozen dataclass: a pass may make one per pending job
    (all of them on the first pass after a start), and a frozen dataclass sets each
    field through ``object.__setattr__`` (about twice the cost)."""

    job_id: int
    reason: PendingReason
    expected_start: float | None = None


@dataclass(frozen=True, slots=True)
class Termination:
    """End a pending job without running it (e.g. an unsatisfiable dependency with
    ``--kill-on-invalid-dep``)."""

    job_id: int
    state: JobState
    reason: PendingReason


@dataclass(frozen=True, slots=True)
class Preemption:
    """End running job ``job_id`` so that pending job ``by`` can start: ``mode``
    ``requeue`` (back to the queue) or ``cancel`` (ends PREEMPTED), after ``grace_s``
    seconds of notice (Slurm's GraceTime); or ``suspend`` (stopped until its CPUs are
    free again; ``grace_s`` 0)."""

    job_id: int
    by: int
    mode: str
    grace_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Plan:
    """What one pass decided, as plain data: starts, pending updates, terminations and
    preemptions, stamped with the snapshot revision it read."""

    revision: int
    placements: tuple[Placement, ...] = ()
    updates: tuple[PendingUpdate, ...] = ()
    terminations: tuple[Termination, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    # The waiting jobs EASY backfill gave no reservation, whose expected starts (``squeue
    # --start``) the scheduler works out when asked after the plan is applied
    # (``Scheduler.forecast(plan)``): not part of the decisions, and not worth delaying
    # them for (ADR 0018). Empty: nothing to forecast.
    forecasting: tuple[int, ...] = ()
