"""Malleable jobs: the size range a job declared, and the controller that resizes such
jobs toward the allocation with the most goodput in all (docs/feedback.md, ADR 0025).

**The range.** ``--malleable`` with ``--nodes=LO-HI`` (whole nodes) or
``--cpus-per-task=LO-HI`` makes a job resizable within that range: ``MalleableRange``,
kept in its spec. Its *size* is a count of *units* (nodes, or CPUs per task), each
costing ``cpus_per_unit`` CPUs.

**Goodput per size.** A job reports its rate through the feedback API (one metric with
a goal: ``max`` is a rate, ``min`` a time per item, inverted). ``rates_by_size`` turns
its points and the sizes of its runs into the mean rate it had at each size. Its
*speedup curve* is Amdahl's, ``s(n) = n / (1 + a (n - 1))`` (``s(1) = 1``), with ``a``
(the serial share) fitted to those means (``fit_serial_share``: least squares over a
grid, one point per size seen; ``PRIOR_SERIAL`` until two sizes are seen). Speedups are
each job's own rate over its own rate on one unit, so jobs whose metrics have different
units add up: the controller maximises the sum of the jobs' speedups, which is Pollux's
goodput without its statistical efficiency term (a job's rate already holds it).

**The controller** (``plan_resizes``), a pure function of the running malleable jobs,
the CPUs free and the time:

1. Each job's bounds: its declared range, capped by the most its quota and partition
   allow (``Candidate.cap``). A job resized less than ``min_interval_s`` ago, or that
   has reported nothing at its current size, keeps its size (it is pinned).
2. The CPUs to share: those free plus those the unpinned jobs hold. Every unpinned job
   starts at its low bound; one unit at a time goes to the job whose speedup gains most
   per CPU (ties: the higher priority, then the lower id), while a unit fits and gains.
3. Hysteresis: a job grows only if its own speedup gains at least ``min_gain`` (0.1:
   10 %), and the plan holds only if the sum of the speedups gains at least
   ``min_gain`` of the changed jobs' sum; a job shrinks only where its CPUs are needed
   for a growth kept (least speedup lost per CPU first), or where it is above its bounds
   (a quota lowered since it started).

So a job never leaves its declared range or its cap, the CPUs the plan uses never pass
what was free plus what the resized jobs held, and a job is resized at most once per
``min_interval_s``: nothing flaps. Each ``Resize`` carries its reason in words.

**Moving dissonant jobs** (``feedback_fell``, ``mover``): a job whose reported feedback
fell by ``DROP`` and stayed down for its last ``STAY_POINTS`` points, beside a neighbour
whose class the interference model marks as hurting it, has one of the two moved: the
one that can be requeued (checkpointable) and has the lower priority.

Pure: imports only ``hal.core`` and the standard library.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hal.core.errors import InvalidRequest

NODES = "nodes"
CPUS = "cpus"
PRIOR_SERIAL = 0.05  # the serial share assumed until a job has been seen at two sizes
MIN_GAIN = 0.10  # a resize must gain at least this share of speedup
MIN_INTERVAL_S = 600.0  # a job is resized at most this often
DROP = 0.2  # feedback 20 % worse than before ...
STAY_POINTS = 3  # ... for this many points in a row has fallen
_GRID = tuple(i / 200 for i in range(0, 201))  # serial shares tried by the fit


@dataclass(frozen=True, slots=True)
class MalleableRange:
    """The sizes a job may run at: ``unit`` ``nodes`` or ``cpus`` (per task), from
    ``low`` to ``high`` (both included, ``1 <= low <= high``)."""

    unit: str
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.unit not in (NODES, CPUS):
            raise ValueError(f"unit must be {NODES!r} or {CPUS!r}, not {self.unit!r}")
        if not 1 <= self.low <= self.high:
            raise ValueError(f"a range needs 1 <= low <= high, not {self.low}-{self.high}")

    def __str__(self) -> str:
        return f"{self.unit}={self.low}-{self.high}"


def parse_range(text: str, option: str) -> tuple[int, int]:
    """``N`` or ``LO-HI`` (whole numbers, ``1 <= LO <= HI``), or ``InvalidRequest``."""
    low, sep, high = text.strip().partition("-")
    if not low.isdigit() or (sep and not high.isdigit()):
        raise InvalidRequest(f"{option}={text!r}: write a number or a range, e.g. 4-16")
    lo, hi = int(low), int(high) if sep else int(low)
    if not 1 <= lo <= hi:
        raise InvalidRequest(f"{option}={text!r}: the range must run from 1 up, low first")
    return lo, hi


def speedup(n: int, serial: float) -> float:
    """Amdahl's speedup on ``n`` units with serial share ``serial`` (0 for n <= 0)."""
    return n / (1.0 + serial * (n - 1)) if n > 0 else 0.0


