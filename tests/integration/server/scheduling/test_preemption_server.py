"""Preemption in the live server, with real agents and real processes.

One agent, 2 CPUs. A ``low`` QoS job fills it; a ``high`` job (whose QoS lists ``low``
in ``preempt``) arrives: the low job is sent its ``--signal`` (it checkpoints), after the
grace time it is ended, requeued (keeping its submit time) and runs again when the high
job is done. With ``preempt_mode = "cancel"`` the victim ends PREEMPTED instead. Under a
grace time of 0 (QoS ``ckpt``) a ``--signal`` job still gets its signal and its SECS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.priority import priority_from_dict
from hal.core.preemption import PreemptionPolicy, PreemptMode, PreemptType
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

POLICY = priority_from_dict(
    {
        "qos": [
            {"name": "high", "priority": 100, "preempt": ["low", "scratch", "ckpt"]},
            {"name": "low", "priority": 0},
            {"name": "ckpt", "priority": 0, "grace_time": 0},  # --signal's SECS instead
            {"name": "scratch", "priority": 0, "preempt_mode": "cancel"},
        ]
    }
)
PREEMPTION = PreemptionPolicy(PreemptType.QOS, PreemptMode.REQUEUE, grace_time_s=3)
# traps USR1 (its --signal): writes a checkpoint and exits; otherwise runs 5 minutes
CHECKPOINTING = """#!/bin/bash
trap 'echo saved > "$PWD/ckpt.$SLURM_JOB_ID.$SLURM_RESTART_COUNT"; exit 0' USR1
echo "run $SLURM_RESTART_COUNT" >> "$PWD/runs.$SLURM_JOB_ID"
for i in $(seq 300); do sleep 1; done
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(
        tmp_path_factory.mktemp("hal"),
        config_overrides={"kill_wait_seconds": 2, "priority": POLICY, "preemption": PREEMPTION},
    )
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def _job(tmp: Path, qos: str, script: str, **extra: object) -> JobSubmit:
    return JobSubmit(
        script=script,
        workdir=str(tmp),
        time_limit_seconds=600,
        cpus_per_task=2,
        qos=qos,
        **extra,  # type: ignore[arg-type]
    )


def test_a_high_qos_job_preempts_and_the_victim_checkpoints_and_requeues(
    live: LiveServer, tmp_path: Path
) -> None:
    with live.client() as client:
        low = client.submit(_job(tmp_path, "low", CHECKPOINTING, signal="B:USR1@60")).job_id
        wait_until(lambda: client.job(low).state == "RUNNING", message="the low job")
        wait_until((tmp_path / f"runs.{low}").exists, message="its first run")
        submitted = client.job(low).submit_time
        high = client.submit(_job(tmp_path, "high", "#!/bin/sh\nsleep 300\n")).job_id
        wait_until(lambda: client.job(high).state == "RUNNING", 30, message="the high job")
        # it was given its signal and saved its work before it was ended
        assert (tmp_path / f"ckpt.{low}.0").read_text().strip() == "saved"
        info = client.job(low)
        assert info.state == "PENDING" and info.restarts == 1
        assert info.requeued_after == "PREEMPTED" and info.preempt_time is not None
        assert info.submit_time == submitted  # keeps its place (age) in the queue
        kinds = [(e.kind, e.data) for e in client.events(follow=False) if e.job_id == low]
        preempted = [d for k, d in kinds if k == "job.preempted"]
        assert preempted and preempted[0]["by"] == high and preempted[0]["mode"] == "requeue"
        assert any(k == "job.requeued" and d.get("after") == "PREEMPTED" for k, d in kinds)
        metrics = http.get(f"{live.url}/metrics", timeout=10).text
        assert 'hal_jobs_preempted_total{mode="requeue",partition="debug"} 1.0' in metrics
        # sacct-style history: the high job runs, the low one waits for the CPUs
        client.cancel(str(high))
        wait_until(lambda: client.job(low).state == "RUNNING", 30, message="the low job again")
        wait_until(
            lambda: len((tmp_path / f"runs.{low}").read_text().splitlines()) == 2,
            message="its second run",
        )
        assert (tmp_path / f"runs.{low}").read_text().splitlines() == ["run 0", "run 1"]
        client.cancel(str(low))
        wait_until(lambda: client.job(low).state == "CANCELLED", message="cleanup")


def test_cancel_mode_ends_the_victim_preempted(live: LiveServer, tmp_path: Path) -> None:
    with live.client() as client:
        victim = client.submit(_job(tmp_path, "scratch", "#!/bin/sh\nsleep 300\n")).job_id
        wait_until(lambda: client.job(victim).state == "RUNNING", message="the scratch job")
        high = client.submit(_job(tmp_path, "high", "#!/bin/sh\nsleep 300\n")).job_id
        wait_until(lambda: client.job(high).state == "RUNNING", 30, message="the high job")
        info = client.job(victim)
        assert info.state == "PREEMPTED" and info.restarts == 0
        out = live.cli("squeue", "-t", "all", "-j", str(victim), "-h", "-o", "%T")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["PREEMPTED"]
        client.cancel(str(high))


def test_the_config_is_what_the_server_runs(live: LiveServer) -> None:
    server = live.server
    assert server is not None
    config = server.config  # type: ignore[attr-defined]
    assert dataclasses.asdict(config.preemption)["grace_time_s"] == 3


@pytest.mark.parametrize(
    ("qos", "sig", "grace_s"),
    [("low", "B:USR1@60", 3.0), ("ckpt", "B:USR1@4", 4.0)],  # grace time 0: its @SECS
)
def test_a_victim_keeps_running_through_its_grace_time_and_explain_says_why(
    live: LiveServer, tmp_path: Path, qos: str, sig: str, grace_s: float
) -> None:
    # notes the signal but does not stop: it runs on until the grace time is over
    stubborn = """#!/bin/bash
trap 'echo noted >> "$PWD/signalled.$SLURM_JOB_ID"' USR1
touch "$PWD/trapping.$SLURM_JOB_ID"
for i in $(seq 300); do sleep 0.2; done
"""
    with live.client() as client:
        low = client.submit(_job(tmp_path, qos, stubborn, signal=sig)).job_id
        # its trap set: a USR1 before it would end the script (bash's default action)
        wait_until((tmp_path / f"trapping.{low}").exists, message="the low job's trap")
        high = client.submit(_job(tmp_path, "high", "#!/bin/sh\nsleep 300\n")).job_id
        wait_until((tmp_path / f"signalled.{low}").exists, message="the signal")
        assert client.job(low).state == "RUNNING"  # within its grace time
        # what `hal explain` prints as "why", from the API: the command's interpreter can
        # take longer to start on a busy machine than the grace time lasts
        why = client.explain(high).detail
        assert why.startswith(f"job(s) {low} are being preempted for it"), why
        wait_until(lambda: client.job(high).state == "RUNNING", 30, message="the high job")
        events = [e for e in client.events(follow=False) if e.job_id == low]
        assert "job.preempt_grace_over" in [e.kind for e in events]
        assert [e.data["grace_s"] for e in events if e.kind == "job.preempted"] == [grace_s]
        assert client.job(low).state == "PENDING"
        client.cancel(str(high))
        client.cancel(str(low))
