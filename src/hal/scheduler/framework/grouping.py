"""The group-placement seam: jobs the pass does not decide by one cycle of their own.

Most jobs are decided alone: one cycle in the main loop (``main_loop.py``), one
start-now try or one reservation in backfill (``backfill.py``, ``planner.py``). Two kinds
of job are not:

* the components of a heterogeneous job start together or not at all
  (``hetjob.HetGroups``);
* a job naming several partitions (``sbatch -p a,b``) is tried as it would run in each,
  in the order listed, and starts in the first that has room
  (``partition_choice.PartitionLists``).

Each kind is a ``GroupPlacement``. ``Groupings.of(job)`` says which kind (if any)
claims a job, and the pass hands the kind that job at each step: its main-loop verdict
(``decide``), its start-now try or deferral in backfill (``backfill``), its reservation
when backfill makes the deferred ones (``reserve``), its forecast start
(``reservation``). The pass does with what comes back what it does for any job (the
queues it blocks, the hand-over to backfill, pending updates, the plan), so neither
the main loop nor the backfill stage knows either kind by name. A new kind is one more
``GroupPlacement`` and one more entry in ``Groupings``.

Kinds are made once per pass (``Groupings()``): they keep what they decided for a whole
group (the verdicts of a het job's components, decided when the first comes up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from hal.core.job import Allocation, Job
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.interfaces import BackfillPlugin, BackfillPolicy
from hal.scheduler.framework.request import PlacementKey
from hal.scheduler.framework.runtime import FitCache, Framework, Gate, Stage
from hal.scheduler.framework.status import Status

if TYPE_CHECKING:
    from hal.scheduler.framework.planner import Found, Planner


class Decided(NamedTuple):
    """A group placement's main-loop verdict for one job."""

    job: Job  # the job as it starts or waits (``-p a,b``: in the partition the verdict is for)
    status: Status
    stage: Stage
    # placements made by this decision (a whole group's, when its first job came up)
    placed: Sequence[tuple[Job, Allocation]] = ()
    # partitions the job is short of nodes in, besides its own queue: each blocked
    # behind it as its own is (``-p a,b``)
    short: Sequence[str] = ()
    # cycles ran (their Reserve may have changed what PreFilter reads): the main loop's
    # element-group verdicts are stale
    ran: bool = True
    # how the job is named to the jobs queued behind it ("job 7+1 is ahead"; "": its id)
    name: str = ""


class GroupPlacement(Protocol):
    """A kind of job the pass decides otherwise than by one cycle of its own. Each
    method is called only for jobs ``claims`` says are this kind's."""

    @property
    def forecasts(self) -> bool:
        """Whether this kind's jobs left without a start by EASY get a forecast start
        (``reservation``), as a job of its own does (ADR 0018)."""
        ...

    def claims(self, job: Job) -> bool:
        """Whether this kind decides ``job`` (a job backfill plans, a new job a settled
        stage is asked about)."""
        ...

    def members(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of ``jobs`` this kind claims: ``claims`` over the whole queue at
        once, asked once per pass (a comprehension costs half the calls it saves: the
        main loop's per-job overhead is counted in nanoseconds)."""
        ...

    def decide(
        self, framework: Framework, ctx: PassContext, job: Job, gate: Gate, fit_cache: FitCache
    ) -> Decided:
        """The main loop's verdict for ``job``, placed now (``Mode.NOW`` behind
        ``gate``) when it comes up in queue order. Placements go in ``Decided.placed``
        (the table already has them taken out). A kind that decides several jobs at
        once decides them when the first comes up and answers the others from what it
        found then (``ran=False``: no cycle ran for them)."""
        ...

    def hand_over(
        self,
        plugin: BackfillPlugin,
        ctx: PassContext,
        policies: dict[str, BackfillPolicy | None],
        held: Sequence[Job],
    ) -> Sequence[Job]:
        """Before the backfill stage plans ``held`` (the main loop's, in order; some of
        them this kind's): the jobs as the stage should take them (a job held in a
        partition backfill does not plan, as it is in one that it does). May add the
        policies of partitions its jobs name to ``policies``. Called only when the main
        loop held back one of this kind's jobs."""
        ...

    def backfill(self, planner: Planner, job: Job, failed_now: dict[PlacementKey, float]) -> None:
        """``job`` came up in the backfill stage's order: start it now where it delays
        no reservation (``Planner.try_start``, ``start_together``), else defer it for a
        reservation when it is owed one (append ``(self, jobs)`` to
        ``planner.deferred``; ``reserve`` is then called with ``jobs``).
        ``failed_now``: placement key → the earliest end at which a start now failed,
        shared with the stage's own jobs (a start that fails for a key fails for a
        longer run of it too)."""
        ...

    def reserve(self, planner: Planner, jobs: tuple[Job, ...]) -> None:
        """Make the reservation ``backfill`` deferred for ``jobs``, now that the ones
        deferred before it are made (a kind may ask again whether it is still owed:
        ``Planner.owes``): the start becomes each job's expected start
        (``Planner.hold``, ``reserve_together``; ``Planner.reserved_in`` counts it)."""
        ...

    def reservation(self, planner: Planner, job: Job) -> Found | None:
        """Where ``job`` would be reserved now, without reserving it: (start, the job as
        it would run, planned run time, nodes); None when nowhere within the window. For
        a forecast (only when ``forecasts``)."""
        ...


class Groupings:
    """The pass's group placements, in the order they are asked (a het job's component
    naming several partitions is decided as a component), and which of them held jobs
    back in the main loop."""

    __slots__ = ("_held", "kinds")

    def __init__(self, kinds: Sequence[GroupPlacement]) -> None:
        self.kinds = tuple(kinds)
        self._held: set[int] = set()  # positions in ``kinds``

    def of(self, job: Job) -> GroupPlacement | None:
        """The kind that claims ``job``; None for a job decided alone (most)."""
        for kind in self.kinds:
            if kind.claims(job):
                return kind
        return None

    def claimed(self, jobs: Sequence[Job]) -> dict[int, GroupPlacement]:
        """Job id → its kind, for the jobs of ``jobs`` some kind claims (empty in most
        passes); the first kind that claims a job decides it, as in ``of``."""
        found: dict[int, GroupPlacement] = {}
        for kind in reversed(self.kinds):  # (so an earlier kind's claim is the one kept)
            found.update((job.id, kind) for job in kind.members(jobs))
        return found

    def note_held(self, kind: GroupPlacement) -> None:
        """The main loop held back one of ``kind``'s jobs (it goes to backfill)."""
        self._held.add(self.kinds.index(kind))

    def held(self) -> list[GroupPlacement]:
        """The kinds whose jobs the main loop held back, in order."""
        return [kind for i, kind in enumerate(self.kinds) if i in self._held]
