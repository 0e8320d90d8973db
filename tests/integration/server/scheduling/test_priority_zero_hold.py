"""``scontrol update JobId=N Priority=0`` holds the job, as in Slurm (where ``scontrol
hold`` is that very update): by its owner a hold the owner releases (``JobHeldUser``), by
an administrator, of any job, an administrator's hold (``JobHeldAdmin``);
``scontrol release`` lets it be scheduled again. The owner's update was refused ("its
owner may lower it (1 to N)"), and an administrator's pinned the job at priority 0
without holding it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing import http
from hal.testing.live import LiveServer
from hal.wire.jobs import JobSubmit

# pending until 2100 (--begin), so no pass starts it while the test looks at it
LATER = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", begin_time=4102444800.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("prio0")) as live:
        yield live


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> str:
    return server.add_users("alice")["alice"]


def submitted(server: LiveServer, token: str) -> str:
    with server.client(token) as c:
        return str(c.submit(LATER).job_id)


def test_the_owners_priority_zero_is_a_hold_the_owner_releases(
    server: LiveServer, alice: str
) -> None:
    job = submitted(server, alice)
    with server.client(alice) as c:
        before = c.job(job).priority
        out = server.cli("scontrol", "update", f"JobId={job}", "Priority=0", token=alice)
        assert out.returncode == 0, out.stderr
        held = c.job(job)
        assert (held.held, held.reason) == (True, "JobHeldUser")
        out = server.cli("scontrol", "release", job, token=alice)
        assert out.returncode == 0, out.stderr
        released = c.job(job)
        assert not released.held and released.reason != "JobHeldUser"
        assert released.priority == before > 0  # scheduled by its own priority again
        c.cancel(job)


def test_an_administrators_priority_zero_is_an_administrators_hold(
    server: LiveServer, alice: str
) -> None:
    job = submitted(server, alice)
    with server.client(alice) as c:
        out = server.cli("scontrol", "update", "job", job, "Priority=0")  # the administrator
        assert out.returncode == 0, out.stderr
        assert (c.job(job).held, c.job(job).reason) == (True, "JobHeldAdmin")
        refused = server.cli("scontrol", "release", job, token=alice)
        assert refused.returncode != 0 and "ask one to release it" in refused.stderr
        assert server.cli("scontrol", "release", job).returncode == 0
        assert not c.job(job).held
        c.cancel(job)


def test_priority_zero_for_a_job_no_longer_pending_is_refused(
    server: LiveServer, alice: str
) -> None:
    """As Slurm 22.05.8's "Job has already finished for job N": nothing of an ended job
    changes (HAL said "no longer pending")."""
    job = submitted(server, alice)
    with server.client(alice) as c:
        c.cancel(job)
        out = server.cli("scontrol", "update", f"JobId={job}", "Priority=0", token=alice)
        assert out.returncode != 0
        assert out.stderr.endswith(f"Job has already finished for job {job}\n"), out.stderr
        assert not c.job(job).held


def test_priority_zero_for_an_array_holds_the_tasks_still_pending(
    server: LiveServer, alice: str
) -> None:
    """As ``scontrol hold`` of an array: a task that has ended is left as it is."""
    with server.client(alice) as c:
        array = str(c.submit(dataclasses.replace(LATER, array="0-2")).job_id)
        c.cancel(f"{array}_1")
        out = server.cli("scontrol", "update", f"JobId={array}", "Priority=0", token=alice)
        assert out.returncode == 0, out.stderr
        tasks = sorted((j.array_task_id, j.held) for j in c.jobs() if str(j.array_job_id) == array)
        assert tasks == [(0, True), (2, True)]
        c.cancel(array)


def shown_priorities(server: LiveServer, token: str, jobs: list[str]) -> dict[str, set[str]]:
    """Each job's priority as ``scontrol show job``, ``squeue -o %Q`` and ``squeue -O
    Priority`` print it, REST's JobInfo gives it and the dashboard's queue sends it."""
    shown: dict[str, set[str]] = {job: set() for job in jobs}
    for job in jobs:
        out = server.cli("scontrol", "show", "job", job, token=token)
        assert out.returncode == 0, out.stderr
        shown[job].add(out.stdout.split("Priority=")[1].split()[0])
    listed = ",".join(jobs)
    for fmt in (["-o", "%i %Q"], ["-O", "JobID,Priority"]):
        out = server.cli("squeue", "-h", "-j", listed, *fmt, token=token)
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            job, priority = line.split()
            shown[job].add(priority)
    with server.client(token) as c:
        for job in jobs:
            shown[job].add(str(c.job(job).priority))
    queue = http.get(
        server.url + "/v1/observe/queue",
        params={"state": "PENDING", "q": "shown-priority"},
        headers={"Authorization": f"Bearer {token}"},
    )
    queue.raise_for_status()
    rows = queue.json()["jobs"]
    assert sorted(str(row["id"]) for row in rows) == sorted(jobs)
    for row in rows:
        shown[str(row["id"])].add(str(row["priority"]))
    return shown


def test_a_held_job_shows_priority_zero_until_it_is_released(
    server: LiveServer, alice: str
) -> None:
    """In Slurm a hold is priority 0: ``scontrol show job`` says ``Priority=0`` (with
    Reason=JobHeldUser), squeue's %Q 0, however the job was held (``scontrol hold``,
    ``update Priority=0``, ``sbatch -H``), and ``scontrol release`` gives it a computed
    priority again. HAL showed the priority the job would have once released."""
    named = dataclasses.replace(LATER, name="shown-priority")
    with server.client(alice) as c:
        by_hold, by_update = (str(c.submit(named).job_id) for _ in range(2))
        before = c.job(by_hold).priority
    out = server.cli(
        "sbatch", "-H", "-J", "shown-priority", "--begin=2100-01-01", "--parsable",
        "--wrap", "true", token=alice, cwd=Path("/tmp"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    by_sbatch = out.stdout.strip()
    assert server.cli("scontrol", "hold", by_hold, token=alice).returncode == 0
    update = f"JobId={by_update}"
    assert server.cli("scontrol", "update", update, "Priority=0", token=alice).returncode == 0
    jobs = [by_hold, by_update, by_sbatch]
    assert shown_priorities(server, alice, jobs) == {job: {"0"} for job in jobs}

    assert server.cli("scontrol", "release", ",".join(jobs), token=alice).returncode == 0
    released = shown_priorities(server, alice, jobs)
    assert released[by_hold] == released[by_update] == {str(before)}
    assert len(released[by_sbatch]) == 1 and int(*released[by_sbatch]) > 0
    with server.client(alice) as c:
        for job in jobs:
            c.cancel(job)


def test_an_administrators_priority_zero_of_his_own_job_is_an_administrators_hold(
    server: LiveServer,
) -> None:
    """Checked with Slurm 22.05.8 (docs/slurm-checks.md): root's ``scontrol update
    jobid=N priority=0`` and ``scontrol hold N`` of root's own job give
    ``Reason=JobHeldAdmin``, as of any other job; only ``uhold`` is a user's hold. HAL
    called an administrator's hold of his own job a user's hold (JobHeldUser)."""
    with server.client() as c:  # the administrator's own jobs
        by_update, by_hold, by_uhold = (str(c.submit(LATER).job_id) for _ in range(3))
        out = server.cli("scontrol", "update", f"JobId={by_update}", "Priority=0")
        assert out.returncode == 0, out.stderr
        for verb, job in (("hold", by_hold), ("uhold", by_uhold)):
            out = server.cli("scontrol", verb, job)
            assert out.returncode == 0, out.stderr
        reasons = {job: (c.job(job).held, c.job(job).reason) for job in (by_update, by_hold)}
        assert reasons == {by_update: (True, "JobHeldAdmin"), by_hold: (True, "JobHeldAdmin")}
        assert (c.job(by_uhold).held, c.job(by_uhold).reason) == (True, "JobHeldUser")
        for job in (by_update, by_hold, by_uhold):
            assert server.cli("scontrol", "release", job).returncode == 0
            assert not c.job(job).held
            c.cancel(job)
