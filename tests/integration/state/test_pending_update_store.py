"""``scontrol update`` of a pending job's request: StartTime (--begin), Dependency, QOS,
Account, Features, ExcNodeList, ReqNodeList and ArrayTaskThrottle. Each is checked as at
submit (an unknown job or a cycle in a dependency, a QoS or an account the user may not
use, a node list the job can never have are refused), only while the job is pending
("Job is no longer pending execution", as Slurm), by its owner or an administrator. HAL
refused all of them ("Update of StartTime is not supported"), so a user had to cancel
and resubmit a queued job to fix a dependency or move its begin time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hal.config.model import HalConfig, PartitionConfig
from hal.core.clock import VirtualClock
from hal.core.errors import Conflict, InvalidRequest, PermissionDenied
from hal.core.job import ArraySpec, JobSpec
from hal.core.priority import Account, PriorityPolicy, Qos, UserAccount
from hal.core.states import JobState
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore
from hal.testing.builders import make_node

ALICE = Caller("alice")
NOW = 5.0


def spec(**kw: object) -> JobSpec:
    return JobSpec(user="alice", script="#!/bin/sh\ntrue\n").with_changes(**kw)


def scenario(
    db_url: str, body: Callable[[Cluster], Awaitable[None]], config: HalConfig | None = None
) -> None:
    async def run() -> None:
        cluster = Cluster(SqlStateStore(db_url), config or HalConfig(), VirtualClock(NOW))
        await cluster.load()
        try:
            await body(cluster)
        finally:
            await cluster.close()

    asyncio.run(run())


async def submitted(cluster: Cluster, **kw: object) -> int:
    (result,) = await cluster.submit([spec(**kw)])
    return result.job_id


async def stored(cluster: Cluster, job_id: int) -> JobSpec:
    """The job's request as the store holds it (what a restarted server schedules)."""
    (row,) = await cluster.db(lambda: cluster.store.history(ids=[job_id]))
    return row.spec


