"""What a pending job's dependency shows (scontrol's Dependency=, squeue's %E), as Slurm
22.05.8 shows it (on its peer): each condition not met with its own status,
met conditions dropped, a whole array as ``A_*``, ``(null)`` once it holds. HAL gave every
condition the job's one status (``afterok:45(failed),afterok:46(failed)``) and kept a
met dependency's text on jobs that had started. On a real ``Cluster`` over SQLite."""

from __future__ import annotations

from dataclasses import replace

from hal.api.convert import job_info
from hal.core.states import JobState
from hal.slurm.syntax import parse_dependency
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import store


def shown(cluster: Cluster, job_id: int) -> str | None:
    return job_info(cluster.jobs[job_id], cluster).dependency_state


def test_each_condition_its_own_status_and_met_ones_dropped(cluster: Cluster) -> None:
    store(
        cluster,
        make_job(1).state(JobState.FAILED, exit_code=1).build(),
        make_job(2).build(),
        make_job(3).state(JobState.COMPLETED).build(),
        make_job(4).depends("afterok:1,afterok:2").build(),
        make_job(5).depends("afterany:3,afterok:2").build(),
        make_job(6).depends("afterok:3").build(),
        make_job(7).depends("afterok:2?afterok:3").build(),
        make_job(8).depends("afterok:2").state(JobState.CANCELLED).build(),
    )
    assert shown(cluster, 4) == "afterok:1(failed),afterok:2(unfulfilled)"
    assert shown(cluster, 5) == "afterok:2(unfulfilled)"
    assert shown(cluster, 6) is None  # met: it waits for resources now
    assert shown(cluster, 7) is None  # one of "?" holds
    assert shown(cluster, 8) is None  # no longer waiting


def test_arrays_singleton_and_an_element(cluster: Cluster) -> None:
    store(
        cluster,
        make_job(10).array(10, 0).build(),
        make_job(11).array(10, 1).state(JobState.COMPLETED).build(),
        make_job(12).depends("afterok:10").build(),
        make_job(13).name("solo").running_on("n1").build(),
        make_job(14).name("solo").depends("singleton").build(),
    )
    assert shown(cluster, 12) == "afterok:10_*(unfulfilled)"
    assert shown(cluster, 14) == "singleton(unfulfilled)"
    on_element = make_job(15).build()
    spec = on_element.spec
    dep = parse_dependency("afterok:10_1", element=cluster.element_id)
    store(cluster, on_element.evolve(spec=replace(spec, dependency=dep)))
    assert shown(cluster, 15) is None  # element 1 completed; the array has not
    dep = parse_dependency("afterok:10_0", element=cluster.element_id)
    store(cluster, make_job(16).build().evolve(spec=replace(spec, dependency=dep)))
    assert shown(cluster, 16) == "afterok:10_0(unfulfilled)"
