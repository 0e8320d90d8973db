"""``hal.server.power.PowerService``'s passes over a real cluster mirror and store
(SQLite), a virtual clock and real programs (shell scripts that log the host lists
they are given): the phases a node goes through, the rates, a restarted server's
nodes, and what ``hal explain`` and a burst decision read. An agent joining is its
session and registration time, as ``hal.state.agents.register`` leaves them; the live
test (tests/integration/server/test_power_live.py) runs real agents."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from hal.config.model import HalConfig
from hal.config.power import PowerConfig
from hal.core.clock import VirtualClock
from hal.core.power import REASONS, Phase, phase_of
from hal.core.resources import ResourceVector
from hal.core.states import NodeState, PendingReason
from hal.server.power import PowerService
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.node_usage import NodeUsage
from hal.state.store import SqlStateStore
from hal.testing.builders import make_job, make_node

START = 1_000_000.0
LOGGER = """#!/bin/sh
[ -n "$SLURM_RESUME_FILE" ] && cat "$SLURM_RESUME_FILE" > {log}.json
echo "$1" >> {log}
"""


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


@pytest.fixture
def programs(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("suspend", "resume"):
        path = tmp_path / f"{name}.sh"
        path.write_text(LOGGER.format(log=tmp_path / f"{name}.log"))
        path.chmod(0o755)
        made[name] = path
    return made


@pytest.fixture
def cluster(tmp_path: Path, clock: VirtualClock) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    c = Cluster(store, HalConfig(cluster_name="test"), clock)
    c.nodes = {name: make_node(name).cpus(4).build() for name in ("n1", "n2", "n3")}
    for name in c.nodes:
        join(c, name)
    yield c
    store.close()


def join(cluster: Cluster, name: str) -> None:
    """The node's agent registered now."""
    now = cluster.clock.now()
    cluster.nodes[name] = cluster.nodes[name].evolve(last_heartbeat=now)
    cluster.agent_sessions[name] = AgentSession(name, last_seen=now)


def service(cluster: Cluster, programs: dict[str, Path], **keys: Any) -> PowerService:
    config = PowerConfig(
        enabled=True,
        suspend_program=str(programs["suspend"]),
        resume_program=str(programs["resume"]),
        **keys,
    )
    return PowerService(cluster, config)


def logged(programs: dict[str, Path], name: str) -> list[str]:
    path = programs[name].with_suffix(".log")
    return path.read_text().split() if path.exists() else []


def phases(cluster: Cluster) -> dict[str, Phase | None]:
    return {n: phase_of(node) for n, node in sorted(cluster.nodes.items())}


async def step(power: PowerService) -> None:
    await power.step()
    await power.stop()  # (the programs started, ended)


