"""Submit checks of what a job names: its QoS, its account and its GPU type. Slurm
refuses each at submit; HAL did not (an unknown QoS escaped the default QoS's limits, an
unknown account was charged to the default one, an unknown GPU type pended forever).
Refused batches store nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from hal.config.model import HalConfig, PartitionConfig
from hal.core.clock import VirtualClock
from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.core.priority import Account, PriorityPolicy, Qos, UserAccount
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore
from hal.testing.builders import make_node


def spec(**kw: object) -> JobSpec:
    base = JobSpec(user="alice", script="#!/bin/sh\ntrue\n")
    return base.with_changes(**kw)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def loaded(db_url: str, config: HalConfig) -> Cluster:
    cluster = Cluster(SqlStateStore(db_url), config, VirtualClock(5.0))
    await cluster.load()
    return cluster


def test_an_unknown_qos_is_refused_when_qos_are_configured(db_url: str) -> None:
    """With ``[[qos]]``, only a listed QoS or ``normal`` (the default's name, listed or
    not) may be named; without one, any name is accepted as before."""
    policy = PriorityPolicy(qos=(Qos("high", priority=100), Qos("low", max_jobs_per_user=1)))

    async def scenario() -> None:
        cluster = await loaded(db_url, HalConfig(priority=policy))
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(qos="high"), spec(qos="nope")])
        assert str(err.value) == (
            "Invalid qos specification: 'nope' is not a QoS (known: high, low, normal)"
        )
        assert err.value.field == "jobs[1].qos"
        assert cluster.store.count_jobs() == 0
        await cluster.submit([spec(qos="high"), spec(qos="low"), spec(qos="normal"), spec()])
        assert cluster.store.count_jobs() == 4
        await cluster.close()

        plain = await loaded(db_url, HalConfig())  # no [[qos]]: a QoS is only a label
        await plain.submit([spec(qos="nope")])
        assert plain.store.count_jobs() == 5
        await plain.close()

    run(scenario())


def test_an_account_the_user_may_not_use_is_refused(db_url: str) -> None:
    """With ``[[accounts]]``, a user listed in ``[[users]]`` may name the accounts of
    their associations; other users any configured account (or ``root``). A job that
    names none is charged to the default account as before. Without ``[[accounts]]``
    any name is accepted."""
    policy = PriorityPolicy(
        accounts=(Account("physics"), Account("lattice", "physics"), Account("chemistry")),
        users=(
            UserAccount("alice", "lattice", default=True),
            UserAccount("alice", "physics"),
        ),
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, HalConfig(priority=policy))
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(account="nope")])
        assert str(err.value) == (
            "Invalid account or account/partition combination specified: user alice may "
            "not use account 'nope' (their accounts: lattice, physics)"
        )
        assert err.value.field == "account"
        with pytest.raises(InvalidRequest, match="may not use account 'chemistry'") as err:
            await cluster.submit([spec(account="lattice"), spec(account="chemistry")])
        assert err.value.field == "jobs[1].account"
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(user="bob", account="nope")])
        assert str(err.value).endswith(
            "user bob may not use account 'nope' (their accounts: chemistry, lattice, physics, "
            "root)"
        )
        assert cluster.store.count_jobs() == 0
        await cluster.submit(
            [
                spec(account="lattice"),
                spec(account="physics"),
                spec(),  # alice's default, lattice
                spec(user="bob", account="chemistry"),  # not in [[users]]: any account
                spec(user="bob"),
            ]
        )
        assert cluster.store.count_jobs() == 5
        await cluster.close()

        plain = await loaded(db_url, HalConfig())  # no [[accounts]]: everyone in root
        await plain.submit([spec(account="nope")])
        assert plain.store.count_jobs() == 6
        await plain.close()

    run(scenario())


def test_a_gpu_type_no_node_has_is_refused(db_url: str) -> None:
    """A GPU type is compared with the GPU models of the partition's nodes, as the
    scheduler matches them; like the CPU and memory counts, not while the partition
    has no nodes yet (they may join later)."""
    config = HalConfig(
        partitions=(
            PartitionConfig(name="gpu", default=True, nodes=("a1", "a2", "h1")),
            PartitionConfig(name="big", nodes=("v1",)),
            PartitionConfig(name="later", nodes=("x1",)),
        )
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, config)
        for node in (
            make_node("a1").gpus(4, "a100"),
            make_node("a2").gpus(4, "a100"),
            make_node("h1").gpus(8, "h100"),
            make_node("v1").gpus(2, "v100"),
        ):
            cluster.nodes[node.build().name] = node.build()
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(gpus_per_node=1, gpu_type="b200")])
        assert str(err.value) == (
            "Invalid generic resource (gres) specification: no node has GPU type 'b200' "
            "(the cluster's types: a100, h100, v100)"
        )
        assert err.value.field == "gpu_type"
        with pytest.raises(InvalidRequest) as err:  # --gpus=v100:1: on v1, not in "gpu"
            await cluster.submit([spec(gpus_total=1, gpu_type="v100")])
        assert "no node of the partition has GPU type 'v100' (its types: a100, h100)" in str(
            err.value
        )
        with pytest.raises(InvalidRequest) as err:  # a100 nodes have 4 GPUs, h1 has 8
            await cluster.submit([spec(gpus_per_node=8, gpu_type="a100")])
        assert str(err.value).startswith("Requested node configuration is not available")
        assert "the largest node with GPU type 'a100' has" in str(err.value)
        with pytest.raises(InvalidRequest, match="the partition has 1 with GPU type 'h100'"):
            await cluster.submit([spec(gpus_per_node=1, gpu_type="h100", nodes_min=2)])
        assert cluster.store.count_jobs() == 0
        await cluster.submit(
            [
                spec(gpus_per_node=4, gpu_type="a100", nodes_min=2, nodes_max=2),
                spec(gpus_total=8, gpu_type="h100"),
                spec(gpus_per_node=2, gpu_type="v100", partitions=("big",)),
                spec(gpus_per_node=1, gpu_type="b200", partitions=("later",)),  # no nodes yet
                spec(gpu_type="b200"),  # no GPUs asked: the type is not used
            ]
        )
        assert cluster.store.count_jobs() == 5
        await cluster.close()

    run(scenario())


def test_a_nodelist_or_exclude_names_only_known_nodes(db_url: str) -> None:
    """``--nodelist`` names registered nodes or nodes a partition of the config names (yet
    to join); anything else, a host list sent unexpanded over REST included, is refused as
    Slurm refuses it, instead of pending on BadConstraints for ever. Not while the
    partition has no nodes yet."""
    config = HalConfig(
        partitions=(
            PartitionConfig(name="batch", default=True, nodes=("n1", "n2")),
            PartitionConfig(name="later", nodes=("x1",)),
        )
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, config)
        cluster.nodes["n1"] = make_node("n1").build()
        for field in ("nodelist", "exclude"):
            for names in (("nosuch",), ("n1", "n[1-4]")):
                with pytest.raises(InvalidRequest) as err:
                    await cluster.submit([spec(**{field: names})])
                assert str(err.value).startswith(f"Invalid node name specified: {names[-1]} ")
                assert err.value.field == field
        assert cluster.store.count_jobs() == 0
        await cluster.submit(
            [
                spec(nodelist=("n1",)),
                spec(nodelist=("n2",)),  # configured, not registered yet
                spec(exclude=("n1", "n2")),
                spec(nodelist=("x9",), partitions=("later",)),  # no nodes yet: not checked
            ]
        )
        assert cluster.store.count_jobs() == 4
        await cluster.close()

    run(scenario())


def test_a_job_naming_no_time_limit_gets_the_max_wall(db_url: str) -> None:
    """Slurm's acct_policy_validate gives a job naming no time limit its MaxWall (at most
    the partition's MaxTime): the QoS's, or its account's or an ancestor's, the smallest
    that binds it. A partition default within every MaxWall is kept; an explicit limit
    is never changed (one above a MaxWall pends with the limit's reason)."""
    policy = PriorityPolicy(
        qos=(Qos("short", max_wall_s=600),),
        accounts=(Account("physics", max_wall_s=3600), Account("lattice", "physics")),
        users=(UserAccount("alice", "lattice", default=True),),
    )
    config = HalConfig(
        priority=policy,
        partitions=(
            PartitionConfig(name="open", default=True),
            PartitionConfig(name="capped", max_time_s=1800),
            PartitionConfig(name="quick", default_time_s=300),
        ),
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, config)
        cases = [
            (spec(qos="short"), 600),  # QoS MaxWall below the account's
            (spec(), 3600),  # lattice's parent physics' MaxWall
            (spec(partitions=("capped",)), 1800),  # MaxTime below the MaxWall
            (spec(partitions=("quick",)), 300),  # DefaultTime within the MaxWall
            (spec(user="bob"), 0),  # root: no MaxWall, unlimited as before
            (spec(qos="short", time_limit_s=7200), 7200),  # explicit: kept
        ]
        done = await cluster.submit([s for s, _ in cases])
        got = [cluster.jobs[d.job_id].time_limit_s for d in done]
        assert got == [limit for _, limit in cases]
        await cluster.close()

    run(scenario())


def test_a_job_naming_several_partitions_needs_room_in_one(db_url: str) -> None:
    """``-p small,big``: Slurm accepts a job that one of its partitions can hold, and
    refuses it, with the first partition's reason, when none can or when one of them
    does not exist. HAL checked the first partition only, so a job too big for it was
    refused although ``big`` could run it."""
    config = HalConfig(
        partitions=(
            PartitionConfig(name="small", default=True, nodes=("s1",)),
            PartitionConfig(name="big", nodes=("b1",)),
        )
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, config)
        cluster.nodes["s1"] = make_node("s1").cpus(2).build()
        cluster.nodes["b1"] = make_node("b1").cpus(16).build()
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(cpus_per_task=8, partitions=("small",))])
        assert "the largest node has 2 CPUs" in str(err.value)
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(cpus_per_task=32, partitions=("small", "big"))])
        assert "the largest node has 2 CPUs" in str(err.value)  # the first one's reason
        with pytest.raises(InvalidRequest, match="Invalid partition name specified: 'nope'"):
            await cluster.submit([spec(partitions=("big", "nope"))])
        assert cluster.store.count_jobs() == 0
        done = await cluster.submit([spec(cpus_per_task=8, partitions=("small", "big"))])
        job = cluster.jobs[done[0].job_id]
        assert (job.partition, job.spec.partitions) == ("small", ("small", "big"))
        await cluster.close()

    run(scenario())


