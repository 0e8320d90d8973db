"""History's list with ``fields=`` (``GET /v1/jobs?history=true&fields=``, what ``sacct``
asks for; ``hal.api.job_list.history_body``) worked out field by field on a real server
over PostgreSQL: each job holds exactly the fields asked for, with the values of the
answer with every field (each job's whole ``JobInfo``, its steps and runs), for jobs of
every shape sacct shows (arrays, het jobs, steps ended and running, a requeue's earlier
run, cancelled, failed, timed out, GPUs and several nodes, cloud cost, a running job's
usage sample, pending, held and dependent jobs, a job the mirror no longer holds), for
sacct's own field sets, every field alone and all of them, and with ``omit_defaults``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hal.api.job_list import JOB_DEFAULTS, JOB_FIELDS
from hal.api.server import HalServer
from hal.compat import sacct
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.cloud_costs import RATE
from hal.core.job import Job
from hal.core.profiles import PROFILE_CLASS
from hal.core.states import JobState, PendingReason
from hal.server.users import ensure_user
from hal.slurm.steps import StepLayout
from hal.state import preempt
from hal.state.agents import AgentSession
from hal.state.codec import SYSTEM_CPU, USER_CPU, allocation_to_json
from hal.state.rows import RunRow, StepRow
from hal.state.steps import Step
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import store
from hal.wire.agent import JobUsage

NOW = 1_000_000.0
START = NOW - 600


def _ended(job: Job, state: JobState, **changes: Any) -> Job:
    return job.evolve(state=state, end_time=NOW - 60, **changes)


def _jobs() -> list[Job]:
    done = make_job(1).name("train").user("ann").account("physics").qos("high").comment("c")
    wide = make_job(2).nodes(2).gpus(2).cpus(8).mem_gib(16).constraint("ib").licenses(fs=2)
    array = [make_job(10 + k).array(10, k, max_running=2) for k in range(3)]
    het = [make_job(20 + k).het(20, k, 2).cpus(1 + k) for k in range(2)]
    return [
        _ended(
            done.running_on("n1", start=START).build(),
            JobState.COMPLETED,
            extra={USER_CPU: "5.5", SYSTEM_CPU: "1.5", "max_rss": "4096", "cpu_seconds": "7"},
        ),
        _ended(
            wide.running_on("n1", "n2", start=START).build(),
            JobState.FAILED,
            exit_code=3,
            extra={RATE: "2.5", PROFILE_CLASS: "memory"},
        ),
        _ended(
            make_job(3).running_on("n1", start=START).build(),
            JobState.CANCELLED,
            cancelled_by="root",
            exit_signal=15,
        ),
        _ended(make_job(4).limit(60).running_on("n2", start=START).build(), JobState.TIMEOUT),
        _ended(  # requeued once: its earlier run is a line of its own (sacct -D)
            make_job(5).running_on("n2", start=START).build(),
            JobState.COMPLETED,
            restarts=1,
            extra={preempt.PREEMPT_TIME: str(START - 100), preempt.REQUEUED_AFTER: "PREEMPTED"},
        ),
        *[_ended(j.running_on("n1", start=START).build(), JobState.COMPLETED) for j in array],
        *[_ended(j.running_on("n2", start=START).build(), JobState.COMPLETED) for j in het],
        make_job(30).running_on("n1", start=NOW - 100).build(),  # running, a usage sample
        make_job(31).depends("afterok:30").reason(PendingReason.DEPENDENCY).build(),
        make_job(32).hold().build(),
        make_job(33).begin(NOW + 300).build(),
        _ended(make_job(40).running_on("n1", start=START).build(), JobState.OUT_OF_MEMORY),
    ]


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[HalServer]:
    clock = VirtualClock(NOW)
    served = HalServer(HalConfig(cluster_name="t"), pg_url, clock, data_dir=tmp_path / "data")
    asyncio.run(served.cluster.load())
    cluster = served.cluster
    for name in ("n1", "n2"):
        cluster.nodes[name] = make_node(name).cpus(16).gpus(4).build()
        cluster.agent_sessions[name] = AgentSession(name)
    store(cluster, *_jobs())
    cluster.jobs.pop(40)  # ended long ago: read from the store alone
    usage = JobUsage(job_id=30, attempt=0, rss_bytes=5 << 20, max_rss_bytes=7 << 20,
                     cpu_seconds=3.5, user_cpu_seconds=3.0, system_cpu_seconds=0.5)  # fmt: skip
    cluster.agent_sessions["n1"].usage = {30: (NOW - 5, usage)}
    db = cluster.store
    for job_id, step_id in ((1, 0), (1, 1), (2, 0), (5, 0), (20, 0), (21, 0), (40, 0)):
        db.record_step(
            StepRow(
                job_id=job_id,
                step_id=step_id,
                name="sh",
                nodelist="n1",
                ntasks=2,
                state="FAILED" if step_id else "COMPLETED",
                exit_code=step_id,
                start_time=START + 10,
                end_time=START + 100,
                max_rss_bytes=1 << 20,
                max_rss_node="n1",
                max_rss_task=1,
                ave_rss_bytes=1 << 19,
                total_cpu_seconds=3.0,
                cpus=4,
                memory_bytes=1 << 30,
                gpu_max_mem_bytes=1 << 30 if job_id == 2 else None,
                gpu_ave_mem_bytes=1 << 29,
                gpu_max_util=90,
                gpu_ave_util=50.0,
                attempt=1 if job_id == 5 else 0,
            )
        )
    with db.transaction() as tx:  # (as a requeue keeps the run it ended)
        tx.add_runs(
            [
                RunRow(
                    job_id=5,
                    attempt=0,
                    state="PREEMPTED",
                    exit_code=0,
                    exit_signal=0,
                    partition="batch",
                    submit_time=START - 200,
                    eligible_time=START - 200,
                    start_time=START - 190,
                    end_time=START - 100,
                    allocation=allocation_to_json(cluster.jobs[5].allocation),
                    max_rss=1024,
                    cpu_seconds=2.0,
                    lost_work=90.0,
                    cost=0.5,
                )
            ]
        )
    layout = StepLayout(("n1",), (2,))
    served.ctx.steps.steps[(30, 0, 0)] = Step(
        job_id=30, step_id=0, attempt=0, name="srun", layout=layout, start_time=NOW - 90,
        cpu_count=2, memory_bytes=1 << 30,
    )  # fmt: skip
    yield served
    served.ctx.steps.steps.clear()
    cluster.store.close()


def _history(client: TestClient, token: str, **params: str) -> list[dict[str, Any]]:
    answer = client.get(
        "/v1/jobs",
        params={"history": "true", **params},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text
    jobs: list[dict[str, Any]] = answer.json()["jobs"]
    return jobs


def _sacct_fields(*argv: str) -> frozenset[str]:
    request = sacct.parse_request([*argv], NOW, None)
    assert request is not None
    return frozenset(sacct.request_fields(request))


def test_the_fields_answer_is_the_full_answer_restricted_to_those_fields(
    server: HalServer,
) -> None:
    token = ensure_user(server.store, "admin", admin=True, now=NOW)
    assert token is not None
    client = TestClient(server.app)
    full = _history(client, token)
    by_id = {job["id"]: job for job in full}
    # the shapes are there, so that each comparison below can fail
    assert sorted(by_id) == [1, 2, 3, 4, 5, 10, 11, 12, 20, 21, 30, 31, 32, 33, 40]
    assert [len(by_id[i]["steps"]) for i in (1, 2, 30, 40)] == [2, 1, 1, 1]
    assert by_id[2]["steps"][0]["gpu"] is not None and by_id[30]["steps"][0]["end_time"] is None
    assert by_id[5]["runs"][0]["state"] == "PREEMPTED" and by_id[5]["runs"][0]["nodes"]
    assert by_id[2]["gpus"] == 4 and by_id[2]["cost"] is not None
    assert by_id[30]["max_rss_bytes"] == 7 << 20 and by_id[30]["usage_time"] == NOW - 5
    assert by_id[21]["display_id"] == "20+1" and by_id[11]["display_id"] == "10_1"
    assert by_id[3]["cancelled_by"] == "root" and by_id[31]["dependency"]
    every = frozenset(JOB_FIELDS)
    sets = [
        _sacct_fields("-a"),
        _sacct_fields("-a", "-l"),
        _sacct_fields("-a", "-o", "JobID,TRESUsageInMax,AllocTRES,Cost,LostWork,Interrupted"),
        frozenset({"steps"}),
        frozenset({"runs", "id"}),
        frozenset({"malleable", "feedback_action", "profile_class"}),
        *(frozenset({name}) for name in JOB_FIELDS),
        every,
    ]
    for fields in sets:
        some = _history(client, token, fields=",".join(sorted(fields)))
        assert some == [{k: v for k, v in job.items() if k in fields} for job in full], fields
        # in the same order too: the bytes of the full answer's fields
        assert [list(job) for job in some] == [[k for k in job if k in fields] for job in full]
    for fields in (*sets[:3], every):
        compact = _history(client, token, fields=",".join(sorted(fields)), omit_defaults="true")
        assert len(compact) == len(full)
        for short, whole in zip(compact, full, strict=True):
            assert all(k not in JOB_DEFAULTS or v != JOB_DEFAULTS[k] for k, v in short.items())
            filled = {k: short.get(k, JOB_DEFAULTS.get(k)) for k in fields}
            assert filled == {k: v for k, v in whole.items() if k in fields}
    # every job without its fields: an ordinary sacct's window and its filters alike
    some = _history(client, token, fields="id,state", state="CD,F", user="ann")
    assert some == [{"id": 1, "state": "COMPLETED"}]