@in_loop
async def test_idle_nodes_go_down_after_suspend_time_at_the_rate_then_sleep(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    power = service(cluster, programs, suspend_time=60, suspend_timeout=30, suspend_rate=2)
    cluster.usage["n3"] = NodeUsage(jobs={7})  # busy: stays up
    await step(power)
    clock.advance(59)
    await step(power)
    assert logged(programs, "suspend") == []
    clock.advance(1)
    await step(power)
    assert logged(programs, "suspend") == ["n[1-2]"]  # one call, the host list
    assert phases(cluster) == {"n1": Phase.POWERING_DOWN, "n2": Phase.POWERING_DOWN, "n3": None}
    assert cluster.nodes["n1"].state is NodeState.DRAIN
    clock.advance(30)
    await step(power)
    assert phases(cluster)["n1"] is Phase.POWERED_DOWN
    # n3's job ends: it sleeps suspend_time later (the rate's minute has passed by then)
    cluster.usage["n3"] = NodeUsage(released_at=clock.now())
    await step(power)
    clock.advance(59)
    await step(power)
    assert logged(programs, "suspend") == ["n[1-2]"]
    clock.advance(1)
    await step(power)
    assert logged(programs, "suspend") == ["n[1-2]", "n3"]


@in_loop
async def test_the_suspend_rate_holds_back_the_rest_for_a_minute(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    power = service(cluster, programs, suspend_time=10, suspend_rate=1)
    await step(power)
    clock.advance(10)
    await step(power)
    clock.advance(30)
    await step(power)
    assert logged(programs, "suspend") == ["n1"]
    clock.advance(30)
    await step(power)
    assert logged(programs, "suspend") == ["n1", "n2"]


@in_loop
async def test_a_waiting_job_wakes_a_node_that_is_back_when_its_agent_registers(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    power = service(cluster, programs, resume_timeout=60)
    asleep(cluster, "n1", "n2", "n3")
    job = make_job(5).cpus(4).reason(PendingReason.RESOURCES).partition("debug").build()
    cluster.put(job)
    await step(power)
    assert logged(programs, "resume") == ["n1"]
    resume_file = json.loads(programs["resume"].with_suffix(".log.json").read_text())
    assert resume_file["all_nodes_resume"] == "n1"
    assert [(j["job_id"], j["nodes_resume"]) for j in resume_file["jobs"]] == [(5, "n1")]
    assert phases(cluster)["n1"] is Phase.POWERING_UP
    assert power.waking_for(5) == [("n1", START)]
    await step(power)  # the same job wakes nothing more while n1 comes up
    assert logged(programs, "resume") == ["n1"]
    clock.advance(12)
    join(cluster, "n1")
    await step(power)
    assert cluster.nodes["n1"].state is NodeState.UP and phases(cluster)["n1"] is None
    assert power.boot_seconds() == 12  # the resume it saw
    assert power.waking_for(5) == []


@in_loop
async def test_a_node_not_back_within_resume_timeout_goes_down_and_the_job_wakes_another(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    power = service(cluster, programs, resume_timeout=60)
    asleep(cluster, "n1", "n2")
    cluster.put(make_job(5).cpus(4).reason(PendingReason.RESOURCES).partition("debug").build())
    cluster.usage["n3"] = NodeUsage(allocated=ResourceVector(cpus=4), jobs={9})  # awake, full
    await step(power)
    clock.advance(60)
    await step(power)
    n1 = cluster.nodes["n1"]
    assert (n1.state, n1.reason) == (
        NodeState.DOWN,
        "power: not back within 60 s of its resume (resume_timeout)",
    )
    await step(power)
    assert logged(programs, "resume") == ["n1", "n2"]


@in_loop
async def test_a_restarted_servers_sleeping_nodes_carry_on_from_their_records(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    """The phase is the drain reason; its clock starts again with the service."""
    for name, phase in (("n1", Phase.POWERING_UP), ("n2", Phase.POWERING_DOWN)):
        cluster.nodes[name] = cluster.nodes[name].evolve(
            state=NodeState.DRAIN, reason=REASONS[phase]
        )
    power = service(cluster, programs, resume_timeout=60, suspend_timeout=30)
    await step(power)
    clock.advance(30)
    await step(power)
    assert phases(cluster) == {"n1": Phase.POWERING_UP, "n2": Phase.POWERED_DOWN, "n3": None}
    clock.advance(30)
    await step(power)
    assert cluster.nodes["n1"].state is NodeState.DOWN


@in_loop
async def test_power_down_by_hand_waits_for_the_jobs_and_power_up_calls_it_off(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    power = service(cluster, programs)  # suspend_time -1: nothing on its own
    cluster.usage["n1"] = NodeUsage(jobs={3})
    await power.power_down("n1", "root")
    await power.power_down("n2", "root")
    await step(power)
    assert logged(programs, "suspend") == ["n2"]
    assert phases(cluster)["n1"] is Phase.REQUESTED
    await power.power_up("n1", "root")  # called off
    assert cluster.nodes["n1"].state is NodeState.UP
    clock.advance(30)
    await step(power)
    assert phases(cluster)["n2"] is Phase.POWERED_DOWN
    await power.power_up("n2", "root")
    await power.stop()
    assert logged(programs, "resume") == ["n2"]


@in_loop
async def test_capacity_lists_the_sleeping_nodes_with_the_boot_time_seen(
    cluster: Cluster, clock: VirtualClock, programs: dict[str, Path]
) -> None:
    power = service(cluster, programs, resume_timeout=90)
    asleep(cluster, "n2")
    await step(power)
    assert [(a.node.name, a.ready_at) for a in power.capacity()] == [("n2", START + 90)]
    power.boots.extend([20.0, 40.0, 30.0])
    assert [(a.node.name, a.ready_at) for a in power.capacity()] == [("n2", START + 30)]


def asleep(cluster: Cluster, *names: str) -> None:
    for name in names:
        node = cluster.nodes[name]
        cluster.nodes[name] = node.evolve(state=NodeState.DRAIN, reason=REASONS[Phase.POWERED_DOWN])
        cluster.agent_sessions.pop(name, None)