def fit_serial_share(rates: Mapping[int, float], prior: float = PRIOR_SERIAL) -> float:
    """The serial share whose speedup curve best fits the mean ``rates`` per size (the
    rate on one unit fitted with it, in logs); ``prior`` with fewer than two sizes."""
    points = tuple(
        sorted((n, r) for n, r in rates.items() if n >= 1 and r > 0 and math.isfinite(r))
    )
    if len(points) < 2:
        return prior
    return _fit(points, prior)


@functools.lru_cache(maxsize=4096)
def _fit(points: tuple[tuple[int, float], ...], prior: float) -> float:
    """(``fit_serial_share``'s search, kept for the rates it was asked of: the controller
    asks again at every tick and a job's rates change only when it reports a new size)"""
    best, best_err = prior, math.inf
    for a in _GRID:
        logs = [math.log(r) - math.log(speedup(n, a)) for n, r in points]
        base = sum(logs) / len(logs)  # log of the rate on one unit
        err = sum((x - base) ** 2 for x in logs)
        if err < best_err - 1e-12:
            best, best_err = a, err
    return best


def rates_by_size(
    points: Iterable[tuple[float, float]], runs: Sequence[tuple[float, int]], goal: str
) -> dict[int, float]:
    """The mean rate at each size: ``points`` are (time, value) as reported, ``runs``
    (start time, size) of each run, oldest first; ``goal`` ``min`` inverts values (a
    time per item). Points before the first run, and values that are not positive, are
    left out."""
    sums: dict[int, list[float]] = {}
    for t, value in points:
        size = None
        for start, n in runs:
            if start <= t:
                size = n
        if size is None or not value > 0 or not math.isfinite(value):
            continue
        sums.setdefault(size, []).append(value if goal == "max" else 1.0 / value)
    return {n: sum(v) / len(v) for n, v in sums.items()}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running malleable job as the controller sees it.

    ``size``: its units now (0: it waits to start; the plan may make room for it at
    its low bound); ``low``/``high``: its declared range; ``cap``: the most
    units its quota and partition allow (0: no cap beyond the range);
    ``cpus_per_unit``: CPUs one unit holds; ``rates``: mean reported rate per size
    (``rates_by_size``); ``last_change``: when it was last resized (or started);
    ``priority``: its priority (ties go to the higher)."""

    job_id: int
    size: int
    low: int
    high: int
    cpus_per_unit: int
    rates: Mapping[int, float]
    last_change: float
    priority: int = 0
    cap: int = 0

    @property
    def top(self) -> int:
        """The most units it may hold: its range's high end, capped."""
        return min(self.high, self.cap) if self.cap > 0 else self.high


@dataclass(frozen=True, slots=True)
class Resize:
    """Give ``job_id`` ``new`` units instead of ``old``; ``reason`` says why."""

    job_id: int
    old: int
    new: int
    reason: str


@dataclass(frozen=True, slots=True)
class Policy:
    """The hysteresis: the least relative gain of speedup, and the least time between
    two resizes of one job."""

    min_gain: float = MIN_GAIN
    min_interval_s: float = MIN_INTERVAL_S
    prior_serial: float = PRIOR_SERIAL


