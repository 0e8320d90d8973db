"""One replay on several cores, with the result of one core, to the last digit.

What a replay does from an instant on depends on its running jobs (which nodes, until
when), its queue and the jobs still to come; the scheduler's caches only save work, and
the ``user`` and ``perfect`` predictors keep nothing. So where the simulated machine is
*empty* just before some job arrives (nothing running, nothing waiting), everything from
there on depends on the jobs submitted from then on alone: two replays empty at the same
such instant go on identically.

``replay`` starts worker ``w`` at job ``starts[w]`` on an empty machine (worker 0 at the
first job: the real replay). At each instant where jobs arrive, a worker notes in shared
memory whether it was empty there. A worker empty at such an instant at or after the
next worker's start looks for a later-starting worker that was empty there too (waiting
for it to get there, which it seldom has not: it was launched first and started
nearer), and stops if it finds one: that worker's replay is the real one from there on.
Following these hand-overs from worker 0 gives each job's outcome, the passes and the time series
of a replay on one core. A later worker that falls behind (or is never handed over to)
is stopped once the chain reaches the last job; the work it did is the price of not
knowing in advance where the machine empties.

Where to start the workers: at instants where the trace's own recorded schedule was
empty (every earlier job submitted, waited and ran before it); the real scheduler's
machine is usually empty there too (on CEA-Curie, 107 of the 109 such instants; on
SDSC-SP2, all 37). Such instants come in clusters, seldom at equal shares, so the starts
are the ones whose parts would be done soonest on the cores there are, no more workers
running at once than cores, the last part first (``split_starts``): on two cores
SDSC-SP2 gets three workers (parts of 24, 45 and 31 % of the jobs; the first starts when
the last is done: all done at 55 %) rather than two (69 and 31 %). A trace without
recorded waits splits at the first job of an instant, and the workers meet at the first
instant where both machines empty.

Only for replays whose scheduler and predictor keep no state that decides: ``user`` or
``perfect``, no data plane, no topology recorder (``parallel_ok``). Workers are forked
(the jobs are shared, not copied; Linux).
"""

from __future__ import annotations

import heapq
import itertools
import multiprocessing
import os
import resource
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from hal.core.states import JobState
from hal.predict import PerfectPredictor, Predictor, UserPredictor
from hal.scheduler.framework.scheduler import Scheduler
from hal.sim.cluster import ClusterModel
from hal.sim.engine import JobOutcome, SimRun, Simulation, Watch
from hal.sim.workload import TraceJob

_STATES = list(JobState)
_WAIT_S = 0.001
MAX_DEFAULT_WORKERS = 4
_GRID = 32  # candidate starts: the pool's instants nearest to this many equal shares


def default_workers() -> int:
    """``MAX_DEFAULT_WORKERS`` where this process may run on two cores or more (how many
    of them a replay uses, ``split_starts`` chooses), else one."""
    return MAX_DEFAULT_WORKERS if available_cores() > 1 else 1


def available_cores() -> int:
    return len(os.sched_getaffinity(0))


def parallel_ok(predictor: Predictor | None) -> bool:
    """Whether replays planning with ``predictor`` can be split (it keeps no state)."""
    return predictor is None or isinstance(predictor, UserPredictor | PerfectPredictor)


def split_starts(jobs: Sequence[TraceJob], workers: int, cores: int) -> list[int]:
    """Where each of at most ``workers`` workers starts (worker 0 at job 0): the first
    job of an instant, at the trace's recorded empty instants (else at any instant),
    chosen so that the parts, as many jobs each, would be done soonest on ``cores`` CPUs
    as ``replay`` runs them (``makespan``); of splits done as soon, the one with fewest
    workers. The candidates are the pool's instants nearest to ``_GRID`` equal shares
    (each part's length counted in jobs: the per-job cost is about even along the
    traces measured)."""
    n = len(jobs)
    if workers < 2 or n < 2:
        return [0]
    submit = np.fromiter((j.submit for j in jobs), dtype=np.float64, count=n)
    pool = _recorded_empty(jobs, submit)
    if not len(pool):  # the first job of each instant
        pool = np.flatnonzero(np.concatenate(([True], submit[1:] > submit[:-1])))
    grid = _GRID if workers <= MAX_DEFAULT_WORKERS else _GRID // 2
    near = {int(pool[np.argmin(np.abs(pool - g * n / grid))]) for g in range(1, grid)}
    candidates = sorted(at for at in near if 0 < at < n)
    best: tuple[float, int, tuple[int, ...]] = (float(n), 0, ())
    for extra in range(1, min(workers, len(candidates) + 1)):
        for cuts in itertools.combinations(candidates, extra):
            bounds = (0, *cuts, n)
            parts = [b - a for a, b in itertools.pairwise(bounds)]
            best = min(best, (makespan(parts, cores), extra, cuts))
    return [0, *best[2]]


