"""What ``scontrol update`` changes in a pending job's request, and an array's throttle.

``Cluster.update`` calls these under its lock for ``JobUpdate``'s request fields
(``REQUEST_FIELDS``: StartTime, Dependency, QOS, Account, Features, ExcNodeList,
ReqNodeList, NumNodes, NumTasks, MinMemoryNode, MinMemoryCPU,
WorkDir, StdOut, StdErr, MailUser and MailType) and ``array_max_running``
(ArrayTaskThrottle):

* only a pending job's request changes, as in Slurm ("Job is no longer pending
  execution"); of an array, its elements still pending (none pending: refused);
* the new request is checked as at submit, with the same functions and messages: the
  dependency's jobs exist (``Cluster._known_ids``), the QoS and account are the owner's
  to use (``hal.state.associations``) within the submit limits, the node lists and
  features are ones the job can have (``Cluster.check_request``). A dependency that
  would make the job wait on itself (a cycle through pending jobs) is refused too;
* ArrayTaskThrottle is the array's ``%N``: it changes every element of the array.

The commit wakes the scheduler, whose next pass judges the job anew: a StartTime in the
future gives reason BeginTime, a cleared Dependency lets the job start. Permissions are
``Cluster.update``'s: the owner or an administrator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hal.core.errors import Conflict, InvalidRequest
from hal.core.job import ArraySpec, Dependency, Job
from hal.core.states import JobState
from hal.slurm.syntax import parse_dependency
from hal.state import reservations as advance_reservations

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

# JobUpdate field → the scontrol key that sets it (for messages)
REQUEST_FIELDS = {
    "begin_time": "StartTime",
    "dependency": "Dependency",
    "qos": "QOS",
    "account": "Account",
    "constraint": "Features",
    "exclude": "ExcNodeList",
    "nodelist": "ReqNodeList",
    "nodes_min": "NumNodes",
    "nodes_max": "NumNodes",
    "ntasks": "NumTasks",
    "memory_per_node_bytes": "MinMemoryNode",
    "memory_per_cpu_bytes": "MinMemoryCPU",
    "workdir": "WorkDir",
    "stdout": "StdOut",
    "stderr": "StdErr",
    "mail_user": "MailUser",
    "mail_type": "MailType",
}
# one memory request replaces the others, as sbatch's --mem/--mem-per-cpu/--mem-per-gpu
_MEMORY = ("memory_per_node_bytes", "memory_per_cpu_bytes", "memory_per_gpu_bytes")


async def request_changes(
    cluster: Cluster, jobs: Sequence[Job], fields: Mapping[str, object]
) -> dict[str, object]:
    """The ``JobSpec`` changes that ``fields`` ask of ``jobs`` (empty: none), refused
    when none of them is pending; a new dependency is parsed, its jobs must exist and
    none may wait on ``jobs``."""
    changes: dict[str, object] = {}
    for name in REQUEST_FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        if name == "dependency":  # "": none
            value = parse_dependency(str(value), element=cluster.element_id) if value else None
        elif name in ("constraint", "exclude", "nodelist"):
            value = tuple(dict.fromkeys(str(v) for v in value))  # type: ignore[attr-defined]
        elif name in ("qos", "account"):
            value = value or None  # "": the default
        changes[name] = value
    if not changes:
        return changes
    if all(j.state is not JobState.PENDING for j in jobs):
        job = jobs[0]
        keys = ", ".join(dict.fromkeys(REQUEST_FIELDS[name] for name in changes))
        raise Conflict(
            f"Job is no longer pending execution: job {job.display_id} is {job.state.value}; "
            f"its {keys} may change only while it is pending"
        )
    _shape(jobs, changes)
    dependency = changes.get("dependency")
    if isinstance(dependency, Dependency):
        probe = jobs[0].spec.with_changes(dependency=dependency)
        cluster.admission.check_dependency_targets(probe, await cluster.known_ids([probe]), None)
        check_no_cycle(cluster, jobs, dependency)
    return changes


def _shape(jobs: Sequence[Job], changes: dict[str, object]) -> None:
    """The rest of the request that NumNodes, NumTasks and a memory request imply: an
    explicit node count (as ``-N``), no fewer nodes than asked, and one memory request."""
    if "nodes_min" in changes:
        low = int(changes["nodes_min"])  # type: ignore[call-overload]
        high = int(changes.setdefault("nodes_max", low))  # type: ignore[call-overload]
        if high < low:
            raise InvalidRequest(f"NumNodes: the most nodes, {high}, is below the fewest, {low}")
        changes["fewest_nodes"] = False  # given, as -N: the job gets as many as it can
    given = [memory for memory in _MEMORY if changes.get(memory) is not None]
    if given:
        changes.update({other: None for other in _MEMORY if other != given[0]})
    workdir = changes.get("workdir")
    if workdir is not None and not str(workdir).startswith("/"):
        raise InvalidRequest(f"WorkDir must be an absolute path, got {workdir!r}")
    if (
        "ntasks" in changes
        and all(j.spec.fewest_nodes for j in jobs)
        and "nodes_min" not in changes
    ):
        changes["nodes_max"] = changes["ntasks"]  # no -N: up to a node per task, as at submit


def with_request(cluster: Cluster, job: Job, changes: Mapping[str, object]) -> Job:
    """Pending ``job`` with ``changes`` made to its request, checked as at submit (a
    new begin time or dependency alone leaves the rest of the request unjudged: nodes
    that left since the submission do not refuse it)."""
    spec = job.spec.with_changes(**changes)
    if changes.keys() - {"begin_time", "dependency"}:
        cluster.admission.check_request(spec, job.spec.partitions or (job.partition,))
    return job.evolve(spec=spec)


def moved_to_reservation(cluster: Cluster, job: Job, name: str) -> Job:
    """``job`` with ``--reservation`` changed to ``name`` ("": none), checked as at
    submit (``scontrol update JobId= Reservation=``: e.g. for a job held because its
    reservation was deleted)."""
    if job.state is not JobState.PENDING:
        raise Conflict("the reservation of a started job cannot change")
    spec = job.spec.with_changes(reservation=name)
    advance_reservations.check_job(cluster, spec, job.time_limit_s)
    return job.evolve(spec=spec)


def check_no_cycle(cluster: Cluster, jobs: Sequence[Job], dependency: Dependency) -> None:
    """Refuse ``dependency`` for ``jobs`` when one of the jobs it names waits, through
    the dependencies of pending jobs, on one of ``jobs`` or their array (Slurm's
    circular dependency): none of them could ever start."""
    mine = {j.id for j in jobs} | {j.array_job_id for j in jobs if j.array_job_id is not None}
    came_from: dict[int, int | None] = {}  # each job id reached ← the one waiting on it
    todo: list[tuple[int, int | None]] = [(i, None) for t in dependency.terms for i in t.job_ids]
    while todo:
        target, waiter = todo.pop()
        if target in came_from:
            continue
        came_from[target] = waiter
        if target in mine:
            path = [target]
            while (step := came_from[path[-1]]) is not None:
                path.append(step)
            # Slurm 22.05.8's words (docs/slurm-checks.md): a job naming itself is a
            # "Job dependency problem", a cycle through others a "Circular job dependency"
            if len(path) == 1 and target in {j.id for j in jobs}:
                raise InvalidRequest(
                    f"Job dependency problem: job {jobs[0].display_id} would wait on itself, "
                    "so it could never start; name other jobs",
                    field="dependency",
                )
            raise InvalidRequest(
                f"Circular job dependency: job {jobs[0].display_id} waits on "
                f"{' -> '.join(map(str, reversed(path)))}, so it could never start; name "
                "jobs that do not wait on it",
                field="dependency",
            )
        named = [cluster.jobs.get(target)]  # a job, or every element of an array
        named += [cluster.jobs.get(e) for e in cluster.arrays.get(target, ())]
        for job in named:
            if job is None or job.state is not JobState.PENDING or job.spec.dependency is None:
                continue  # a job that runs or has ended waits on nothing
            todo += [(i, target) for t in job.spec.dependency.terms for i in t.job_ids]


def throttled(cluster: Cluster, jobs: Sequence[Job], changed: list[Job], limit: int) -> list[Job]:
    """``changed`` with ArrayTaskThrottle ``limit`` (0: none) set on every element, in
    the mirror, of the arrays of ``jobs``: Slurm's ``%N`` is the whole array's."""
    arrays = {j.array_job_id for j in jobs}
    if None in arrays:
        job = next(j for j in jobs if j.array_job_id is None)
        raise InvalidRequest(
            f"ArrayTaskThrottle applies to job arrays only; job {job.display_id} is not one "
            "(give an array's id, e.g. 123 or 123_4)",
            field="array_max_running",
        )
    by_id = {j.id: j for j in changed}
    for array in sorted(a for a in arrays if a is not None):
        for element in cluster.arrays.get(array, ()):
            current = by_id.get(element) or cluster.jobs.get(element)
            if current is None:
                continue
            spec = current.spec
            if spec.array is not None:  # stored with the request, as sbatch gave it
                spec = spec.with_changes(
                    array=ArraySpec(spec.array.indices, limit, spec.array.text)
                )
            by_id[element] = current.evolve(array_max_running=limit, spec=spec)
    return list(by_id.values())
