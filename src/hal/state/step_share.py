"""What of its job a step holds on each of its nodes: CPUs (``-c``, ``--exact``), memory
(``--mem``, ``--mem-per-cpu``) and GPUs (``--gpus``), worked out as Slurm 22.05.8's
step creation does it. ``asked`` refuses outright what the job could never give (more
than it has on a node); ``taken``, called under the job's lock with the steps already
running, gives the lowest free CPUs and GPUs and the memory, or refuses for now (``BUSY``:
srun waits) while the job's other steps hold them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hal.core.errors import Conflict
from hal.core.job import Allocation, Job
from hal.slurm.steps import (
    BUSY,
    StepLayout,
    StepRequest,
    pick_cpus,
    pick_gpus,
    refused,
    step_cpu_asks,
    step_gpu_counts,
    step_memory_asks,
)

if TYPE_CHECKING:
    from hal.state.steps import Step


@dataclass(frozen=True, slots=True)
class Asked:
    """What a step asks of its job on each of its nodes: CPUs and memory (bytes)."""

    cpus: dict[str, int]
    memory: dict[str, int]


@dataclass(frozen=True, slots=True)
class Taken:
    """What a step holds: its CPUs (their places among the job's) and memory on each
    node (none with ``--overlap``), and its GPUs (None: it asked for none)."""

    cpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    gpu_ids: dict[str, tuple[int, ...]] | None = None


def asked(job: Job, alloc: Allocation, layout: StepLayout, request: StepRequest) -> Asked:
    """What the step asks for on each of its nodes; refused outright where that is more
    than the job has there."""
    cpus = _cpu_counts(job.id, alloc, layout, request)
    return Asked(cpus, _memory_asks(job, alloc, request, cpus))


def taken(
    job: Job,
    alloc: Allocation,
    layout: StepLayout,
    request: StepRequest,
    asks: Asked,
    running: Sequence[Step],
) -> Taken:
    """What the step gets beside ``running`` (the job's other steps still running);
    refused for now (``BUSY``) while they hold too much."""
    gpu_ids = _step_gpus(job.id, alloc, layout, request, running)
    cpus = {} if request.overlap else _take_cpus(job.id, alloc, asks.cpus, running)
    memory = _take_memory(job, alloc, request, asks.memory, running)
    return Taken(cpus, memory, gpu_ids)


def _cpu_counts(
    job_id: int, alloc: Allocation, layout: StepLayout, request: StepRequest
) -> dict[str, int]:
    """The job's CPUs a step asks for on each of its nodes (``step_cpu_asks``, with
    ``--overlap`` too); refused outright where it asks for more than the job has
    there."""
    have = [_cpus_on(alloc, n) for n in layout.nodes]
    counts = step_cpu_asks(request, layout, have)
    for node, want, total in zip(layout.nodes, counts, have, strict=True):
        if want > total:
            raise refused(
                job_id,
                f"More processors requested than permitted: the step asks for {want} "
                f"CPU(s) on {node}, where the job has {total}; ask for fewer tasks (-n) "
                "or CPUs per task (-c)",
            )
    return dict(zip(layout.nodes, counts, strict=True))


def _take_cpus(
    job_id: int, alloc: Allocation, wanted: dict[str, int], running: Sequence[Step]
) -> dict[str, tuple[int, ...]]:
    """Which of the job's CPUs on each node a step ``wanted`` that many of gets (the
    lowest free, by their place among the job's there); refused for now (``BUSY``)
    while the job's other steps hold too many of them."""
    given: dict[str, tuple[int, ...]] = {}
    for node, want in wanted.items():
        total = _cpus_on(alloc, node)
        held = {c for s in running if node not in s.ended for c in s.cpus.get(node, ())}
        picked = pick_cpus(held, total, want)
        if picked is None:
            raise Conflict(
                f"Unable to create step for job {job_id}: Requested nodes are busy "
                f"(other steps of the job hold {len(held)} of its {total} CPU(s) on "
                f"{node}; srun waits for them, or runs beside them with --overlap)",
                field=BUSY,
            )
        given[node] = picked
    return given


def _memory_asks(
    job: Job, alloc: Allocation, request: StepRequest, cpus: dict[str, int]
) -> dict[str, int]:
    """The memory a step asks for on each of its nodes (``step_memory_asks``;
    ``cpus``: its CPUs there), in bytes: its cgroup's limit there (0: the job's
    alone). Refused outright where it asks for more than the job has there, as
    Slurm 22.05.8 refuses it, unless the job asked for no memory (or ``--mem=0``):
    it holds none of its own for its steps to share, as Slurm's."""
    nodes = list(cpus)
    have = [_memory_on(alloc, n) for n in nodes]
    asks = step_memory_asks(request, list(cpus.values()), have, job.spec.memory_per_cpu_bytes)
    for node, want, total in zip(nodes, asks, have, strict=True):
        if want > total and _holds_memory(job, alloc):
            raise refused(
                job.id,
                f"Memory required by task is not available: the step asks for "
                f"{want >> 20} MiB on {node}, where the job has {total >> 20} MiB; "
                "ask for less with srun --mem or --mem-per-cpu",
            )
    return dict(zip(nodes, asks, strict=True))


def _take_memory(
    job: Job,
    alloc: Allocation,
    request: StepRequest,
    asks: dict[str, int],
    running: Sequence[Step],
) -> dict[str, int]:
    """The memory a step that ``asks`` for it holds on each node: all it asks for,
    or none with ``--overlap``, ``--mem=0`` (Slurm 22.05.8's holds none) or where the
    job holds none; refused for now (``BUSY``) while the job's other steps hold too
    much of it."""
    if request.overlap or request.mem_per_node == 0 or not _holds_memory(job, alloc):
        return {}
    for node, want in asks.items():
        held = sum(s.memory.get(node, 0) for s in running if node not in s.ended)
        total = _memory_on(alloc, node)
        if held + want > total:
            raise Conflict(
                f"Unable to create step for job {job.id}: Requested nodes are busy "
                f"(other steps of the job hold {held >> 20} of its {total >> 20} MiB of "
                f"memory on {node}; srun waits for it, or asks for less with --mem)",
                field=BUSY,
            )
    return asks


def _step_gpus(
    job_id: int,
    alloc: Allocation,
    layout: StepLayout,
    request: StepRequest,
    running: Sequence[Step],
) -> dict[str, tuple[int, ...]] | None:
    """The GPUs a step holds on each of its nodes (``step_gpu_counts``; None: it
    holds none); refused for now (``BUSY``) while the job's other steps hold too
    many of them."""
    job_gpus = {n: _gpus_on(alloc, n) for n in layout.nodes}
    counts = step_gpu_counts(request, layout, [len(job_gpus[n]) for n in layout.nodes])
    if counts is None:
        return None
    given: dict[str, tuple[int, ...]] = {}
    for node, want in zip(layout.nodes, counts, strict=True):
        held = {g for s in running if node not in s.ended for g in s.gpu_ids.get(node, ())}
        picked = pick_gpus(job_id, node, job_gpus[node], held, want)
        if picked is None:
            raise Conflict(
                f"Unable to create step for job {job_id}: Requested nodes are busy "
                f"(the job's GPUs on {node} are held by its other steps; srun waits "
                "for them, or runs beside them with --overlap)",
                field=BUSY,
            )
        given[node] = picked
    return given


def _gpus_on(alloc: Allocation, node: str) -> tuple[int, ...]:
    """The job's GPUs on ``node``."""
    return tuple(alloc.gpu_ids[alloc.nodes.index(node)]) if alloc.gpu_ids else ()


def _memory_on(alloc: Allocation, node: str) -> int:
    """The job's memory on ``node``, in bytes."""
    return alloc.per_node[alloc.nodes.index(node)].memory_bytes


def _holds_memory(job: Job, alloc: Allocation) -> bool:
    """Whether the job holds memory of its own that its steps share out (it asked for
    some: not ``--mem=0``, which Slurm's steps do not hold)."""
    return job.spec.memory_per_node_bytes != 0 and any(r.memory_bytes for r in alloc.per_node)


def _cpus_on(alloc: Allocation, node: str) -> int:
    """The job's CPUs on ``node``, one of its allocation's."""
    return alloc.per_node[alloc.nodes.index(node)].cpus
