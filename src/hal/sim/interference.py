"""Interference in the simulator: jobs that share a node slow each other down by a
hidden ground-truth matrix between job classes, and the scheduler learns it from the
slowdowns it observes.

**Classes.** Every job of a workload identity (the trace's user and executable: the job
name the simulator gives it, ``exe<N>``) has one class, drawn once per identity from
``CLASS_SHARES`` with a seeded hash, so resubmissions of one program behave alike, as
they do on a real cluster.

**Ground truth.** ``TRUTH[v][a]`` is how much slower a job of class ``v`` runs while
jobs of class ``a`` hold its whole node; a neighbour holding a share ``s`` of the
node's CPUs counts as ``TRUTH[v][a] ** s``, and the factors of all neighbours multiply.
A job on several nodes runs at the pace of its slowest node (bulk-synchronous). The
factor changes whenever a job starts or ends on one of its nodes: each running job
keeps its remaining solo work, and its end moves with its pace (``started``/``ended``
return the ends that moved).

**What the scheduler sees** (``view``), per ``mode``:

* ``off``: nothing (oblivious packing: the ``dissonance`` plugin skips);
* ``learned``: a ``hal.core.dissonance.DissonanceModel`` trained on the outcome of every
  job that ended (its elapsed time over its solo run time, and its exposure to each
  class: ``Outcome``) and the classes of identities one of whose jobs has run
  ``profile_after_s`` (the agent's first profile);
* ``oracle``: the true matrix and every identity's class from the start.

The truth is not the model's form exactly (the model is log-linear in time-averaged
exposure, the truth multiplies pace changes over a run), as a real cluster's is not.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from hal.core.dissonance import DissonanceModel, DissonanceView, Outcome
from hal.core.job import Allocation, Job
from hal.core.node import Node
from hal.core.profiles import CLASSES, CPU, IO, LIGHT, MEMORY, NETWORK
from hal.core.traffic import identity

MODES = ("off", "learned", "oracle")
# share of workload identities in each class
CLASS_SHARES: Mapping[str, float] = {CPU: 0.35, MEMORY: 0.25, IO: 0.15, NETWORK: 0.10, LIGHT: 0.15}
# victim → aggressor → slowdown beside a node full of the aggressor (hidden from the
# scheduler): memory bandwidth and one disk are the shared resources that hurt most
TRUTH: Mapping[str, Mapping[str, float]] = {
    CPU: {CPU: 1.10, MEMORY: 1.40, IO: 1.05, NETWORK: 1.05, LIGHT: 1.00},
    MEMORY: {CPU: 1.25, MEMORY: 2.00, IO: 1.10, NETWORK: 1.10, LIGHT: 1.02},
    IO: {CPU: 1.05, MEMORY: 1.15, IO: 2.20, NETWORK: 1.10, LIGHT: 1.00},
    NETWORK: {CPU: 1.05, MEMORY: 1.10, IO: 1.10, NETWORK: 1.60, LIGHT: 1.00},
    LIGHT: {CPU: 1.02, MEMORY: 1.10, IO: 1.05, NETWORK: 1.05, LIGHT: 1.00},
}


def class_of(ident: str, seed: int = 1) -> str:
    """The class of workload identity ``ident`` (seeded, stable across runs)."""
    digest = hashlib.blake2b(f"{seed}:{ident}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    for name, share in CLASS_SHARES.items():
        u -= share
        if u < 0:
            return name
    return LIGHT


@dataclass(slots=True)
class _Running:
    ident: str
    cls: str
    start: float
    solo: float  # solo run time
    remaining: float  # solo seconds of work left
    limit_end: float  # killed here
    shares: dict[str, float]  # node → share of its CPUs held
    at: float  # when ``remaining`` and ``exposed`` were last brought up to date
    pace: float = 1.0  # current slowdown (elapsed per solo second)
    exposure: dict[str, float] = field(default_factory=dict)  # current, per class
    exposed: dict[str, float] = field(default_factory=dict)  # ∫ exposure dt, per class


@dataclass
class InterferenceModel:
    nodes: Sequence[Node]
    mode: str = "learned"
    seed: int = 1
    truth: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: TRUTH)
    profile_after_s: float = 60.0
    learner: DissonanceModel = field(default_factory=DissonanceModel)
    # what the replay accumulates
    outcomes: int = 0  # outcomes learnt from
    killed: int = 0  # jobs killed at their limit while slowed
    work_done: dict[int, float] = field(default_factory=dict)  # job → solo seconds done
    slowdown: dict[int, float] = field(default_factory=dict)  # job → elapsed / solo
    _running: dict[int, _Running] = field(default_factory=dict)
    _on: dict[str, set[int]] = field(default_factory=dict)  # node → its jobs
    _cpus: dict[str, int] = field(default_factory=dict)
    _known: dict[str, str] = field(default_factory=dict)  # identity → class (profiled)
    _classes: dict[str, str] = field(default_factory=dict)  # identity → class (truth)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self._cpus = {n.name: max(n.resources.cpus, 1) for n in self.nodes}

    def class_of(self, ident: str) -> str:
        found = self._classes.get(ident)
        if found is None:
            found = self._classes[ident] = class_of(ident, self.seed)
        return found

    # -- what the scheduler sees --------------------------------------------------------

    def view(self, now: float) -> DissonanceView | None:
        if self.mode == "off":
            return None
        job_class: dict[int, str] = {}
        if self.mode == "oracle":
            job_class = {j: r.cls for j, r in self._running.items()}
            return DissonanceView(self.truth, job_class, _AllClasses(self))
        known = self._known
        for job_id, r in self._running.items():
            if now - r.start >= self.profile_after_s:
                job_class[job_id] = known[r.ident] = r.cls
        return DissonanceView(self.learner.matrix(), job_class, dict(known))

    # -- the replay ---------------------------------------------------------------------

    def started(
        self, job: Job, allocation: Allocation, now: float, solo: float
    ) -> list[tuple[int, float]]:
        """Record ``job`` (solo run time ``solo``) on ``allocation``; the new end of
        every job whose pace changed, its own first."""
        spec = job.spec
        ident = identity(spec.user, spec.name, spec.comment)
        shares = {
            name: min(1.0, held.cpus / self._cpus.get(name, 1))
            for name, held in zip(allocation.nodes, allocation.per_node, strict=False)
        }
        limit = now + float(job.time_limit_s) if job.time_limit_s else math.inf
        touched = self._neighbours(job.id, allocation.nodes)
        for other in touched:
            self._advance(self._running[other], now)
        self._running[job.id] = _Running(
            ident, self.class_of(ident), now, solo, solo, limit, shares, now
        )
        for name in allocation.nodes:
            self._on.setdefault(name, set()).add(job.id)
        return [(j, self._repace(j)) for j in (job.id, *touched)]

    def ended(self, job_id: int, now: float) -> list[tuple[int, float]]:
        """``job_id`` ended at ``now``: learn from it, and the new ends of the jobs
        whose pace changed."""
        r = self._running.pop(job_id, None)
        if r is None:
            return []
        self._advance(r, now)
        for name in r.shares:
            self._on.get(name, set()).discard(job_id)
        done = max(r.solo - r.remaining, 0.0)
        self.work_done[job_id] = done
        elapsed = now - r.start
        if r.remaining > 1e-6 and now >= r.limit_end - 1e-6:
            self.killed += 1
        elif r.solo > 0 and elapsed > 0:
            self.slowdown[job_id] = elapsed / r.solo
            if self.mode == "learned":
                exposure = {a: x / elapsed for a, x in r.exposed.items()}
                self.outcomes += self.learner.observe(Outcome(r.cls, exposure, elapsed / r.solo))
        touched = self._neighbours(job_id, tuple(r.shares))
        for other in touched:
            self._advance(self._running[other], now)
        return [(j, self._repace(j)) for j in touched]

    def _neighbours(self, job_id: int, nodes: Sequence[str]) -> list[int]:
        seen: set[int] = set()
        for name in nodes:
            seen |= self._on.get(name, set())
        seen.discard(job_id)
        return sorted(seen)

    def _advance(self, r: _Running, now: float) -> None:
        dt = now - r.at
        if dt > 0:
            r.remaining = max(r.remaining - dt / r.pace, 0.0)
            for a, x in r.exposure.items():
                r.exposed[a] = r.exposed.get(a, 0.0) + x * dt
        r.at = now

    def _repace(self, job_id: int) -> float:
        """The job's pace and exposure from its neighbours now; its end at that pace."""
        r = self._running[job_id]
        truth = self.truth[r.cls]
        pace = 1.0
        exposure: dict[str, float] = {}
        for name in r.shares:
            here = 1.0
            per_class: dict[str, float] = {}
            for other in self._on.get(name, ()):
                if other == job_id:
                    continue
                o = self._running[other]
                s = o.shares.get(name, 0.0)
                here *= truth[o.cls] ** s
                per_class[o.cls] = per_class.get(o.cls, 0.0) + s
            pace = max(pace, here)
            for a, s in per_class.items():
                exposure[a] = max(exposure.get(a, 0.0), min(s, 1.0))
        r.pace, r.exposure = pace, exposure
        return min(r.at + r.remaining * pace, r.limit_end)


class _AllClasses(Mapping[str, str]):
    """Every identity's true class (the oracle's view), computed when asked."""

    def __init__(self, model: InterferenceModel) -> None:
        self.model = model

    def __getitem__(self, ident: str) -> str:
        return self.model.class_of(ident)

    def get(self, ident: str, default: object = None) -> str:
        return self.model.class_of(ident)

    def __iter__(self) -> Iterator[str]:  # (not enumerable: every identity has one)
        return iter(())

    def __len__(self) -> int:
        return 0


__all__ = ["CLASSES", "CLASS_SHARES", "MODES", "TRUTH", "InterferenceModel", "class_of"]
