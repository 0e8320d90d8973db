"""The predictor's anomalies on /metrics: what the JobOverrunningPrediction,
NodeFailureRateAnomalous and NodeRuntimeInflated rules of deploy/prometheus/hal-alerts.yml
read, exported from the control plane's own detector, in an exposition promtool accepts."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState
from hal.observe.config import ObserveConfig
from hal.server.observe.anomalies import AnomalyDetector
from hal.server.observe.metrics import HalMetrics
from hal.state.cluster import Cluster
from hal.testing.builders import make_job, make_node
from hal.wire.cloud import CloudGroupInfo, CloudStatus

RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "hal-alerts.yml"
CONFIG = ObserveConfig(node_fail_min_jobs=5, node_fail_window_s=3600.0)


def resting_group() -> CloudGroupInfo:
    return CloudGroupInfo(
        name="burst",
        provider="local",
        nodes=["b1"],
        cpus=4,
        memory_bytes=1 << 30,
        idle_seconds=300,
        boot_timeout_seconds=300,
        resting_until=1e10,
    )


def ended(job_id: int, node: str, state: JobState, end: float) -> Job:
    """Job ``job_id`` that ended on ``node`` at ``end``, of user u0, u1 or u2 by its id."""
    job = make_job(job_id).user(f"u{job_id % 3}").running_on(node, start=end - 10).build()
    return job.evolve(state=state, end_time=end)


def samples(m: HalMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def anomalous_cluster(cluster: Cluster, clock: VirtualClock) -> HalMetrics:
    """Node ``bad`` failed 4 of its 5 recent jobs, ``good`` none of 6; job 50 (partition
    gpu, on ``good``) runs 3701 s against a model's 100 s prediction; ``bad``'s jobs also
    ran 5 times their prediction, ``good``'s as predicted."""
    t = clock.now()
    predictions = {50: (100.0, 3)}

    async def scenario() -> HalMetrics:
        await cluster.load()
        cluster.nodes = {"bad": make_node("bad").build(), "good": make_node("good").build()}
        hung = make_job(50).partition("gpu").limit(86_400).running_on("good", start=t - 3701)
        job = hung.build()
        cluster.put(job)
        det = AnomalyDetector(cluster, CONFIG, predicted_at_start=predictions.get)
        states = [JobState.FAILED, JobState.NODE_FAIL, JobState.FAILED, JobState.FAILED]
        det._on_jobs([ended(i, "bad", s, t - 100 + i) for i, s in enumerate(states)])
        det._on_jobs([ended(4, "bad", JobState.COMPLETED, t - 90)])
        det._on_jobs([ended(10 + i, "good", JobState.COMPLETED, t - 100 + i) for i in range(6)])
        for i in range(40):  # runs a model predicted at 100 s: 5 times that on bad
            det.run_finished(ended(100 + i, "good", JobState.COMPLETED, t - 50), 100.0, 3, 100.0)
            if i < 8:
                det.run_finished(ended(30 + i, "bad", JobState.COMPLETED, t - 50), 100.0, 3, 500.0)
        await det.check(t)
        m = HalMetrics(cluster, clock)
        m.anomalies = det
        return m

    return asyncio.run(scenario())


def test_the_detectors_findings_are_gauges_without_job_ids(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = anomalous_cluster(cluster, clock)
    got = samples(m)
    over = {k: v for k, v in got.items() if k[0] == "hal_jobs_overrunning_prediction"}
    assert over == {
        ("hal_jobs_overrunning_prediction", (("node", "good"), ("partition", "gpu"))): 1
    }
    assert got[("hal_node_recent_jobs", (("node", "bad"), ("result", "failed")))] == 4
    assert got[("hal_node_recent_jobs", (("node", "bad"), ("result", "ok")))] == 1
    assert got[("hal_node_recent_jobs", (("node", "good"), ("result", "ok")))] == 6
    assert got[("hal_node_failure_rate_anomalous", (("node", "bad"),))] == 1
    assert got[("hal_node_failure_rate_anomalous", (("node", "good"),))] == 0
    assert got[("hal_node_runtime_ratio", (("node", "bad"),))] == 5.0
    assert got[("hal_node_runtime_ratio", (("node", "good"),))] == 1.0
    assert got[("hal_node_runtime_inflated", (("node", "bad"),))] == 1
    assert got[("hal_node_runtime_inflated", (("node", "good"),))] == 0
    assert not any("job_id" in dict(labels) for _, labels in got)


def test_a_calm_cluster_exports_zero_and_no_overruns(cluster: Cluster, clock: VirtualClock) -> None:
    """Before any job ended: every known node is 0 (a stable series for dashboards), and
    the overrun gauge has no series (the rule's ``> 0`` then has nothing to fire on)."""
    cluster.nodes = {"n1": make_node("n1").build()}
    m = HalMetrics(cluster, clock)
    m.anomalies = AnomalyDetector(cluster, CONFIG)
    got = samples(m)
    assert got[("hal_node_failure_rate_anomalous", (("node", "n1"),))] == 0
    assert got[("hal_node_runtime_inflated", (("node", "n1"),))] == 0
    assert not [k for k in got if k[0] in ("hal_jobs_overrunning_prediction",
                                            "hal_node_recent_jobs")]  # fmt: skip


def test_every_metric_the_alert_rules_use_is_exported(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """A rule on a metric nobody exports never fires: each ``hal_*`` name in the shipped
    rules must appear in the control plane's exposition (histograms by their base name)."""
    m = anomalous_cluster(cluster, clock)
    m.cloud_stats = lambda: CloudStatus(groups=[resting_group()])
    m.observe_registration("bad")
    m.cycle.observe(0.01)
    m.started.labels("batch").inc()
    exported = {
        f.name for f in text_string_to_metric_families(generate_latest(m.registry).decode())
    }
    exported |= {n + "_total" for n in exported} | {n + "_bucket" for n in exported}
    used: set[str] = set()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            used |= set(re.findall(r"\bhal_[a-z_]+", rule["expr"]))
    assert {
        "hal_jobs_overrunning_prediction",
        "hal_node_failure_rate_anomalous",
        "hal_node_runtime_inflated",
        "hal_cloud_group_resting",
    } <= used
    assert used <= exported, sorted(used - exported)


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package 'prometheus')")  # fmt: skip
def test_the_exposition_with_anomalies_passes_promtool(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = anomalous_cluster(cluster, clock)
    done = subprocess.run(["promtool", "check", "metrics"], input=generate_latest(m.registry),
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