def plan_resizes(
    jobs: Sequence[Candidate], free_cpus: int, now: float, policy: Policy = Policy()
) -> list[Resize]:
    """The resizes that raise the sum of the jobs' speedups (the module docstring's
    steps), by job id."""
    serial = {c.job_id: fit_serial_share(c.rates, policy.prior_serial) for c in jobs}
    movable = [c for c in jobs if _movable(c, now, policy)]
    budget = max(free_cpus, 0) + sum(c.size * c.cpus_per_unit for c in movable)
    target: dict[int, int] = {}
    # every running job keeps its low bound; a waiting one gets its own while it fits,
    # the higher priority first
    for c in sorted(movable, key=lambda c: (c.size == 0, -c.priority, c.job_id)):
        low = min(c.low, c.top)
        cost = low * c.cpus_per_unit
        target[c.job_id] = low if c.size > 0 or cost <= budget else 0
        budget -= target[c.job_id] * c.cpus_per_unit
    if budget < 0:  # (running jobs' low bounds past what is there: nobody moves)
        return []
    while True:
        best: tuple[float, int, int] | None = None
        pick: Candidate | None = None
        for c in movable:
            n = target[c.job_id]
            if n == 0 or n >= c.top or c.cpus_per_unit > budget:
                continue
            a = serial[c.job_id]
            gain = (speedup(n + 1, a) - speedup(n, a)) / c.cpus_per_unit
            key = (gain, c.priority, -c.job_id)
            if gain > 1e-12 and (best is None or key > best):
                best, pick = key, c
        if pick is None:
            break
        target[pick.job_id] += 1
        budget -= pick.cpus_per_unit
    return _with_hysteresis(movable, target, serial, free_cpus, policy)


def _movable(c: Candidate, now: float, policy: Policy) -> bool:
    if c.size == 0:
        return True  # waiting: it takes part, to be given room
    if c.size > c.top:
        return True  # above its cap: it must come down whatever the interval
    return now - c.last_change >= policy.min_interval_s and c.size in c.rates


def _with_hysteresis(
    movable: Sequence[Candidate],
    target: Mapping[int, int],
    serial: Mapping[int, float],
    free_cpus: int,
    policy: Policy,
) -> list[Resize]:
    """Of the greedy targets, the growths worth ``min_gain`` and the shrinks that pay
    for them (or that a cap forces)."""

    def s(c: Candidate, n: int) -> float:
        return speedup(n, serial[c.job_id])

    forced = [c for c in movable if c.size > c.top]
    grows = [
        c
        for c in movable
        if target[c.job_id] > c.size
        and s(c, target[c.job_id]) >= (1 + policy.min_gain) * s(c, c.size)
    ]
    shrinks = sorted(
        (c for c in movable if target[c.job_id] < c.size and c not in forced),
        key=lambda c: (
            (s(c, c.size) - s(c, target[c.job_id]))
            / ((c.size - target[c.job_id]) * c.cpus_per_unit),
            c.job_id,
        ),
    )
    room = max(free_cpus, 0) + sum((c.size - target[c.job_id]) * c.cpus_per_unit for c in forced)
    need = sum((target[c.job_id] - c.size) * c.cpus_per_unit for c in grows)
    chosen: list[Candidate] = []
    for c in shrinks:
        if room >= need:
            break
        chosen.append(c)
        room += (c.size - target[c.job_id]) * c.cpus_per_unit
    while grows and room < need:  # (cannot happen with the greedy's budget; kept safe)
        dropped = grows.pop()
        need -= (target[dropped.job_id] - dropped.size) * dropped.cpus_per_unit
    changed = [*grows, *chosen]
    before = sum(s(c, c.size) for c in changed)
    after = sum(s(c, target[c.job_id]) for c in changed)
    if not grows or after < (1 + policy.min_gain) * before:
        changed = []
    out = []
    for c in [*forced, *changed]:
        new = target[c.job_id]
        a = serial[c.job_id]
        if c in forced:
            why = f"above the {c.top} {_units(c)} its quota allows"
        elif c.size == 0:
            why = (
                f"waiting: room made for it at {new} {_units(c)}; the cluster's goodput "
                f"{before:.2f} → {after:.2f}"
            )
        else:
            seen = ", ".join(f"{n}: {r:.4g}" for n, r in sorted(c.rates.items()))
            why = (
                f"speedup {s(c, c.size):.2f} → {s(c, new):.2f} (serial share {a:.2f} "
                f"from rates {seen}); the cluster's goodput {before:.2f} → {after:.2f}"
            )
            if new < c.size:
                why = f"its CPUs gain more elsewhere: {why}"
        out.append(Resize(c.job_id, c.size, new, why))
    return sorted(out, key=lambda r: r.job_id)


