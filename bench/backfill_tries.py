"""What the backfill stage's start-now tries cost, on the ``sched-pass --dissonance``
workload (10,000 jobs x 1,000 nodes, ``hal.bench.dissonance_pass``), without the
``dissonance`` plugin and with it.

Per scheduler, after a warm-up pass, one pass's stage is watched: its tries
(``Planner.try_start``) counted by the stage their cycle stopped at (``None``: the CPU
screen said no), with the mean wall time of a try of each (the whole ``try_start``: the
window, the cycle, the start's reservation in the profile), the refusals by plugin and
reason. Then, on that stage's planner as it ended, the jobs the ``limits`` plugin
refused are tried again in a tight loop, each way ``REPEAT`` times (the least wall time
of the rounds, per try): the try's cycle as the stage runs it (the window from now,
``Framework.place`` in NOW mode, stopping at the refusal), and the PreFilter calls alone
of the plugins that may refuse the job (``Framework.pre_filter``, as a job behind a
blocked partition gets them in the main loop). Prints one JSON object::

    PYTHONPATH=src python bench/backfill_tries.py
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import hal.scheduler.framework.planner as planner_module
from hal.bench.dissonance_pass import _snapshot, classed_workload, schedulers
from hal.core.job import Job
from hal.scheduler.framework.keys import PLAN_END
from hal.scheduler.framework.planner import Planner
from hal.scheduler.framework.runtime import Mode, Stage

REPEAT = 20


def _least_us(jobs: list[Job], each: Callable[[Job], object]) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        for job in jobs:
            each(job)
        best = min(best, time.perf_counter() - t0)
    return round(best / len(jobs) * 1e6, 2)


def _refused(planner: Planner) -> dict[str, float]:
    """The least time (wall) of a refused try's cycle and of its PreFilter calls alone,
    per try, on the stage's planner as it ended (its jobs that limits refused)."""
    ctx, framework, profile = planner.ctx, planner.framework, planner.profile
    statuses = planner.result.statuses
    jobs = [j for j in planner.jobs if j.id in statuses and statuses[j.id].plugin == "limits"]
    ends = {j.id: ctx.now + planner.hold_for(j) for j in jobs}

    def cycle(job: Job) -> Stage:
        ctx.data.write(PLAN_END, ends[job.id])
        found = framework.place(ctx, job, Mode.NOW, within=profile.window(0, ends[job.id]))
        ctx.data.delete(PLAN_END)
        return found.stage

    def alone(job: Job) -> object:
        ctx.data.write(PLAN_END, ends[job.id])
        found = framework.pre_filter(ctx, job)
        ctx.data.delete(PLAN_END)
        return found

    assert all(cycle(j) is Stage.PRE_FILTER for j in jobs)
    # what ``pre_filter`` works out is read from the passes before: keep it as theirs
    # (array elements get their verdict in the main loop without it)
    framework.new_pass(every_job=False)
    return {
        "refused_cycle_us": _least_us(jobs, cycle),
        "prefilter_alone_us": _least_us(jobs, alone),
    }


def main() -> None:
    workload, view = classed_workload(10_000, 1_000, 1)
    off, on = schedulers(len(workload.nodes))
    tried: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    spent: dict[str, float] = {}  # seconds, by the stage the try stopped at
    last: list[Planner] = []
    try_start = Planner.try_start
    init = Planner.__init__

    def counted(self: Planner, job: Job, *args: Any, **kwargs: Any) -> Stage | None:
        t0 = time.perf_counter()
        stage = try_start(self, job, *args, **kwargs)
        spent[str(stage)] = spent.get(str(stage), 0.0) + time.perf_counter() - t0
        tried[str(stage)] += 1
        if stage is Stage.PRE_FILTER:
            st = self.result.statuses[job.id]
            refused[f"{st.plugin} {st.reason}"] += 1
        return stage

    def kept(self: Planner, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        last[:] = [self]

    setattr(planner_module.Planner, "try_start", counted)  # noqa: B010
    setattr(planner_module.Planner, "__init__", kept)  # noqa: B010
    out: dict[str, object] = {"repeat": REPEAT}
    for label, sched, v in (("off", off, None), ("on", on, view)):
        sched.run_pass(_snapshot(workload, 0, v), backfill=True)  # warm-up
        tried.clear()
        refused.clear()
        spent.clear()
        running = tuple(workload.running)
        sched.run_pass(_snapshot(dataclasses.replace(workload, running=running), 1, v))
        out[label] = {
            "tries": dict(tried),
            "try_us": {k: round(spent[k] / n * 1e6, 1) for k, n in tried.items()},
            "refused_by": dict(refused),
            **_refused(last[0]),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