def test_a_nodelist_the_job_cannot_have_is_refused(db_url: str) -> None:
    """``--nodelist`` nodes the job could never run on are refused at submit, as Slurm
    refuses them: a node also ``--exclude``d (Slurm: the required and excluded node lists
    overlap), outside the job's partition, without a ``--constraint`` feature, or too
    small for the job. HAL accepted these jobs and its scheduler kept them pending on
    BadConstraints for ever. With ``-p a,b`` the node need be usable in one of them."""
    config = HalConfig(
        partitions=(
            PartitionConfig(name="batch", default=True, nodes=("n1", "n2", "n3")),
            PartitionConfig(name="big", nodes=("b1",)),
        )
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, config)
        cluster.nodes["n1"] = make_node("n1").cpus(4).features("ib").build()
        cluster.nodes["n2"] = make_node("n2").cpus(4).build()
        cluster.nodes["n3"] = make_node("n3").cpus(16).build()
        cluster.nodes["b1"] = make_node("b1").cpus(16).features("ib").build()
        refused = [
            (spec(nodelist=("n1",), exclude=("n1", "n2")), "Invalid node name specified: n1"),
            (spec(nodelist=("b1",)), "node b1 is not in partition batch"),
            (spec(nodelist=("n2",), constraint=("ib",)), "node n2 lacks features ib"),
            (spec(nodelist=("n1",), cpus_per_task=8), "node n1 has 4 CPUs"),  # n3 has 16
        ]
        for bad, message in refused:
            with pytest.raises(InvalidRequest) as err:
                await cluster.submit([bad])
            assert message in str(err.value)
            assert err.value.field == "nodelist"
        assert cluster.store.count_jobs() == 0
        await cluster.submit(
            [
                spec(nodelist=("n1",), exclude=("n2",), constraint=("ib",)),
                spec(nodelist=("b1",), partitions=("batch", "big"), cpus_per_task=8),
                spec(nodelist=("n1",), nodes_min=2, ntasks=8),  # 4 CPUs each on two nodes
            ]
        )
        assert cluster.store.count_jobs() == 3
        await cluster.close()

    run(scenario())