def test_start_time_moves_a_pending_jobs_begin_time(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        job = await submitted(cluster)
        (changed,) = await commands.update(cluster, str(job), ALICE, begin_time=NOW + 3600)
        assert changed.spec.begin_time == NOW + 3600
        assert (await stored(cluster, job)).begin_time == NOW + 3600
        await commands.update(cluster, str(job), ALICE, begin_time=NOW)  # StartTime=now
        assert cluster.jobs[job].spec.begin_time == NOW

    scenario(db_url, body)


def test_only_a_pending_job_changes_its_request(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        job = await submitted(cluster)
        await commands.cancel(cluster, str(job), ALICE)
        for field, value in (
            ("begin_time", NOW + 60),
            ("dependency", ""),
            ("qos", "normal"),
            ("constraint", []),
            ("nodelist", []),
        ):
            with pytest.raises(Conflict) as err:
                await commands.update(cluster, str(job), ALICE, **{field: value})
            # every key of an ended job, as Slurm 22.05.8
            assert str(err.value) == f"Job has already finished for job {job}"

    scenario(db_url, body)


def test_only_the_owner_or_an_administrator_changes_it(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        job = await submitted(cluster)
        with pytest.raises(PermissionDenied):
            await commands.update(cluster, str(job), Caller("bob"), begin_time=NOW + 60)
        await commands.update(cluster, str(job), Caller("root", admin=True), begin_time=NOW + 60)
        assert cluster.jobs[job].spec.begin_time == NOW + 60

    scenario(db_url, body)


def test_a_dependency_is_set_checked_and_cleared(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        first = await submitted(cluster)
        job = await submitted(cluster)
        (changed,) = await commands.update(cluster, str(job), ALICE, dependency=f"afterok:{first}")
        assert str(changed.spec.dependency) == f"afterok:{first}"
        assert str((await stored(cluster, job)).dependency) == f"afterok:{first}"
        with pytest.raises(InvalidRequest) as err:
            await commands.update(cluster, str(job), ALICE, dependency="afterok:999")
        assert str(err.value) == "Job dependency problem: job 999 does not exist"
        assert str(cluster.jobs[job].spec.dependency) == f"afterok:{first}"  # unchanged
        with pytest.raises(InvalidRequest) as err:
            await commands.update(cluster, str(job), ALICE, dependency="afterany:1?foo:2")
        assert "invalid --dependency" in str(err.value)
        await commands.update(cluster, str(job), ALICE, dependency="")  # Dependency= clears it
        assert cluster.jobs[job].spec.dependency is None
        assert (await stored(cluster, job)).dependency is None

    scenario(db_url, body)


def test_a_dependency_that_makes_a_cycle_is_refused(db_url: str) -> None:
    """A job waiting on itself, through other pending jobs or on its own array would
    pend for ever: Slurm refuses it, so does HAL, in Slurm 22.05.8's words
    (docs/slurm-checks.md): "Job dependency problem" for a job naming itself, "Circular
    job dependency" for a cycle through other jobs. HAL said "Job dependency problem:
    circular dependency" for both."""

    async def body(cluster: Cluster) -> None:
        first = await submitted(cluster)
        second = await submitted(cluster, dependency=None)
        await commands.update(cluster, str(second), ALICE, dependency=f"afterok:{first}")
        third = await submitted(cluster)
        await commands.update(cluster, str(third), ALICE, dependency=f"afterany:{second}")
        cycle = f"{third} -> {second} -> {first}"
        for job, dependency, message in (
            (first, f"afterok:{first}", f"Job dependency problem: job {first} would wait on it"),
            (first, f"afterok:{third}", f"Circular job dependency: job {first} waits on {cycle}"),
        ):
            with pytest.raises(InvalidRequest) as err:
                await commands.update(cluster, str(job), ALICE, dependency=dependency)
            assert str(err.value).startswith(message), str(err.value)
        assert cluster.jobs[first].spec.dependency is None
        (array,) = await cluster.submit([spec(array=ArraySpec((0, 1)))])
        element = array.task_ids[1]
        with pytest.raises(InvalidRequest, match="Circular job dependency"):
            await commands.update(
                cluster, str(element), ALICE, dependency=f"afterok:{array.job_id}"
            )
        await commands.update(
            cluster, str(element), ALICE, dependency=f"afterok:{first}"
        )  # no cycle

    scenario(db_url, body)


def test_qos_and_account_only_those_the_user_may_use(db_url: str) -> None:
    policy = PriorityPolicy(
        qos=(Qos("high", priority=100), Qos("one", max_submit_jobs_per_user=1)),
        accounts=(Account("physics"), Account("chemistry")),
        users=(UserAccount("alice", "physics", default=True),),
    )

    async def body(cluster: Cluster) -> None:
        job = await submitted(cluster)
        await commands.update(cluster, str(job), ALICE, qos="high", account="physics")
        assert (cluster.jobs[job].spec.qos, cluster.jobs[job].spec.account) == ("high", "physics")
        stored_spec = await stored(cluster, job)
        assert (stored_spec.qos, stored_spec.account) == ("high", "physics")
        with pytest.raises(InvalidRequest, match=r"Invalid qos specification: 'nope'"):
            await commands.update(cluster, str(job), ALICE, qos="nope")
        with pytest.raises(InvalidRequest) as err:
            await commands.update(cluster, str(job), ALICE, account="chemistry")
        assert str(err.value).startswith(
            "Invalid account or account/partition combination specified: user alice may "
            "not use account 'chemistry'"
        )
        # an administrator moves the job only to what its owner may use
        with pytest.raises(InvalidRequest, match="may not use account 'chemistry'"):
            await commands.update(
                cluster, str(job), Caller("root", admin=True), account="chemistry"
            )
        # a QoS's submit limit counts the moved job once, and not twice
        await commands.update(cluster, str(job), ALICE, qos="one")
        await commands.update(cluster, str(job), ALICE, qos="one")
        other = await submitted(cluster)
        with pytest.raises(InvalidRequest, match="job submit limit"):
            await commands.update(cluster, str(other), ALICE, qos="one")
        assert cluster.jobs[other].spec.qos == "normal"  # the QoS it got at submit

    scenario(db_url, body, HalConfig(priority=policy))


def test_features_and_node_lists_the_job_can_have(db_url: str) -> None:
    config = HalConfig(
        partitions=(PartitionConfig(name="batch", default=True, nodes=("n1", "n2")),)
    )

    async def body(cluster: Cluster) -> None:
        cluster.nodes["n1"] = make_node("n1").cpus(4).features("ib").build()
        cluster.nodes["n2"] = make_node("n2").cpus(4).build()
        job = await submitted(cluster)
        await commands.update(cluster, str(job), ALICE, constraint=["ib"], exclude=["n2"])
        assert (cluster.jobs[job].spec.constraint, cluster.jobs[job].spec.exclude) == (
            ("ib",),
            ("n2",),
        )
        assert (await stored(cluster, job)).constraint == ("ib",)
        with pytest.raises(InvalidRequest, match=r"^Invalid feature specification: .* gpu"):
            await commands.update(cluster, str(job), ALICE, constraint=["gpu"])
        with pytest.raises(InvalidRequest, match="Invalid node name specified: nosuch"):
            await commands.update(cluster, str(job), ALICE, nodelist=["nosuch"])
        with pytest.raises(InvalidRequest, match="node n2 lacks features ib"):
            await commands.update(cluster, str(job), ALICE, exclude=[], nodelist=["n2"])
        with pytest.raises(InvalidRequest, match=r"both required .* and excluded"):
            await commands.update(cluster, str(job), ALICE, constraint=[], nodelist=["n2"])
        await commands.update(cluster, str(job), ALICE, constraint=[], exclude=[], nodelist=["n2"])
        changed = cluster.jobs[job].spec
        assert (changed.constraint, changed.exclude, changed.nodelist) == ((), (), ("n2",))

    scenario(db_url, body, config)


def test_array_task_throttle_applies_to_the_whole_array(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        (array,) = await cluster.submit([spec(array=ArraySpec((0, 1, 2), max_running=1))])
        ids = array.task_ids
        await commands.cancel(cluster, str(ids[2]), ALICE)  # an element that ended changes too
        changed = await commands.update(cluster, f"{array.job_id}_1", ALICE, array_max_running=2)
        assert sorted(j.id for j in changed) == sorted(ids)
        assert [cluster.jobs[i].array_max_running for i in ids] == [2, 2, 2]
        assert cluster.jobs[ids[1]].state is JobState.PENDING
        (row,) = await cluster.db(lambda: cluster.store.history(ids=[ids[0]]))
        assert row.array_max_running == 2
        await commands.update(cluster, str(array.job_id), ALICE, array_max_running=0)  # no limit
        assert {cluster.jobs[i].array_max_running for i in ids} == {0}
        single = await submitted(cluster)
        with pytest.raises(InvalidRequest, match="ArrayTaskThrottle applies to job arrays"):
            await commands.update(cluster, str(single), ALICE, array_max_running=2)

    scenario(db_url, body)
