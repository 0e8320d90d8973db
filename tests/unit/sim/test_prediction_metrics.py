"""The prediction figures of a run, on a micro trace whose predictions are known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hal.sim import SimOptions, run_trace


def test_avg2_learns_from_the_users_finished_jobs(write_trace: Any) -> None:
    """Four 100 s jobs asking for 1000 s, one after the other: the first is predicted
    at its request (no history, accuracy 0.1), the others at 100 s (accuracy 1)."""
    path: Path = write_trace([(i, 200.0 * i, 100, 1, 1000) for i in range(1, 5)])
    _, s = run_trace(path, SimOptions(policy="easy-sjbf", predictor="avg2"))
    assert s["prediction_accuracy"] == pytest.approx((0.1 + 3) / 4)
    assert s["prediction_mae_s"] == pytest.approx(900 / 4)
    assert s["underprediction_rate"] == 0.0


def test_runs_without_a_planning_predictor_still_report_the_request(write_trace: Any) -> None:
    path: Path = write_trace([(1, 0.0, 100, 1, 1000)])
    _, s = run_trace(path, SimOptions(policy="easy", predictor="user"))
    assert s["prediction_accuracy"] == pytest.approx(0.1)


def test_hal_predict_eval_on_a_trace(write_trace: Any, capsys: Any) -> None:
    """`hal predict eval --trace` replays the trace's own schedule: avg2 is exact once the
    user has history, the request never is."""
    import json

    from hal.cli.main import main

    path: Path = write_trace([(i, 200.0 * i, 100, 1, 1000) for i in range(1, 5)])
    rc = main(["predict", "eval", "--trace", str(path), "--predictors", "user,avg2", "--json"])
    assert rc in (0, None)
    out = json.loads(capsys.readouterr().out)
    by_name = {r["predictor"]: r for r in out["predictors"]}
    assert out["jobs"] == 4
    assert by_name["user"]["accuracy"] == pytest.approx(0.1)
    assert by_name["avg2"]["accuracy"] == pytest.approx((0.1 + 3) / 4)
