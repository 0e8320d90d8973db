"""The scheduling passes that took long: what each was made of, in one log line, and the
longest since sdiag's reset in ``/v1/diag`` (``max_pass_breakdown``).

A pass's time (``hal_scheduling_pass_duration_seconds``, sdiag's ``max_pass_s``) is
measured on the event loop, from handing the pass to a worker thread to its plan back
(``SchedulerService.cycle``). It is made of:

* ``wait_s``: the wait for a worker thread (the default executor's) to begin it;
* the pass on that thread, stage by stage (``PassResult.stages``: ``context``, ``sort``,
  ``main``, ``backfill``, ``changes``, ``plan``, each ``stage_<name>_s``);
* of that, ``cpu_s`` the thread ran; ``lock_s`` the backfill stage waited to take
  what its plugin holds for it (the server's predictor, which its trainer holds while
  it learns: ``BackfillPlanning``); and ``waited_s`` the rest, which the thread did not
  run: the pass waited for the interpreter, which the event loop (agents' syncs, lists,
  the writing of the last plan) and the other threads share with it, or for the
  machine's cores;
* for a pass decided in a process of its own (``forked``: ``[scheduler] pass_process =
  "fork"`` or ``"auto"``, ADR 0031), ``cpu_s`` is that process's, ``fork_s`` the
  thread's taking of the plugins' fork locks and its ``fork`` call, ``load_s`` its
  reading back of the result (unpickling it and taking in what it carried back, the
  interpreter held), and ``waited_s``
  the rest: the child waiting for a core, the thread for the interpreter;
* ``handback_s``: from the pass's end on its thread to the event loop taking its plan
  back (the loop busy with other work meanwhile);
* ``gc_s``: full garbage collections (``gc_full`` of them) within the pass's time, which
  hold every thread (``hal.server.observe.heap`` times them while it runs; both null
  when it does not, ``HAL_GC_THAW_S=0``: nothing was measured).

With it what the pass was: the pending jobs it was handed (``pending``), those it looked
at (``looked``), placed (``placed``), the waiting jobs' updates (``updates``), whether it
ran the backfill stage (``backfill``), stopped at ``max_job_starts`` (``capped``),
looked at every job (``complete``), ran with its plugin calls timed (``timed``: one
pass in ``HAL_PLUGIN_TIMING_INTERVAL_S``); and around it, on the event loop, the snapshot
before it (``snapshot_s``) and the writing of its plan after it (``apply_s``, the starts
it wrote: ``started``), the server's count of the cycle (``cycle``) and when the cycle
ended (``at``, seconds since the epoch).

``HAL_SLOW_PASS_LOG_S`` (default 2; 0: off): a pass that long or longer logs one
warning, ``scheduling pass took long``, with these fields, from the logger
``hal.server.observe.passes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hal.scheduler.framework.scheduler import PASS_STAGES, PassResult, ProcessFacts
from hal.scheduler.service import CycleStats

log = logging.getLogger(__name__)

Breakdown = dict[str, float | int | bool | None]
# (since, until) on perf_counter → the full collections within and their seconds; None:
# they are not being timed
FullCollections = Callable[[float, float], tuple[int, float] | None]


@dataclass(frozen=True, slots=True)
class PassFacts:
    """What a ``PassResult`` says of its pass, kept from the worker thread for the
    cycle's hook on the event loop."""

    stages: Mapping[str, float] = field(default_factory=dict)
    looked: int = 0
    placed: int = 0
    updates: int = 0
    backfill: bool = False
    capped: bool = False
    complete: bool = True
    timed: bool = False
    lock_s: float = 0.0
    process: ProcessFacts | None = None

    @classmethod
    def of(cls, result: PassResult) -> PassFacts:
        plan = result.plan
        return cls(
            stages=result.stages,
            looked=result.looked,
            placed=len(plan.placements),
            updates=len(plan.updates),
            backfill=result.backfill is not None,
            capped=bool(result.capped),
            complete=result.complete,
            timed=result.plugin_seconds is not None,
            lock_s=result.backfill.lock_s if result.backfill is not None else 0.0,
            process=result.process,
        )


def breakdown(
    stats: CycleStats,
    facts: PassFacts,
    pending: int,
    gc: tuple[int, float] | None,
    at: float,
) -> Breakdown:
    """The fields of the module's docstring for the cycle ``stats`` describes, which
    ended at ``at`` (``gc`` None: full collections not timed)."""
    pass_s, cpu_s, back_s = stats.last_pass_s, stats.last_pass_cpu_s, stats.last_pass_handback_s
    ran_s = max(0.0, pass_s - stats.last_pass_wait_s - back_s)  # on the worker thread
    process = facts.process
    # (a forked pass: the child's CPU, and the parent's fork and reading back apart)
    fork_s, load_s = (process.fork_s, process.load_s) if process is not None else (0.0, 0.0)
    if process is not None:
        cpu_s = process.cpu_s
    out: Breakdown = {
        "cycle": stats.cycles,
        "at": round(at, 3),
        "pass_s": _ms(pass_s),
        "wait_s": _ms(stats.last_pass_wait_s),
        "forked": process is not None,
        "fork_s": _ms(fork_s),
        "cpu_s": _ms(cpu_s),
        "lock_s": _ms(facts.lock_s),
        "load_s": _ms(load_s),
        "waited_s": _ms(max(0.0, ran_s - cpu_s - facts.lock_s - fork_s - load_s)),
        "handback_s": _ms(back_s),
        "gc_full": None if gc is None else gc[0],
        "gc_s": None if gc is None else _ms(gc[1]),
    }
    for name in PASS_STAGES:
        out[f"stage_{name}_s"] = _ms(facts.stages.get(name, 0.0))
    out.update(
        pending=pending,
        looked=facts.looked,
        placed=facts.placed,
        updates=facts.updates,
        started=stats.last_started,
        backfill=facts.backfill,
        capped=facts.capped,
        complete=facts.complete,
        timed=facts.timed,
        snapshot_s=_ms(stats.last_snapshot_s),
        apply_s=_ms(stats.last_apply_s),
    )
    return out


class SlowPasses:
    """``record`` (a pass's sink, on the worker thread) keeps the facts of the last
    pass; ``on_cycle`` (the cycle's hook, on the event loop) makes its breakdown, logs
    it when the pass took ``log_s`` or longer (0: never), and keeps the longest pass's
    since ``reset`` (``longest``)."""

    def __init__(
        self, log_s: float, full_collections: FullCollections, now: Callable[[], float]
    ) -> None:
        self.log_s = log_s
        self.now = now
        self.full_collections = full_collections
        self.longest: Breakdown | None = None
        self.longest_s = 0.0
        self.logged = 0
        self._last = PassFacts()

    def record(self, result: PassResult) -> None:
        self._last = PassFacts.of(result)

    def on_cycle(self, stats: CycleStats, pending: int) -> None:
        pass_s = stats.last_pass_s
        slow = self.log_s > 0 and pass_s >= self.log_s
        if not slow and pass_s <= self.longest_s:
            return  # (the common case: nothing made)
        began = stats.last_pass_began
        gc = self.full_collections(began, began + pass_s)
        made = breakdown(stats, self._last, pending, gc, self.now())
        if pass_s > self.longest_s:
            self.longest_s, self.longest = pass_s, made
        if slow:
            self.logged += 1
            log.warning("scheduling pass took long", extra=made)

    def reset(self) -> None:
        """``sdiag -r``: the longest starts again."""
        self.longest, self.longest_s = None, 0.0


def _ms(seconds: float) -> float:
    return round(seconds, 3)
