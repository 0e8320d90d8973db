"""A ``--switches=N@max-wait`` wait starts when the job becomes eligible, as in Slurm
(and docs/admin/topology.md): a job released from a hold, or whose dependency is met, long
after it was submitted still waits up to max-wait for a placement on N leaf switches.
The wait used to be counted from the submit time, so such a job spanned leaves at once."""

from __future__ import annotations

import asyncio

from hal.config.model import config_from_dict
from hal.core.clock import VirtualClock
from hal.core.job import JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, PendingReason
from hal.scheduler.plugins import build_scheduler
from hal.server.profile import server_profile
from hal.slurm.syntax import parse_dependency
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore

SCRIPT = "#!/bin/sh\ntrue\n"
# two leaves of two nodes: a 3-node job needs both
CONFIG = {
    "topology": {
        "level_names": ["leaf", "spine"],
        "switches": [
            {"name": "a", "nodes": "n[1-2]"},
            {"name": "b", "nodes": "n[3-4]"},
            {"name": "s0", "switches": "a,b"},
        ],
    }
}


def _wide(**more: object) -> JobSpec:
    return JobSpec(
        user="ann",
        script=SCRIPT,
        nodes_min=3,
        nodes_max=3,
        switches=1,
        switch_wait_s=100,
        **more,  # type: ignore[arg-type]
    )


def _states(db_url: str, how: str) -> list[tuple[JobState, PendingReason]]:
    """The wide job after passes at: eligible (+0 s), +50 s, +100 s."""

    async def scenario() -> list[tuple[JobState, PendingReason]]:
        config = config_from_dict(CONFIG)
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), config, clock)
        await cluster.load()
        for name in ("n1", "n2", "n3", "n4"):
            cluster.nodes[name] = Node(
                name,
                ResourceVector(cpus=4, memory_bytes=4 * GiB),
                topology=cluster.topology_path(name, {}),
            )
        scheduler = build_scheduler(server_profile(config))
        ann = Caller("ann")

        async def submit(spec: JobSpec) -> int:
            (done,) = await cluster.submit([spec])
            return done.job_id

        async def run_pass() -> None:
            snap = await cluster.fill_related(cluster.snapshot())
            await cluster.apply_plan(scheduler.schedule(snap))

        if how == "hold":
            wide = await submit(_wide(hold=True))
            await run_pass()
            clock.advance(1000.0)
            await commands.set_hold(cluster, str(wide), ann, False)
        else:  # afterany on a job that is cancelled 1000 s later
            first = await submit(JobSpec(user="ann", script=SCRIPT, hold=True))
            wide = await submit(_wide(dependency=parse_dependency(f"afterany:{first}")))
            await run_pass()
            assert cluster.jobs[wide].reason is PendingReason.DEPENDENCY
            clock.advance(1000.0)
            await commands.cancel(cluster, str(first), ann)
        seen = []
        for step in (0.0, 50.0, 50.0):
            clock.advance(step)
            await run_pass()
            seen.append((cluster.jobs[wide].state, cluster.jobs[wide].reason))
        await cluster.close()
        return seen

    return asyncio.run(scenario())


WAITS_THEN_RUNS = [
    (JobState.PENDING, PendingReason.TOPOLOGY),
    (JobState.PENDING, PendingReason.TOPOLOGY),
    (JobState.RUNNING, PendingReason.NONE),
]


def test_switches_wait_starts_when_a_held_job_is_released(db_url: str) -> None:
    assert _states(db_url, "hold") == WAITS_THEN_RUNS


def test_switches_wait_starts_when_the_dependency_is_met(db_url: str) -> None:
    assert _states(db_url, "dependency") == WAITS_THEN_RUNS
