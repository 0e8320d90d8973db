"""QoS limits in the live server: with ``max_jobs_per_user = 1`` on QoS ``normal`` (the
QoS of a job that names none), a user's second job waits with Slurm's reason
``QOSMaxJobsPerUserLimit`` while the first runs, although the node has room for both;
another user's job still starts. ``max_submit_jobs_per_user = 2``: a third job is refused
at submit with Slurm's message. QoS ``short`` has ``max_wall``: a job naming no time limit
gets it (the partition has no MaxTime), as Slurm's acct_policy_validate gives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.priority import priority_from_dict
from hal.core.errors import InvalidRequest
from hal.core.priority import SUBMIT_LIMIT_MESSAGE
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

POLICY = priority_from_dict(
    {
        "qos": [
            {"name": "normal", "max_jobs_per_user": 1, "max_submit_jobs_per_user": 2},
            {"name": "short", "max_wall": "10:00"},
        ]
    }
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    server = LiveServer(
        tmp_path_factory.mktemp("hal"),
        config_overrides={"kill_wait_seconds": 2, "priority": POLICY},
    )
    with server, server.agents(1, cpus=4, memory="1G"):
        yield server, server.add_users("alice", "bob")


def _job(tmp: Path, time_limit: int | None = 300, qos: str | None = None) -> JobSubmit:
    return JobSubmit(
        script="#!/bin/sh\nsleep 300\n",
        workdir=str(tmp),
        time_limit_seconds=time_limit,
        cpus_per_task=1,
        qos=qos,
    )


def test_second_job_pends_with_qos_max_jobs_per_user(
    live: tuple[LiveServer, dict[str, str]], tmp_path: Path
) -> None:
    server, tokens = live
    with server.client(tokens["alice"]) as alice, server.client(tokens["bob"]) as bob:
        first = alice.submit(_job(tmp_path)).job_id
        wait_until(lambda: alice.job(first).state == "RUNNING", message="alice's first job")
        second = alice.submit(_job(tmp_path)).job_id
        theirs = bob.submit(_job(tmp_path)).job_id
        wait_until(lambda: bob.job(theirs).state == "RUNNING", message="bob's job")
        wait_until(
            lambda: alice.job(second).reason == "QOSMaxJobsPerUserLimit", message="the reason"
        )
        assert alice.job(second).state == "PENDING"

        out = server.cli("squeue", "--states", "PD", token=tokens["alice"])
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if x.split()[:1] == [str(second)])
        assert "(QOSMaxJobsPerUserLimit)" in line

        with pytest.raises(InvalidRequest) as refused:
            alice.submit(_job(tmp_path))
        assert SUBMIT_LIMIT_MESSAGE in str(refused.value)

        alice.cancel(str(first))
        wait_until(lambda: alice.job(second).state == "RUNNING", message="the second job")
        alice.cancel(str(second))
        bob.cancel(str(theirs))


def test_a_job_without_time_gets_the_qos_max_wall(
    live: tuple[LiveServer, dict[str, str]], tmp_path: Path
) -> None:
    """A job submitted without ``--time`` under a QoS with MaxWall, in a partition with
    no MaxTime and no DefaultTime, used to get an unlimited time limit and so pend for
    ever with ``QOSMaxWallDurationPerJobLimit``; Slurm gives it the MaxWall and runs it.
    A job asking for more than the MaxWall still pends with the reason."""
    server, tokens = live
    with server.client(tokens["bob"]) as bob:
        job = bob.submit(_job(tmp_path, None, "short")).job_id
        assert bob.job(job).time_limit_seconds == 600
        wait_until(lambda: bob.job(job).state == "RUNNING", message="the untimed job")
        held = bob.submit(_job(tmp_path, 601, "short")).job_id
        wait_until(
            lambda: bob.job(held).reason == "QOSMaxWallDurationPerJobLimit", message="the reason"
        )
        assert bob.job(held).state == "PENDING"
        bob.cancel(str(job))
        bob.cancel(str(held))