def makespan(parts: Sequence[float], cores: int) -> float:
    """When the last of ``parts`` (amounts of work, in worker order) is done, each
    started, the last first, as soon as one of ``cores`` CPUs is free."""
    free = [0.0] * max(cores, 1)
    for part in reversed(parts):
        heapq.heappush(free, heapq.heappop(free) + part)
    return max(free)


def _recorded_empty(jobs: Sequence[TraceJob], submit: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The jobs before whose submission every earlier job had ended in the trace's own
    schedule (none when the trace does not record waits)."""
    waited = np.fromiter((j.record.wait for j in jobs), dtype=np.float64, count=len(jobs))
    if (waited < 0).any():
        return np.empty(0, dtype=np.intp)
    ran = np.fromiter((j.run for j in jobs), dtype=np.float64, count=len(jobs))
    ended = np.maximum.accumulate(submit + waited + ran)
    empty = (ended[:-1] <= submit[1:]) & (submit[1:] > submit[:-1])
    return np.flatnonzero(empty) + 1


@dataclass(frozen=True, slots=True)
class Split:
    """How a split replay went: where each worker started, the hand-overs that make the
    result (worker, first job it gives, first job it does not), and the CPU seconds
    every worker spent, those whose work was thrown away included."""

    starts: tuple[int, ...]
    chain: tuple[tuple[int, int, int], ...]
    cpu_s: float


class _Shared:
    """What the workers tell each other: per worker, whether it was empty before each
    job's instant, the last instant it reached, where it stopped and for whom, and
    whether it has ended."""

    def __init__(self, ctx: Any, workers: int, n: int) -> None:
        self.empty = [ctx.RawArray("b", n) for _ in range(workers)]
        self.progress = ctx.RawArray("q", [-1] * workers)
        self.stopped = ctx.RawArray("q", [-1] * workers)
        self.handed = ctx.RawArray("q", [-1] * workers)
        self.ended = ctx.RawArray("b", workers)


def _watcher(
    w: int, starts: Sequence[int], shared: _Shared, marks: dict[int, tuple[int, int]]
) -> Watch:
    """Worker ``w``'s ``Simulation.watch``: notes where it is empty (with its passes and
    skipped passes then, in ``marks``) and stops where a later worker was empty too."""
    empty, progress, stopped, handed = shared.empty, shared.progress, shared.stopped, shared.handed
    later = range(w + 1, len(starts))
    next_start = starts[w + 1] if w + 1 < len(starts) else None
    mine = empty[w]

    def watch(p: int, is_empty: bool, passes: int, skipped: int) -> bool:
        if is_empty:
            mine[p] = 1
            marks[p] = (passes, skipped)
        progress[w] = p  # (after the mark: a reader that sees p sees its mark)
        if not is_empty or next_start is None or p < next_start:
            return False
        for v in later:
            if starts[v] > p:
                break
            if _reaches(shared, v, p) and empty[v][p]:
                handed[w] = v
                stopped[w] = p
                return True
        return False

    return watch


def _reaches(shared: _Shared, v: int, p: int) -> bool:
    """Whether worker ``v`` gets to job ``p``'s instant (waiting for it if it has not
    yet: it was launched first and started nearer, so it is seldom behind); False
    when it handed over before, or ended without getting there."""
    stopped, progress, ended = shared.stopped, shared.progress, shared.ended
    while True:
        if 0 <= stopped[v] <= p:
            return False  # it handed over before p: a later one goes on from there
        if progress[v] >= p:
            return True
        if ended[v]:
            return False
        time.sleep(_WAIT_S)


def _work(
    w: int,
    starts: Sequence[int],
    jobs: tuple[TraceJob, ...],
    cluster: ClusterModel,
    make_scheduler: Callable[[], Scheduler],
    predictor: Predictor | None,
    shared: _Shared,
    conn: Connection,
) -> None:
    """One worker (a forked process): replays ``jobs[starts[w]:]`` and sends the result."""
    try:
        marks: dict[int, tuple[int, int]] = {}
        sim = Simulation(
            jobs[starts[w] :],
            cluster,
            make_scheduler(),
            predictor=predictor,
            first=starts[w],
            watch=_watcher(w, starts, shared, marks),
        )
        run = sim.run()
        out = run.outcomes
        conn.send(
            {
                "start": np.array([o.start for o in out], dtype=np.float64),
                "end": np.array([o.end for o in out], dtype=np.float64),
                "state": np.array([_STATES.index(o.state) for o in out], dtype=np.int16),
                "predicted": np.array([o.predicted for o in out], dtype=np.float64),
                "series": (run.series_t, run.series_queue, run.series_busy),
                "passes": run.passes,
                "skipped": run.skipped_passes,
                "marks": marks,
            }
        )
    except BaseException:
        conn.send({"error": traceback.format_exc()})
    finally:
        shared.ended[w] = 1
        conn.close()


def replay(
    jobs: tuple[TraceJob, ...],
    cluster: ClusterModel,
    make_scheduler: Callable[[], Scheduler],
    predictor: Predictor | None,
    workers: int,
    cores: int | None = None,
) -> tuple[SimRun, Split]:
    """The replay of ``jobs`` that ``Simulation(...).run()`` gives, on up to ``workers``
    processes (see the module's text), at most ``cores`` at a time (default: the CPUs
    this process may run on), the last part first: a worker is started before the one
    that hands over to it, which never waits for one not yet started. ``make_scheduler``
    builds each worker's own."""
    wall0 = time.perf_counter()
    cores = available_cores() if cores is None else cores
    starts = split_starts(jobs, workers, cores)
    if len(starts) == 1:
        sim = Simulation(jobs, cluster, make_scheduler(), predictor=predictor)
        began = time.process_time()
        run = sim.run()
        return run, Split((0,), ((0, 0, len(jobs)),), time.process_time() - began)
    children0 = _children_cpu()
    ctx = multiprocessing.get_context("fork")
    shared = _Shared(ctx, len(starts), len(jobs))
    procs: dict[int, Any] = {}
    conns: dict[int, Connection] = {}

    def launch(w: int) -> None:
        mine, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_work,
            args=(w, starts, jobs, cluster, make_scheduler, predictor, shared, theirs),
            name=f"hal-sim-{w}",
            daemon=True,
        )
        proc.start()
        theirs.close()
        procs[w], conns[w] = proc, mine

    queued = list(range(len(starts)))  # launched from the end: the last part first
    results: dict[int, dict[str, Any]] = {}
    try:
        while (chain := _chain(shared, results, len(jobs))) is None:
            while queued and len(procs) - len(results) < cores:
                launch(queued.pop())
            running = [w for w in procs if w not in results]
            ready = wait([conns[w] for w in running])
            for w in running:
                if conns[w] in ready:
                    results[w] = _receive(conns[w])
                    shared.ended[w] = 1  # (also for one that died before saying so)
    finally:
        for proc in procs.values():
            if proc.is_alive():
                proc.terminate()
            proc.join()
    cpu = _children_cpu() - children0  # every worker's, reaped above
    run = _merge(jobs, cluster, starts, chain, results, time.perf_counter() - wall0)
    return run, Split(tuple(starts), tuple(chain), cpu)


