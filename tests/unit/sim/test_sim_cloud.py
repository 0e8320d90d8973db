"""The cloud replay (``hal.sim.cloud``), on hand-made traces of four one-CPU nodes where
each policy's schedule and bill can be worked out by hand.

Trace: job 1 holds all four CPUs for 1,000 s from 0; job 2 (1 CPU, 100 s) comes at 10
and would start at 1,000 on the owned machine. The autoscaler looks every 60 s, from 0;
a node boots in 100 s and costs 3.6 an hour (0.001 a second).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hal.core.errors import InvalidRequest
from hal.core.patience import parse_patience
from hal.core.resources import GiB
from hal.sim import Cleaning, ClusterModel, Simulation, load_workload, scheduler_for
from hal.sim.cloud import CloudModel, cloud_summary, replay_cloud, sim_groups
from hal.sim.run import make_predictor

TRACE = [(1, 0, 1000, 4, 1000), (2, 10, 100, 1, 100)]
PRICE = 3.6


def replay(path: Path, policy: str, groups: Any = None, **knobs: Any) -> dict[str, Any]:
    workload = load_workload(path, Cleaning())
    predictor = make_predictor("perfect", workload)
    cluster = ClusterModel.for_procs(workload.machine_procs, 1)
    sim = Simulation(workload.jobs, cluster, scheduler_for("easy", predictor), predictor=predictor)
    groups = groups or sim_groups(1, 2 * GiB, 4, [("od", "on_demand", PRICE, 0.0)], 100.0)
    result = replay_cloud(sim, CloudModel(groups, policy=policy, interval_s=60.0, **knobs))
    summary = cloud_summary(result)
    summary["ends"] = {o.job.id: o.end for o in result.run.outcomes}
    return summary


def test_never_waits_for_the_owned_machine(write_trace: Callable[..., Path]) -> None:
    s = replay(write_trace(TRACE), "never")
    assert s["ends"] == {1: 1000, 2: 1100}
    assert (s["cloud_cost"], s["bursts"]) == (0, 0)
    assert s["mean_wait_s"] == pytest.approx((0 + 990) / 2, abs=0.1)


def test_the_decision_bursts_at_the_first_pass_that_sees_the_long_wait(
    write_trace: Callable[..., Path],
) -> None:
    """Forecast start 1,000 > 60 + boot 100: nodes asked at 60, job 2 runs 160-260."""
    s = replay(write_trace(TRACE), "oracle")
    assert s["ends"] == {1: 1000, 2: 260}
    assert s["bursts"] == 1 and s["by_group"] == {"od": 1}
    assert s["cloud_cost"] == pytest.approx(0.2)  # 200 node-seconds at 0.001
    assert s["mean_wait_s"] == pytest.approx((0 + 150) / 2, abs=0.1)


def test_patience_keeps_a_job_on_the_owned_machine(write_trace: Callable[..., Path]) -> None:
    # 1,000 is not later than 60 + 100 + 1,000 (nor than any later pass's)
    s = replay(write_trace(TRACE), "oracle", patience=parse_patience("1000"))
    assert s["ends"] == {1: 1000, 2: 1100} and s["bursts"] == 0
    # 10x its own 100 s limit is the same patience
    assert replay(write_trace(TRACE), "oracle", patience=parse_patience("10x"))["bursts"] == 0


def test_wait_n_bursts_once_the_job_has_waited_n(write_trace: Callable[..., Path]) -> None:
    """Waited 590 s at the pass at 600, 650 s at 660: asked at 660, runs 760-860."""
    s = replay(write_trace(TRACE), "wait_n", wait_n_s=600.0)
    assert s["ends"] == {1: 1000, 2: 860}
    assert s["cloud_cost"] == pytest.approx(0.2)


def spot_groups(rate: float) -> Any:
    return sim_groups(
        1,
        2 * GiB,
        4,
        [("od", "on_demand", PRICE, 0.0), ("spot", "spot", PRICE * 0.35, rate)],
        100.0,
    )


def test_interruptions_requeue_the_job_and_lose_its_run(write_trace: Callable[..., Path]) -> None:
    """Spot taken back every 50 s on average: wait_n (the cheapest hour) keeps sending
    job 2 there; each interruption requeues it, and it ends once a try lasts."""
    s = replay(write_trace(TRACE), "wait_n", groups=spot_groups(72.0), wait_n_s=0.0, seed=3)
    assert s["interruptions"] >= 1 and s["bursts"] == s["interruptions"] + (s["cloud_jobs"])
    assert s["lost_work_s"] > 0 and not math.isnan(s["ends"][2])  # it ran in the end
    assert s["by_group"]["od"] == 0
    per_try = PRICE * 0.35 * 200 / 3600  # boot + run, the most one try is paid
    assert per_try <= s["cloud_cost"] <= per_try * s["bursts"] + 1e-9
    # checkpoints every 10 s: no interruption loses more than 10 s of run
    kept = replay(
        write_trace(TRACE), "wait_n", groups=spot_groups(72.0), wait_n_s=0.0, checkpoint_s=10.0
    )
    assert kept["interruptions"] >= 1
    assert kept["lost_work_s"] <= 10.0 * kept["interruptions"]


def test_the_decision_prices_the_spot_risk(write_trace: Callable[..., Path]) -> None:
    """Where spot is taken back this often, on demand costs less to finish."""
    s = replay(write_trace(TRACE), "oracle", groups=spot_groups(72.0))
    assert s["by_group"] == {"od": 1, "spot": 0} and s["interruptions"] == 0
    calm = replay(write_trace(TRACE), "oracle", groups=spot_groups(0.001))
    assert calm["by_group"] == {"od": 0, "spot": 1}


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="choose from never, wait_n, hal, oracle"):
        CloudModel((), policy="always")
