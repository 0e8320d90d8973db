"""What a pending job's dependency shows (``scontrol show job``'s ``Dependency=``, squeue's
``%E``), as Slurm 22.05.8 shows it (on its peer): each condition not yet met
with its own status, ``afterok:85(failed),afterok:86(unfulfilled)``; a condition that is
met is dropped (``afterany:F,afterok:L`` once F has ended reads ``afterok:L(unfulfilled)``);
a whole array as ``12_*``; ``None`` (``(null)``) once the dependency holds, or the job no
longer waits. Each condition is judged by the scheduler's own rules
(``hal.scheduler.plugins.dependency``)."""

from __future__ import annotations

from hal.core.job import DependencyKind, Job
from hal.core.states import JobState, PendingReason
from hal.scheduler.plugins.dependency.dependency import Verdict, condition
from hal.state.cluster import Cluster


def dependency_shown(job: Job, cluster: Cluster) -> str | None:
    dep = job.spec.dependency
    if dep is None or job.state is not JobState.PENDING:
        return None
    shown: list[str] = []
    met = False
    for term in dep.terms:
        if term.kind is DependencyKind.SINGLETON:
            busy = cluster.busy_names()[(job.spec.name, job.spec.user)] > 0
            met = met or not busy
            if busy:
                shown.append("singleton(unfulfilled)")
            continue
        for target_id in term.job_ids:
            verdict, name = _judged(cluster, job, term.kind, target_id, term.elements)
            met = met or verdict is Verdict.MET
            if verdict is not Verdict.MET:
                status = "failed" if verdict is Verdict.NEVER else "unfulfilled"
                shown.append(f"{term.kind.value}:{name}({status})")
    if not shown or (dep.any_of and met):
        return None
    return ("?" if dep.any_of else ",").join(shown)


def _judged(
    cluster: Cluster, job: Job, kind: DependencyKind, target_id: int, ones: tuple[int, ...]
) -> tuple[Verdict, str]:
    """A condition's verdict, and how its target is named (``12_*``: a whole array; an id
    in ``ones`` names one element, element 0 of the array with its id among them)."""
    whole = () if target_id in ones else cluster.arrays.get(target_id, ())
    elements = [cluster.jobs[e] for e in whole if e in cluster.jobs]
    target = cluster.jobs.get(target_id)
    if elements:
        corresponding = None
        if kind is DependencyKind.AFTERCORR and job.array_task_id is not None:
            found = (e for e in elements if e.array_task_id == job.array_task_id)
            corresponding = next(found, None)
        return condition(kind, target, elements, corresponding), f"{target_id}_*"
    if target is None:  # ended long ago, out of the mirror: the scheduler's word stands
        never = job.reason is PendingReason.DEPENDENCY_NEVER_SATISFIED
        return (Verdict.NEVER if never else Verdict.WAITING), str(target_id)
    name = str(target_id)
    if target_id in ones and target.array_job_id is not None:
        name = f"{target.array_job_id}_{target.array_task_id}"
    return condition(kind, target, ()), name
