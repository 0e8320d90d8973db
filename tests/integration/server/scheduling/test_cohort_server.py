"""Lending quota in the live server, with real agents: accounts ``a`` and ``b`` form a
cohort with GrpTRES cpus=2 each on a 4-CPU agent. Alice (account a) runs two 2-CPU jobs:
the second borrows b's idle quota. When Bob (account b) submits, his job is within b's
own quota, so a's borrowed job is preempted (requeued) and Bob's runs; Alice's job waits
with AssocGrpCpuLimit until b's quota is free again. No [preemption] table is needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.priority import priority_from_dict
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

POLICY = priority_from_dict(
    {
        "accounts": [
            {"name": "a", "grp_tres": {"cpus": 2}, "cohort": "lab"},
            {"name": "b", "grp_tres": {"cpus": 2}, "cohort": "lab"},
        ],
        "users": [
            {"name": "alice", "default_account": "a"},
            {"name": "bob", "default_account": "b"},
        ],
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


def _job(tmp: Path) -> JobSubmit:
    return JobSubmit(
        script="#!/bin/sh\nsleep 300\n", workdir=str(tmp), time_limit_seconds=600, cpus_per_task=2
    )


def test_borrowed_quota_is_taken_back_by_its_owner(
    live: tuple[LiveServer, dict[str, str]], tmp_path: Path
) -> None:
    server, tokens = live
    with server.client(tokens["alice"]) as alice, server.client(tokens["bob"]) as bob:
        own = alice.submit(_job(tmp_path)).job_id
        wait_until(lambda: alice.job(own).state == "RUNNING", message="alice's first job")
        borrowed = alice.submit(_job(tmp_path)).job_id
        wait_until(lambda: alice.job(borrowed).state == "RUNNING", message="the borrowing job")
        third = alice.submit(_job(tmp_path)).job_id
        wait_until(lambda: alice.job(third).reason == "AssocGrpCpuLimit", message="a's cap")

        theirs = bob.submit(_job(tmp_path)).job_id
        wait_until(lambda: bob.job(theirs).state == "RUNNING", 30, message="bob's job")
        assert alice.job(own).state == "RUNNING"  # within a's own quota: never reclaimed
        info = alice.job(borrowed)
        assert info.state == "PENDING" and info.restarts == 1
        wait_until(
            lambda: alice.job(borrowed).reason == "AssocGrpCpuLimit", message="no quota to borrow"
        )
        bob.cancel(str(theirs))
        # b's quota is free again: one of alice's waiting jobs borrows it
        wait_until(
            lambda: sum(alice.job(j).state == "RUNNING" for j in (borrowed, third)) == 1,
            30,
            message="alice borrows again",
        )
        for j in (own, borrowed, third):
            alice.cancel(str(j))
