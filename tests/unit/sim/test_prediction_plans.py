"""How the simulator plans with predictions that can be wrong (EASY++: ``easy-sjbf`` with
``avg2``), on hand-made traces of four single-CPU nodes with several users:

* a running job keeps the prediction it started with (Tsafrir, Etsion and Feitelson):
  its user's later jobs do not move its planned end, only the expiry correction does;
* a pass runs when a running job outlives its prediction: the correction moves the
  head's reservation, and a job that did not fit before may fit now, although nothing
  ended or arrived.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.predict import Avg2Predictor, PinnedPredictor
from hal.sim import (
    Cleaning,
    ClusterModel,
    SimOptions,
    Simulation,
    load_workload,
    run_trace,
    scheduler_for,
)
from hal.sim.run import make_predictor
from hal.testing.traces import trace_path

SDSC = trace_path("SDSC-SP2-1998-4.2-cln.swf.gz")

# (id, submit, run, procs, requested, user)
Row = tuple[int, float, float, int, float, int]


def write(tmp_path: Path, rows: list[Row]) -> Path:
    lines = ["; MaxProcs: 4", "; MaxNodes: 4"]
    for jid, submit, run, procs, req, user in rows:
        f = [jid, submit, -1, run, procs, -1, -1, procs, req, -1, 1, user, 1, -1, 1, 1, -1, -1]
        lines.append(" ".join(str(int(v)) for v in f))
    path = tmp_path / "users.swf"
    path.write_text("\n".join(lines) + "\n")
    return path


def starts(path: Path) -> dict[int, float]:
    run, _ = run_trace(path, SimOptions(policy="easy-sjbf", predictor="avg2"))
    return {o.job.id: o.start for o in run.outcomes}


def expiring(tmp_path: Path, job5_s: int) -> Path:
    """User 1's two 10 s jobs, then job 3 (avg2 predicts 10 s, it runs 500 s), job 4 the
    head asking for all four CPUs, and job 5 (2 CPUs) running and asking ``job5_s``."""
    return write(
        tmp_path,
        [
            (1, 0, 10, 1, 1000, 1),
            (2, 0, 10, 1, 1000, 1),
            (3, 20, 500, 2, 1000, 1),
            (4, 21, 100, 4, 100, 2),
            (5, 22, job5_s, 2, job5_s, 3),
        ],
    )


def test_a_pass_runs_when_a_prediction_expires(tmp_path: Path) -> None:
    """User 1's two 10 s jobs make avg2 predict 10 s for job 3, which runs 500 s. Job 4
    (all four CPUs) is the head, reserved at job 3's planned end (30). Job 5 (2 CPUs,
    30 s) cannot start at 22: it would hold the head's nodes past 30. At 30 job 3
    outlives its prediction, the correction plans it to 90 (10 s + 1 min), and job 5 now
    fits before the head's start: it starts at 30, not when job 3 ends (520, then
    behind the head at 620)."""
    path = expiring(tmp_path, 30)
    got = starts(path)
    assert got[5] == 30
    assert got[4] == 520


def test_a_running_job_keeps_the_prediction_it_started_with(tmp_path: Path) -> None:
    """Jobs 2 and 3 of user 1 start at 20, both predicted 10 s (job 1's run). Job 3 ends
    at 120: re-predicted from the user's new history, job 2 would be planned to end at
    135 (avg2 55 s + 1 min); pinned, it keeps its 10 s and is corrected to 330 (10 s +
    5 min). So the head, job 4, is reserved at 330, and job 5 (1 CPU, 150 s) backfills
    at 122; with the moving plan it would wait for the head (2120)."""
    path = write(
        tmp_path,
        [
            (1, 0, 10, 1, 10000, 1),
            (2, 20, 2000, 3, 10000, 1),
            (3, 20, 100, 1, 10000, 1),
            (4, 121, 100, 4, 100, 2),
            (5, 122, 150, 1, 150, 3),
        ],
    )
    got = starts(path)
    assert got[5] == 122
    assert got[4] == 2020


def test_the_simulator_pins_the_predictors_that_learn(tmp_path: Path) -> None:
    w = load_workload(write(tmp_path, [(1, 0, 10, 1, 100, 1)]))
    p = make_predictor("avg2", w)
    assert isinstance(p, PinnedPredictor) and isinstance(p.inner, Avg2Predictor)
    assert isinstance(make_predictor("learned", w), PinnedPredictor)
    assert not isinstance(make_predictor("user", w), PinnedPredictor)


def test_skipped_passes_change_nothing_with_expiring_predictions() -> None:
    """With ``avg2`` (ends move at expiries) the fast path starts every job exactly when
    a full pass at every instant does, on the first 600 jobs of SDSC-SP2."""
    w = load_workload(SDSC, Cleaning(first_jobs=600))

    def replay(every_event: bool) -> list[float]:
        p = make_predictor("avg2", w)
        sim = Simulation(
            w.jobs,
            ClusterModel.for_procs(128),
            scheduler_for("easy-sjbf", p),
            predictor=p,
            every_event=every_event,
            explain=every_event,
        )
        return [o.start for o in sim.run().outcomes]

    assert replay(every_event=False) == replay(every_event=True)


def test_an_expired_prediction_can_become_the_request(tmp_path: Path) -> None:
    """The first trace with a 100 s job 5. Stepwise, job 3 is planned to 90 at its
    first expiry (job 5 would cross the head's start and waits) and to 330 at its second
    (90: job 5 now fits). Planned to its request (1020) at the first expiry, job 3 leaves
    the head's start far enough for job 5 at once."""
    path = expiring(tmp_path, 100)
    steps = starts(path)
    run, s = run_trace(path, SimOptions("easy-sjbf", "avg2", correction="request"))
    request = {o.job.id: o.start for o in run.outcomes}
    assert steps[5] == 90 and request[5] == 30
    assert steps[4] == request[4] == 520
    assert s["correction"] == "request"


def test_each_predictor_has_its_own_default_correction(tmp_path: Path) -> None:
    """EASY++ keeps Tsafrir's steps; learned re-predicts an expired job itself (before
    its first model, as here, that is the request: job 5 starts at once as above)."""
    path = expiring(tmp_path, 100)
    assert run_trace(path, SimOptions("easy-sjbf", "avg2"))[1]["correction"] == "steps"
    run, s = run_trace(path, SimOptions("easy-sjbf", "learned"))
    assert s["correction"] == "model"
    assert {o.job.id: o.start for o in run.outcomes}[5] == 30
    assert "correction" not in run_trace(path, SimOptions("easy-sjbf", "user"))[1]


@pytest.mark.slow  # two learned replays of 2,000 jobs: CI runs it
def test_a_learned_replay_is_the_same_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a training lag, ``learned`` trains on a worker thread, but each model is
    used from a fixed finished job on: two replays of the first 2,000 jobs of SDSC-SP2
    start every job at the same instant with the same prediction."""
    from hal.sim import run as sim_run
    from hal.sim.run import run_workload

    monkeypatch.setattr(sim_run, "SIM_TRAIN_LAG", 1000)

    w = load_workload(SDSC, Cleaning(first_jobs=2000))

    def replay() -> list[tuple[float, float]]:
        run, _ = run_workload(w, SimOptions("easy-sjbf", "learned"))
        return [(o.start, o.predicted) for o in run.outcomes]

    first = replay()
    assert first == replay()
    assert len({p for _, p in first}) > 100  # models were trained and used
