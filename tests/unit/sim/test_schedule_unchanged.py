"""The simulator's schedule on a CEA-Curie prefix is pinned: every job's start time must
equal the recorded one, so a speed-up that changes a decision fails here.

The file was written by this tree's simulator (EASY, user estimates, 80,640 cores as
5,040 nodes of 16 cores, the first 1,500 jobs); regenerate it only for an intended
change of schedule (docs/benchmarks.md, "Pinned schedule"), with
``PYTHONPATH=src python tests/unit/sim/test_schedule_unchanged.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.core.job import Job
from hal.predict import planned_runtime
from hal.scheduler.framework.availability import StartRowsMemo
from hal.scheduler.framework.start_bound import StartBound
from hal.scheduler.plugins.backfill.plugin import Backfill
from hal.sim.run import SimOptions, run_trace
from hal.sim.workload import Cleaning
from hal.testing.traces import trace_path

CURIE = trace_path("CEA-Curie-2011-2.1-cln.head3000.swf.gz")
PINNED = Path(__file__).parents[2] / "data" / "curie_easy_1500_starts.txt"


def pinned_starts() -> dict[int, float]:
    starts: dict[int, float] = {}
    for line in PINNED.read_text().splitlines():
        job, start = line.split()
        starts[int(job)] = float(start)
    return starts


def simulated_starts() -> dict[int, float]:
    options = SimOptions(policy="easy", cores_per_node=16)
    run, _ = run_trace(CURIE, options, Cleaning(first_jobs=1500, procs=80640))
    return {o.job.id: o.start for o in run.outcomes}


def test_curie_prefix_start_times_unchanged() -> None:
    got = simulated_starts()
    want = pinned_starts()
    assert len(want) == 1500
    assert got.keys() == want.keys()
    moved = [(j, want[j], got[j]) for j in want if got[j] != want[j]]
    assert moved == [], f"{len(moved)} jobs start at another time, first: {moved[:5]}"


def test_the_caches_kept_across_passes_change_no_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same prefix with the head's start-row memo, its start bound and the plugin's
    kept requested times turned off: every job starts when it does with them."""

    def uncached(self: Backfill, job: Job, elapsed_s: float = 0.0) -> float:
        return planned_runtime(self.predictor, job, elapsed_s)

    monkeypatch.setattr(StartRowsMemo, "get", lambda *args: None)
    monkeypatch.setattr(StartBound, "row", lambda *args: None)
    monkeypatch.setattr(Backfill, "runtime", uncached)
    assert simulated_starts() == pinned_starts()


if __name__ == "__main__":  # rewrite the pinned file (an intended change of schedule)
    PINNED.write_text("".join(f"{job} {start!r}\n" for job, start in simulated_starts().items()))
