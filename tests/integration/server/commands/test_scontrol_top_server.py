"""``scontrol top`` on a live server, as Slurm 22.05.8's (docs/slurm-checks.md):
an administrator moves a user's pending jobs ahead of the user's others, silently;
the others pay for it, so the user's sum of priorities stays; a refusal is Slurm's line
``REASON for job LIST``, rc 1. HAL refused the command."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hal.testing.live import LiveServer
from hal.wire.jobs import JobSubmit

# pending until 2100 (--begin), so no pass starts it while the test looks at it
LATER = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", begin_time=4102444800.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("top")) as live:
        yield live


def test_top_moves_a_users_job_ahead_and_keeps_the_users_sum(server: LiveServer) -> None:
    alice = server.add_users("alice")["alice"]
    with server.client(alice) as c:
        ids = [str(c.submit(LATER).job_id) for _ in range(3)]
        before = {i: c.job(i).priority for i in ids}
        out = server.cli("scontrol", "top", f"{ids[2]},{ids[1]}")
        assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
        after = {i: c.job(i).priority for i in ids}
        assert after[ids[2]] > after[ids[1]] > after[ids[0]], after
        assert sum(after.values()) == sum(before.values())
        nice = {i: c.job(i).nice for i in ids}
        assert {i: before[i] - after[i] for i in ids} == nice  # through each one's nice
        squeue = server.cli("squeue", "-h", "-u", "alice", "--sort=-p", "-o", "%i")
        assert squeue.stdout.split() == [ids[2], ids[1], ids[0]], squeue
        for i in ids:
            c.cancel(i)


def test_refusals_are_slurms_lines(server: LiveServer) -> None:
    bob = server.add_users("bob")["bob"]
    with server.client(bob) as c:
        job = str(c.submit(LATER).job_id)
        cases = [
            (("top", job), bob, f"Access/permission denied for job {job}\n"),
            (("top", f"{job},999999"), None, f"Invalid job id specified for job {job},999999\n"),
            (("top",), None, "too few arguments for keyword:top\n"),
            (("top", job, job), None, "too many arguments for keyword:top\n"),
        ]
        for args, token, said in cases:
            out = server.cli("scontrol", *args, token=token)
            assert (out.returncode, out.stderr) == (1, said), (args, out)
        c.cancel(job)
        out = server.cli("scontrol", "top", job)
        assert (out.returncode, out.stderr) == (
            1,
            f"Job is no longer pending execution for job {job}\n",
        )
