"""Anomaly detection in the live server, with injected faults: a job that hangs far past
its learned prediction, and a node on which every job fails (exit 1) while its peer's
succeed. Events, alerts (`/v1/alerts`, `hal alerts`), and the node drained with a
reason that `hal nodes` shows."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.state.node_reasons import server_user
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


def seed_quick_jobs(db_url: str, count: int = 300) -> None:
    """alice's and bob's `quick` jobs: they ask for 10 minutes and run 1 to 2 s."""
    from hal.state.store import SqlStateStore

    store = SqlStateStore(db_url)
    try:
        store.migrate()
        start = time.time() - 86_400
        with store.transaction() as tx:
            first = tx.reserve_job_ids(count)
            tx.insert_scripts([(first, "#!/bin/sh\ntrue\n")])
            jobs = [
                Job(
                    id=first + i,
                    spec=JobSpec(
                        user=("alice", "bob")[i % 2], script="", name="quick", workdir="/tmp"
                    ),
                    partition="debug",
                    state=JobState.COMPLETED,
                    submit_time=start + 10 * i,
                    start_time=start + 10 * i,
                    end_time=start + 10 * i + 1 + (i % 2),
                    time_limit_s=600,
                )
                for i in range(count)
            ]
            tx.insert_jobs(jobs, [first] * count)
    finally:
        store.close()


def wait_for_model(server: LiveServer) -> None:
    """Until the predictor has replayed the seeded history into a model."""
    with server.client() as c:
        wait_until(
            lambda: not c.predict_status().replaying and c.predict_status().model_version,
            timeout=60,
            message="the model from the history",
        )


def alerts(server: LiveServer) -> dict[str, Any]:
    r = http.get(
        server.url + "/v1/alerts", headers={"Authorization": f"Bearer {server.token}"}, timeout=5
    )
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def firing(server: LiveServer, name: str) -> list[dict[str, Any]]:
    return [a for a in alerts(server)["alerts"] if a["name"] == name]


def events(server: LiveServer, kind: str) -> list[Any]:
    with server.client() as c:
        return [e for e in c.events(0, follow=False) if e.kind == kind]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from hal.server.control_plane import sqlite_url

    data = tmp_path_factory.mktemp("hal")
    seed_quick_jobs(sqlite_url(data))
    with pytest.MonkeyPatch.context() as env:
        # overrun at 3 × the prediction with no extra hour; look twice a second
        env.setenv("HAL_ALERT_OVERRUN_MARGIN_S", "0")
        env.setenv("HAL_ANOMALY_INTERVAL_S", "0.5")
        overrides = {"kill_wait_seconds": 2, "drain_anomalous_nodes": True}
        with LiveServer(data, config_overrides=overrides) as live:
            wait_for_model(live)
            with live.agents(2, cpus=2, memory="1G"):
                yield live


def test_a_hanging_job_is_flagged_but_not_killed(server: LiveServer, tmp_path: Path) -> None:
    """alice's `quick` jobs run 1-2 s; one that hangs (sleeps) is reported once it has
    run 3 × its prediction: an event, an alert naming it, and it keeps running."""
    with server.client() as admin:
        token = admin.add_user("alice").token
    with server.client(token) as c:
        job_id = c.submit(
            JobSubmit(
                script="#!/bin/sh\nsleep 120\n",
                name="quick",
                workdir=str(tmp_path),
                time_limit_seconds=600,
            )
        ).job_id
        wait_until(lambda: c.job(job_id).state == "RUNNING", message="the job to start")
    try:
        wait_until(
            lambda: any(
                a["labels"]["job_id"] == str(job_id)
                for a in firing(server, "JobOverrunningPrediction")
            ),
            timeout=45,
            message="the overrun alert",
        )
        (event,) = [e for e in events(server, "job.overrunning") if e.job_id == job_id]
        predicted = float(event.data["predicted_s"])  # type: ignore[arg-type]
        assert predicted < 60  # learned from the history, not the 600 s asked for
        # both figures are rounded to 0.1 s in the event
        assert float(event.data["elapsed_s"]) >= 3 * predicted - 0.1  # type: ignore[arg-type]
        assert int(event.data["model_version"]) > 0  # type: ignore[call-overload]
        with server.client() as c:
            assert c.job(job_id).state == "RUNNING"  # flagged, never killed
        listed = server.cli("alerts")
        assert "JobOverrunningPrediction" in listed.stdout and f"job {job_id}" in listed.stdout
    finally:
        with server.client() as c:
            c.cancel(str(job_id))
    wait_until(
        lambda: (
            not any(
                a["labels"]["job_id"] == str(job_id)
                for a in firing(server, "JobOverrunningPrediction")
            )
        ),
        message="the alert to resolve once the job ended",
    )


def test_a_node_failing_every_job_is_flagged_and_drained(
    server: LiveServer, tmp_path: Path
) -> None:
    """The injected fault: every job fails (exit 1) on node1, none on node2. Six jobs on
    each: node1's failure rate (100 %) is far over its peer's (0 %)."""
    script = '#!/bin/sh\n[ "$SLURMD_NODENAME" = node1 ] && exit 1\nexit 0\n'
    with server.client() as c:
        ids = [
            c.submit(
                JobSubmit(
                    script=script, workdir=str(tmp_path), nodelist=[node], time_limit_seconds=60
                )
            ).job_id
            for node in ("node1", "node2") * 6
        ]
        wait_until(
            lambda: all(c.job(i).state in ("COMPLETED", "FAILED") for i in ids),
            timeout=60,
            message="the jobs to end",
        )
        states = {c.job(i).nodes[0]: c.job(i).state for i in ids}
        assert states == {"node1": "FAILED", "node2": "COMPLETED"}
        wait_until(lambda: c.node("node1").state == "DRAIN", message="node1 to be drained")
        node1, node2 = c.node("node1"), c.node("node2")
    # 6 failed of its jobs ended within the hour (the other test's job may be one more)
    assert re.fullmatch(r"HAL anomaly: 6/[67] jobs failed in 1 h, peers' median 0%", node1.reason)
    assert node1.reason_user == server_user() and node1.reason_time is not None  # sinfo -R
    assert node2.state == "UP"
    (alert,) = firing(server, "NodeFailureRateAnomalous")
    assert alert["labels"] == {"node": "node1"}
    (event,) = events(server, "node.anomalous")
    assert event.node == "node1" and event.data["failed"] == 6
    drained = [e for e in events(server, "node.updated") if e.node == "node1"]
    assert drained and drained[-1].state == "DRAIN"
    listed = server.cli("nodes")
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("node1 ")]
    assert "drain" in row and row.endswith(node1.reason)
    # the drained node takes no new work: a job for it waits
    with server.client() as c:
        pending = c.submit(
            JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), nodelist=["node1"])
        ).job_id
        time.sleep(1.5)
        assert c.job(pending).state == "PENDING"
        c.cancel(str(pending))


def test_a_node_running_jobs_slowly_is_flagged_and_drained(tmp_path: Path) -> None:
    """The injected fault: on node1 every job runs 6 s, on node2 1 s. alice's and bob's
    `quick` jobs were learned at 1-2 s, so node1's 10 ran about 4 times their prediction,
    node2's 40 about as predicted (or less): node1's run times are inflated against the
    rest, for both users (one user's jobs alone would say nothing of the node)."""
    from hal.server.control_plane import sqlite_url

    data = tmp_path / "hal"
    data.mkdir()
    seed_quick_jobs(sqlite_url(data))
    script = '#!/bin/sh\nif [ "$SLURMD_NODENAME" = node1 ]; then sleep 6; else sleep 1; fi\n'
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HAL_ANOMALY_INTERVAL_S", "0.5")
        overrides = {"drain_anomalous_nodes": True}
        with LiveServer(data, config_overrides=overrides) as live:
            wait_for_model(live)
            with live.client() as c:
                tokens = [c.add_user(user).token for user in ("alice", "bob")]
            # node1's jobs start at once, predicted from the history alone
            with live.agents(2, cpus=10, memory="1G"), live.client() as c:
                ids = []
                for i, node in enumerate(["node1"] * 10 + ["node2"] * 40):
                    with live.client(tokens[i % 2]) as user:
                        job = JobSubmit(script=script, name="quick", workdir=str(tmp_path),
                                        nodelist=[node], time_limit_seconds=600)  # fmt: skip
                        ids.append(user.submit(job).job_id)
                wait_until(
                    lambda: all(c.job(i).state == "COMPLETED" for i in ids),
                    timeout=60,
                    message="the jobs to end",
                )
                wait_until(lambda: c.node("node1").state == "DRAIN", message="node1 drained")
                node1, node2 = c.node("node1"), c.node("node2")
                assert node2.state == "UP"
                (alert,) = firing(live, "NodeRuntimeInflated")
                assert alert["labels"] == {"node": "node1"}
                (event,) = events(live, "node.runtime_inflated")
                # node1's jobs end within a moment of each other: the check that flags the
                # node may come before the last of them has ended
                assert event.node == "node1" and 5 <= event.data["jobs"] <= 10
                ratio, peers = float(event.data["ratio"]), float(event.data["peer_ratio"])
                assert ratio > 2 * peers
                assert not events(live, "node.anomalous")  # nothing failed
                listed = live.cli("nodes")
    match = re.fullmatch(
        r"HAL anomaly: jobs ran ([\d.]+)× their predicted time \((\d+) in 6 h\), others' ([\d.]+)×",
        node1.reason,
    )
    assert match, node1.reason
    assert int(match[2]) == event.data["jobs"]
    assert float(match[1]) == pytest.approx(ratio, rel=0.05)
    assert float(match[3]) == pytest.approx(peers, rel=0.05)
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("node1 ")]
    assert "drain" in row and row.endswith(node1.reason)
