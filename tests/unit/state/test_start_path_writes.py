"""What a start costs the server to write: a plan's re-check accumulates on the nodes it
places on, and an agent's "started" report (nothing a pass reads) wakes no pass, while
its end, and every other commit, does."""

from __future__ import annotations

import asyncio

from hal.core.job import Allocation
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state.agents import apply_reports
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.builders import make_node
from hal.testing.mirror import store
from hal.wire.agent import JobReport


def on(node: str, cpus: int) -> Allocation:
    return Allocation((node,), (ResourceVector(cpus=cpus),))


def test_placements_on_a_node_add_up_in_one_plan_and_other_nodes_stay_as_they_were(
    cluster: Cluster,
) -> None:
    cluster.nodes["n2"] = make_node("n2").cpus(2).mem_gib(4).build()
    running = make_job(9).running_on("n2", start=0.0).build()
    store(cluster, running, *(make_job(i).build() for i in (1, 2, 3)))
    n2_before = cluster.usage["n2"]
    # n1 has 2 CPUs: 1 and 2 fit together, 3 no longer does
    plan = Plan(0, placements=tuple(Placement(i, on("n1", 1)) for i in (1, 2, 3)))
    assert asyncio.run(cluster.apply_plan(plan)) == [1, 2]
    assert cluster.usage["n1"].jobs == {1, 2}
    assert cluster.usage["n2"] is n2_before and n2_before.jobs == {9}
    # a node the plan places on that holds a job already: what is left counts
    plan = Plan(0, placements=(Placement(3, on("n2", 2)),))
    assert asyncio.run(cluster.apply_plan(plan)) == []
    assert cluster.jobs[3].state is JobState.PENDING


def report(kind: str, job_id: int, seq: int) -> JobReport:
    state = "COMPLETED" if kind == "finished" else ""
    return JobReport(seq=seq, job_id=job_id, attempt=0, kind=kind, time=5.0, state=state)  # type: ignore[arg-type]


def test_a_started_report_wakes_no_pass_and_an_end_does(cluster: Cluster) -> None:
    store(cluster, make_job(1).running_on("n1", start=1.0).build())
    cluster.changed.clear()
    asyncio.run(apply_reports(cluster, "n1", [report("started", 1, 1)]))
    assert cluster.jobs[1].launched
    assert not cluster.changed.is_set()
    asyncio.run(apply_reports(cluster, "n1", [report("finished", 1, 2)]))
    assert cluster.jobs[1].state is JobState.COMPLETED
    assert cluster.changed.is_set()


def test_a_started_report_with_another_change_wakes_a_pass(cluster: Cluster) -> None:
    store(cluster, *(make_job(i).running_on("n1", start=1.0).build() for i in (1, 2)))
    cluster.changed.clear()
    asyncio.run(apply_reports(cluster, "n1", [report("started", 1, 1), report("finished", 2, 2)]))
    assert cluster.jobs[1].launched and cluster.jobs[2].state is JobState.COMPLETED
    assert cluster.changed.is_set()
