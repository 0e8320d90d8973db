"""EASY's promises, checked on a finished replay from its starts and ends alone.

The classic, count-based rules (Mu'alem and Feitelson, 2001), with the head the first
job waiting in submission order and every running job planned to end at its start plus
its planned run time:

* **the head is not delayed**: no job starts later than the shadow time it was given
  when it first became the head (the first instant at which, with the running jobs
  ending as planned, enough processors are free for it);
* **nothing that could be backfilled is left waiting**: after the starts of every
  instant, no waiting job fits the free processors while either ending (by its plan) by
  the head's shadow time or fitting the processors the head leaves spare then.

Meaningful for one partition of one-core nodes (one processor, one node: HAL's
node-level reservations are the count-based ones there), FCFS priority and plans fixed
at start (``user``: the request; ``perfect``: the run time). Written to tell a
scheduler defect from a property of the policy in a replay that looks wrong
(docs/benchmarks.md, "HPC2N: the clairvoyant's loss is EASY's, not a defect").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from hal.sim.engine import JobOutcome
from hal.sim.workload import TraceJob


@dataclass(frozen=True, slots=True)
class Ran:
    """One job of a replay: ``planned`` is the run time its plans used."""

    id: int
    submit: float
    start: float
    end: float
    procs: int
    planned: float


@dataclass(slots=True)
class Audit:
    heads: int = 0  # jobs that were the head at some instant with the machine short
    instants: int = 0  # instants checked with a job waiting
    late_heads: list[tuple[int, float, float]] = field(default_factory=list)  # id, shadow, start
    missed: list[tuple[float, int, int]] = field(default_factory=list)  # instant, job, head

    @property
    def clean(self) -> bool:
        return not self.late_heads and not self.missed


def from_outcomes(outcomes: Iterable[JobOutcome], plan: Callable[[TraceJob], float]) -> list[Ran]:
    """The jobs of a ``SimRun`` that ran, planned with ``plan`` (e.g. the request)."""
    return [
        Ran(o.job.id, o.job.submit, o.start, o.end, o.job.procs, plan(o.job))
        for o in outcomes
        if o.start == o.start  # not NaN: it ran
    ]


def _shadow(need: int, free: int, planned_ends: list[tuple[float, int]]) -> tuple[float, int]:
    """When ``need`` processors are first free, and how many more than that are then."""
    for end, procs in sorted(planned_ends):
        free += procs
        if free >= need:
            return end, free - need
    return float("inf"), 0


def audit_easy(jobs: Sequence[Ran], procs: int) -> Audit:
    """Checks the two promises at every instant where a job is submitted, starts or ends."""
    by_time: dict[float, list[tuple[int, Ran]]] = {}
    for j in jobs:  # at one instant: ends (0), then submits (1), then starts (2)
        by_time.setdefault(j.end, []).append((0, j))
        by_time.setdefault(j.submit, []).append((1, j))
        by_time.setdefault(j.start, []).append((2, j))
    audit = Audit()
    running: dict[int, Ran] = {}
    waiting: dict[int, Ran] = {}  # insertion order is submission order (ties: by id)
    first_shadow: dict[int, float] = {}
    busy = 0
    for t in sorted(by_time):
        for kind, j in sorted(by_time[t], key=lambda e: (e[0], e[1].submit, e[1].id)):
            if kind == 0 and j.id in running:
                del running[j.id]
                busy -= j.procs
            elif kind == 1:
                waiting[j.id] = j
            elif kind == 2:
                waiting.pop(j.id, None)
                running[j.id] = j
                busy += j.procs
        if not waiting:
            continue
        audit.instants += 1
        free = procs - busy
        head = next(iter(waiting.values()))
        if head.procs <= free:  # the head fits and was not started: a delayed head
            audit.missed.append((t, head.id, head.id))
            continue
        ends = [(r.start + r.planned, r.procs) for r in running.values()]
        shadow, extra = _shadow(head.procs, free, ends)
        if head.id not in first_shadow:
            first_shadow[head.id] = shadow
        for j in waiting.values():
            if j is not head and j.procs <= free and (t + j.planned <= shadow or j.procs <= extra):
                audit.missed.append((t, j.id, head.id))
                break
    audit.heads = len(first_shadow)
    by_id = {j.id: j for j in jobs}
    for jid, shadow in first_shadow.items():
        if by_id[jid].start > shadow:
            audit.late_heads.append((jid, shadow, by_id[jid].start))
    return audit
