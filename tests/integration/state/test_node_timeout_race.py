"""An agent coming back while the server moved on: the node-timeout check and the
registration race for the cluster lock; a requeued job's new attempt meets its old one."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import NodeState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.wire.agent import AgentRegister, Launch, RunningJob


def test_a_node_that_registers_while_the_check_waits_is_not_marked_down(db_url: str) -> None:
    async def scenario() -> tuple[list[str], NodeState, list[str]]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        clock.advance(HalConfig().node_timeout_seconds + 1)  # n1 has been silent too long
        async with cluster.change():  # e.g. register() committing its row
            check = asyncio.create_task(agents.check_nodes(cluster))
            await asyncio.sleep(0)  # the check saw n1 silent and now waits for the lock
            cluster.nodes["n1"] = cluster.nodes["n1"].evolve(last_heartbeat=clock.now())
        marked = await check
        state = cluster.nodes["n1"].state
        clock.advance(HalConfig().node_timeout_seconds + 1)
        later = await agents.check_nodes(cluster)  # silent again: now it goes down
        await cluster.close()
        return marked, state, later

    marked, state, later = asyncio.run(scenario())
    assert (marked, state) == ([], NodeState.UP)
    assert later == ["n1"]


def test_a_requeued_attempt_is_sent_to_an_agent_that_still_runs_the_old_one(
    db_url: str,
) -> None:
    """The agent re-registers while attempt 0 of a job it ran still runs there and the
    server has placed attempt 1 on it: attempt 0 is killed and attempt 1 is (re)sent,
    which the agent starts once attempt 0 has ended."""

    async def scenario() -> tuple[list[int], list[tuple[int, int]]]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        (done,) = await cluster.submit([JobSpec(user="alice", script="#!/bin/sh\ntrue\n")])
        job = cluster.jobs[done.job_id].evolve(restarts=1)  # requeued once already
        cluster.put(job)
        alloc = Allocation(("n1",), (ResourceVector(cpus=1, memory_bytes=0),))
        await cluster.apply_plan(Plan(revision=0, placements=(Placement(job.id, alloc),)))
        reply = await agents.register(
            cluster,
            AgentRegister(
                node="n1",
                cpus=2,
                memory_bytes=GiB,
                running=[RunningJob(job_id=job.id, attempt=0, pid=4242)],
            ),
        )
        sent = [
            (i.job_id, i.attempt)
            for i in cluster.agent_sessions["n1"].outbox
            if isinstance(i, Launch)
        ]
        await cluster.close()
        return reply.kill, sent

    kill, sent = asyncio.run(scenario())
    assert len(kill) == 1 and sent == [(kill[0], 1)]


def test_a_drained_node_whose_agent_goes_silent_stays_drained(db_url: str) -> None:
    """An operator drains n1 for maintenance and its agent stops: n1 stays DRAIN with the
    operator's reason (sinfo's `drain*`), not DOWN "Not responding", so the agent coming
    back does not put it UP and the scheduler does not send jobs into the maintenance;
    the check does not find it again and again."""

    async def scenario() -> tuple[list[str], list[str], Node, Node]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        reg = AgentRegister(node="n1", cpus=2, memory_bytes=GiB)
        await agents.register(cluster, reg)
        await agents.set_node_state(cluster, "n1", "DRAIN", "maint", user="alice")
        clock.advance(HalConfig().node_timeout_seconds + 1)
        first = await agents.check_nodes(cluster)
        again = await agents.check_nodes(cluster)
        silent = cluster.nodes["n1"]
        await agents.register(cluster, reg)  # the agent is back
        back = cluster.nodes["n1"]
        await cluster.close()
        return first, again, silent, back

    first, again, silent, back = asyncio.run(scenario())
    assert (first, again) == (["n1"], [])
    assert (silent.state, silent.reason, silent.reason_user) == (NodeState.DRAIN, "maint", "alice")
    assert (back.state, back.reason) == (NodeState.DRAIN, "maint")
