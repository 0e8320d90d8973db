"""``hal bench cloud``: the four policies on a slice of KTH-SP2 (the tests' own copy),
through the command itself; the JSON's shape, and figures that come from the run."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from hal.bench.cloud import _warm, cpu_model
from hal.cli.main import main
from hal.sim import Cleaning, ClusterModel, Simulation, load_workload, scheduler_for
from hal.sim.run import make_predictor
from hal.testing.traces import trace_path

KTH = trace_path("KTH-SP2-1996-2.swf.gz")
KEYS = {"mean_wait_s", "mean_bsld", "cloud_cost", "lost_work_s"}


@pytest.fixture(scope="module")
def out() -> dict[str, Any]:
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    argv = [
        "bench", "cloud", "--trace", str(KTH), "--skip", "300", "--jobs", "200",
        "--wait-n", "600", "--burst-after", "0,1x", "--interruption-rate", "0.05", "--json",
    ]  # fmt: skip
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    result: dict[str, Any] = json.loads(buf.getvalue())
    return result


def test_the_json_has_each_policy_with_its_figures(out: dict[str, Any]) -> None:
    assert out["cpu"] == cpu_model()
    assert "--skip 300 --jobs 200" in out["command"]
    case = out["cases"]["trace"]
    assert (case["jobs"], case["skipped_jobs"], case["machine_procs"]) == (200, 300, 100)
    for policy in ("never", "wait_n", "hal", "oracle"):
        assert set(case[policy]) >= KEYS, policy
        assert case[policy]["jobs"] + case[policy]["unfinished"] == 200
    assert [g["market"] for g in case["groups"]] == ["on_demand", "spot"]
    od, spot = case["groups"]
    assert spot["price_per_hour"] == pytest.approx(od["price_per_hour"] * 0.35, rel=1e-3)
    assert spot["interruption_rate_per_hour"] == 0.05
    assert [p["burst_after"] for p in case["sweep"]["hal"]] == ["0", "1x"]
    assert set(case["goal"]) == {"wait_n_600"}
    # the ablation: wait_n choosing its group by expected cost, once per N
    assert [p["wait_n_s"] for p in case["wait_n_costed"]] == [600]
    assert set(case["wait_n_costed"][0]) >= KEYS
    assert isinstance(case["goal"]["wait_n_600"]["met"], bool)


def test_the_figures_come_from_the_run(out: dict[str, Any]) -> None:
    case = out["cases"]["trace"]
    never, wait_n = case["never"], case["wait_n"]
    assert never["cloud_cost"] == 0 and never["bursts"] == 0 and never["lost_work_s"] == 0
    # wait_n burst on this slice, and paid for it: cost and bursts go together
    assert wait_n["bursts"] > 0 and wait_n["cloud_cost"] > 0
    assert wait_n["mean_wait_s"] < never["mean_wait_s"]
    assert sum(wait_n["by_group"].values()) >= wait_n["bursts"]
    # work is lost only to interruptions
    for policy in ("wait_n", "hal", "oracle"):
        p = case[policy]
        assert p["interruptions"] > 0 or p["lost_work_s"] == 0
    # never is the plain simulator on the same jobs: its mean wait is the engine's
    whole = load_workload(KTH, Cleaning(first_jobs=500))
    window = whole.jobs[300:500]
    cluster = ClusterModel.for_procs(whole.machine_procs, 1)
    predictor = make_predictor("learned", replace(whole, jobs=window))
    _warm(predictor, whole, 300, cluster)
    run = Simulation(window, cluster, scheduler_for("easy", predictor), predictor=predictor).run()
    waits = [o.start - o.job.submit for o in run.outcomes]
    assert never["mean_wait_s"] == pytest.approx(float(np.mean(waits)), abs=0.1)


def test_bad_arguments_say_what_to_write(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "cloud", "--cases", "nowhere", "--json"])
    assert "choose from sdsc-sp2, kth-sp2" in capsys.readouterr().err
