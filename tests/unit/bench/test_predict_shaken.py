"""``hal bench predict``'s shaken replays: the same jobs, submit times moved a little."""

from __future__ import annotations

from pathlib import Path

from hal.bench.predict import shaken
from hal.sim.workload import load_workload


def test_a_shake_moves_submits_by_at_most_the_spread_and_keeps_every_job(
    tmp_path: Path,
) -> None:
    lines = ["; MaxProcs: 4"]
    for jid in range(1, 41):
        f = [jid, 100 * jid, -1, 50, 1, -1, -1, 1, 60, -1, 1, 1, 1, -1, 1, 1, -1, -1]
        lines.append(" ".join(str(v) for v in f))
    path = tmp_path / "t.swf"
    path.write_text("\n".join(lines) + "\n")
    w = load_workload(path)
    assert shaken(w, 0) is w
    one, again, other = shaken(w, 1), shaken(w, 1), shaken(w, 2)
    assert one == again and one != other  # seeded
    before = {j.id: j.submit for j in w.jobs}
    assert sorted(j.id for j in one.jobs) == sorted(before)
    assert all(abs(j.submit - before[j.id]) <= 30 for j in one.jobs)
    assert [j.submit for j in one.jobs] == sorted(j.submit for j in one.jobs)


def test_the_bench_replays_with_the_expiry_correction_as_hal_sim_run_does(
    tmp_path: Path,
) -> None:
    """The bench's stopwatch must not hide the pinned predictor from the simulator, which
    tells only a ``PinnedPredictor`` that a prediction expired: a replay with the request
    correction gives what ``hal sim run --correction request`` gives, and differs from
    the stepwise one on a workload whose run times jump."""
    from hal.bench.predict import replay, timed
    from hal.predict import PinnedPredictor
    from hal.sim.run import SimOptions, make_predictor, run_workload

    lines = ["; MaxProcs: 4"]
    for jid in range(1, 81):
        run = 30 if jid % 3 else 3000  # avg2 under-predicts every third job badly
        size = 4 if jid % 5 == 0 else (2 if jid % 2 else 1)
        f = [jid, 40 * jid, -1, run, size, -1, -1, size, 3600, -1, 1, 1, 1, -1, 1, 1, -1, -1]
        lines.append(" ".join(str(v) for v in f))
    path = tmp_path / "t.swf"
    path.write_text("\n".join(lines) + "\n")
    w = load_workload(path)
    assert isinstance(timed(make_predictor("learned", w)), PinnedPredictor)
    bench = replay(w, 1, "easy-sjbf", "avg2", "request")
    _, sim = run_workload(w, SimOptions(policy="easy-sjbf", predictor="avg2", correction="request"))
    assert bench["mean_bsld"] == round(sim["mean_bsld"], 4)
    steps = replay(w, 1, "easy-sjbf", "avg2", "steps")
    assert steps["mean_bsld"] != bench["mean_bsld"]
