"""``sprio``, ``hal explain`` and REST ``/v1/priority`` in the live server show the
factors a pending job's priority was calculated from, which add up to that priority, as
Slurm 22.05's sprio shows ``job_ptr->prio_factors``. Found by exploratory testing: between
two calculations (``calc_period``, an hour here, so only the job's submission calculates)
HAL printed fresh factors beside the stored priority (``sprio``: ``9335 0 0 7122 0``;
``explain``: ``priority: 9335 = age 0 + fairshare 7122 + ...``), and the explain's fair
share line a third number; an ``sshare`` also changed what the next ``sprio`` showed.

One 2-CPU agent. bob ran a short job, then alice's job holds both CPUs, so her usage,
and every fair-share factor, moves while bob's job waits; its age grows 1000 points a
second."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.client import HalClient
from hal.config.priority import priority_from_dict
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit
from hal.wire.priority import JobPriorityInfo

POLICY = priority_from_dict(
    {
        "priority": {
            "weight_age": 100_000,
            "weight_fairshare": 10_000,
            "max_age": 100,
            "calc_period": 3600,
        },
        "accounts": [{"name": "physics"}, {"name": "chem"}],
        "users": [
            {"name": "alice", "default_account": "physics"},
            {"name": "bob", "default_account": "chem"},
        ],
    }
)
EXPLAINED = re.compile(
    r"priority: (\d+) = age (\d+) \+ fairshare (\d+) \+ jobsize (\d+) \+ partition (\d+)"
    r" \+ qos (\d+) - nice (-?\d+)"
)
FAIR_SHARE = re.compile(r"fair share: bob in account chem: factor ([0-9.]+)")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    data = tmp_path_factory.mktemp("hal")
    with LiveServer(data, config_overrides={"priority": POLICY}) as server:
        tokens = server.add_users("alice", "bob")
        with server.agents(1, cpus=2, memory="1G"):
            yield server, tokens


def _job(tmp: Path, script: str, limit: int = 120) -> JobSubmit:
    return JobSubmit(
        script=f"#!/bin/sh\n{script}\n", workdir=str(tmp), time_limit_seconds=limit, cpus_per_task=2
    )


def _usage(client: HalClient, user: str) -> float:
    return next(r.raw_usage for r in client.shares().rows if r.user == user)


def _adds_up(p: JobPriorityInfo) -> bool:
    w = p.weighted
    return (
        p.priority
        == round(w.site + w.age + w.fairshare + w.job_size + w.partition + w.qos) - p.nice
    )


def test_sprio_and_explain_show_the_factors_the_priority_was_calculated_from(
    live: tuple[LiveServer, dict[str, str]], tmp_path: Path
) -> None:
    server, tokens = live
    with server.client(tokens["alice"]) as alice, server.client(tokens["bob"]) as bob:
        ran = bob.submit(_job(tmp_path, "sleep 1")).job_id
        wait_until(lambda: bob.job(ran).state == "COMPLETED", message="bob's first job")
        blocker = alice.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        try:
            wait_until(lambda: alice.job(blocker).state == "RUNNING", message="alice's job")
            waiting = bob.submit(_job(tmp_path, "true")).job_id
            (calculated,) = bob.priorities(ids=[str(waiting)]).jobs
            assert _adds_up(calculated)
            # usage moves on (alice's job charges 2 CPU-seconds a second), age grows
            used = _usage(bob, "alice")
            wait_until(lambda: _usage(bob, "alice") > used + 4, message="alice's usage")

            out = server.cli("explain", str(waiting), token=tokens["bob"])
            assert out.returncode == 0, out.stderr
            line = EXPLAINED.search(out.stdout)
            assert line is not None, out.stdout
            total, *parts, nice = (int(n) for n in line.groups())
            assert abs(total - (sum(parts) - nice)) <= 2, out.stdout  # each part rounded
            assert total == calculated.priority == bob.job(waiting).priority
            factor = FAIR_SHARE.search(out.stdout)
            assert factor is not None, out.stdout
            assert float(factor.group(1)) == pytest.approx(calculated.normalized.fairshare)
            info = bob.explain(waiting)
            assert info.priority == calculated
            assert info.fairshare is not None
            assert info.fairshare.fairshare == calculated.normalized.fairshare

            # an sshare (the explain's too) does not change what sprio shows
            assert server.cli("sshare", "-a", token=tokens["bob"]).returncode == 0
            (shown,) = bob.priorities(ids=[str(waiting)]).jobs
            assert shown == calculated
            out = server.cli("sprio", "-h", "-l", "-j", str(waiting), token=tokens["bob"])
            assert out.returncode == 0, out.stderr
            # JOBID PARTITION USER PRIORITY SITE AGE ASSOC FAIRSHARE JOBSIZE PARTITION QOS NICE
            row = out.stdout.split()
            priority, factors, nice = int(row[3]), [int(n) for n in row[4:11]], int(row[11])
            assert priority == calculated.priority
            assert abs(priority - (sum(factors) - nice)) <= 2, out.stdout
        finally:
            alice.cancel(str(blocker))