def _units(c: Candidate) -> str:
    return "units" if c.top != 1 else "unit"


def feedback_fell(
    points: Sequence[tuple[float, float]], goal: str, drop: float = DROP, stay: int = STAY_POINTS
) -> bool:
    """Whether the last ``stay`` values are each at least ``drop`` worse than the median
    of those before them (at least ``stay`` of those)."""
    values = [v for _, v in points if math.isfinite(v) and v > 0]
    if len(values) < 2 * stay:
        return False
    base = statistics.median(values[:-stay])
    recent = values[-stay:]
    if goal == "max":
        return all(v <= (1 - drop) * base for v in recent)
    return all(v >= base / (1 - drop) for v in recent)


@dataclass(frozen=True, slots=True)
class Mover:
    """One of two clashing jobs: may it be requeued (``--signal`` or requeueable), and
    its priority."""

    job_id: int
    checkpointable: bool
    priority: int


def mover(a: Mover, b: Mover) -> Mover | None:
    """Which of two clashing jobs to move: the checkpointable one; of two, the lower
    priority (then the younger: higher id); None when neither can be requeued."""
    able = [m for m in (a, b) if m.checkpointable]
    if not able:
        return None
    return min(able, key=lambda m: (m.priority, -m.job_id))


ACTION = "feedback_action"  # job.extra: the last resize or move, and why (hal show, explain)


def declared_range(
    malleable: bool, nodes_min: int, nodes_max: int, cpus_per_task: int, cpus_max: int | None
) -> MalleableRange | None:
    """The range a submission declares (``--malleable`` with ``--nodes=LO-HI`` or
    ``--cpus-per-task=LO-HI``), or None; ``InvalidRequest`` saying what to write."""
    cpus_range = cpus_max is not None and cpus_max != cpus_per_task
    if cpus_max is not None and cpus_max < cpus_per_task:
        raise InvalidRequest(
            f"cpus_per_task: the range {cpus_per_task}-{cpus_max} runs backwards; write the "
            "low end first, e.g. --cpus-per-task=4-16",
            field="cpus_per_task",
        )
    if not malleable:
        if cpus_range:
            raise InvalidRequest(
                "cpus_per_task: a range of CPUs per task needs --malleable (the job is "
                "then resized within it); or give one number",
                field="cpus_per_task",
            )
        return None
    if cpus_range and nodes_max > nodes_min:
        raise InvalidRequest(
            "malleable: resize by nodes (--nodes=LO-HI) or by CPUs per task "
            "(--cpus-per-task=LO-HI), not both",
            field="malleable",
        )
    if cpus_range:
        assert cpus_max is not None
        return MalleableRange(CPUS, cpus_per_task, cpus_max)
    if nodes_max > nodes_min:
        return MalleableRange(NODES, nodes_min, nodes_max)
    raise InvalidRequest(
        "malleable: --malleable needs a range to resize within: --nodes=2-8 or "
        "--cpus-per-task=4-16",
        field="malleable",
    )