def test_a_job_moved_to_a_partition_that_cannot_hold_it_is_refused(db_url: str) -> None:
    """``scontrol update JobId= Partition=`` checks the job against its new partitions as
    a submission there is checked (Slurm refuses the update); HAL moved it, and its
    scheduler kept it pending on BadConstraints for ever."""
    config = HalConfig(
        partitions=(
            PartitionConfig(name="small", default=True, nodes=("s1",)),
            PartitionConfig(name="big", nodes=("b1",)),
        )
    )

    async def scenario() -> None:
        cluster = await loaded(db_url, config)
        cluster.nodes["s1"] = make_node("s1").cpus(2).build()
        cluster.nodes["b1"] = make_node("b1").cpus(16).build()
        done = await cluster.submit([spec(cpus_per_task=8, partitions=("big",))])
        job_id = str(done[0].job_id)
        alice = Caller("alice")
        with pytest.raises(InvalidRequest) as err:
            await commands.update(cluster, job_id, alice, partition="small")
        assert "the largest node has 2 CPUs" in str(err.value)
        assert cluster.jobs[int(job_id)].partition == "big"
        (moved,) = await commands.update(cluster, job_id, alice, partition="small,big")
        assert (moved.partition, moved.spec.partitions) == ("small", ("small", "big"))
        await cluster.close()

    run(scenario())