def _children_cpu() -> float:
    """User and system CPU seconds of this process's children that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _receive(conn: Connection) -> dict[str, Any]:
    """A worker's result, or ``{"error": why}``."""
    try:
        result: dict[str, Any] = conn.recv()
    except EOFError:
        return {"error": "it ended without a result"}
    return result


def _chain(
    shared: _Shared, results: dict[int, dict[str, Any]], n: int
) -> list[tuple[int, int, int]] | None:
    """The hand-overs from worker 0 to one that replayed to the last job: (worker, first
    job it gives, first it does not); None while a result on the way is still to come."""
    chain: list[tuple[int, int, int]] = []
    w, first = 0, 0
    while True:
        result = results.get(w)
        if result is None:
            return None
        if "error" in result:
            raise RuntimeError(f"simulation worker {w} failed: {result['error']}")
        stop = shared.stopped[w]
        if stop < 0:
            chain.append((w, first, n))
            return chain
        chain.append((w, first, stop))
        w, first = shared.handed[w], stop


def _merge(
    jobs: tuple[TraceJob, ...],
    cluster: ClusterModel,
    starts: Sequence[int],
    chain: Sequence[tuple[int, int, int]],
    results: dict[int, dict[str, Any]],
    wall_s: float,
) -> SimRun:
    outcomes: list[JobOutcome] = []
    series: list[list[np.ndarray[Any, Any]]] = [[], [], []]
    passes = skipped = 0
    for w, first, last in chain:
        r = results[w]
        offset = starts[w]
        start, end, state, predicted = r["start"], r["end"], r["state"], r["predicted"]
        for i in range(first, last):
            k = i - offset
            outcomes.append(JobOutcome(jobs[i], start[k], end[k], _STATES[state[k]], predicted[k]))
        # passes and samples from the instant of job ``first`` until that of ``last``
        # (the worker was empty at both, so it marked them)
        p0, s0 = r["marks"][first]
        p1, s1 = r["marks"][last] if last < len(jobs) else (r["passes"], r["skipped"])
        passes += p1 - p0
        skipped += s1 - s0
        t = r["series"][0]
        lo = np.searchsorted(t, jobs[first].submit, side="left")
        hi = np.searchsorted(t, jobs[last].submit, side="left") if last < len(jobs) else len(t)
        for out, arr in zip(series, r["series"], strict=True):
            out.append(arr[lo:hi])
    times, queue, busy = (np.concatenate(s) for s in series)
    return SimRun(tuple(outcomes), cluster.total_cpus, times, queue, busy, passes, skipped, wall_s)
