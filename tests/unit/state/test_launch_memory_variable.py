"""``SLURM_MEM_PER_NODE`` only where a job asked ``--mem=N`` above 0, as Slurm 22.05.8.

Checked on the real Slurm (``SelectTypeParameters=CR_Core_Memory``, a node
with 2 GPUs): a batch job of ``--mem=0``, ``--mem-per-cpu=0`` or ``--mem-per-gpu=0``
holds all of its node's memory (``TRES=...,mem=<the node's>``, ``MinMemoryNode=0``) and
has no ``SLURM_MEM_PER_NODE`` (nor ``SLURM_MEM_PER_CPU``), nor do an ``salloc``'s command
and the sruns in either; ``--mem-per-cpu=100`` has ``SLURM_MEM_PER_CPU=100`` alone,
``--mem=100`` ``SLURM_MEM_PER_NODE=100``. HAL's agent set ``SLURM_MEM_PER_NODE`` to the
memory the job held on the node, so a ``--mem=0`` job had the node's total."""

from __future__ import annotations

import pytest

from hal.agent.environment import job_environment as node_environment
from hal.api.convert import to_spec
from hal.core.resources import GiB, ResourceVector
from hal.state.launch import build_launch
from hal.testing.builders import make_job
from hal.wire.submit import JobSubmit, check


def launched(**memory: int) -> dict[str, str]:
    """The batch script's environment on its node, of a job that holds 2 GiB there."""
    spec = make_job(3).build().spec.with_changes(**memory)
    job = make_job(3).running_on("n1", per_node=ResourceVector(1, 2 * GiB, 0)).build()
    launch = build_launch(job.evolve(spec=spec), "hal")
    return node_environment(launch, "n1")


@pytest.mark.parametrize(
    "memory",
    [
        {"memory_per_node_bytes": 0},
        {"memory_per_cpu_bytes": 1 << 30},
        {"memory_per_gpu_bytes": 1 << 30},
    ],
)
def test_no_mem_per_node_without_a_mem_above_zero(memory: dict[str, int]) -> None:
    env = launched(**memory)
    assert "SLURM_MEM_PER_NODE" not in env
    assert env["HAL_MEM_PER_NODE"] == "2048"  # (HAL's own: what the job holds there)


def test_mem_above_zero_is_the_jobs_mem_per_node() -> None:
    assert launched(memory_per_node_bytes=2 * GiB)["SLURM_MEM_PER_NODE"] == "2048"


@pytest.mark.parametrize("field", ["memory_per_cpu_bytes", "memory_per_gpu_bytes"])
def test_the_api_takes_zero_per_cpu_or_gpu_as_all_of_the_nodes_memory(field: str) -> None:
    """As sbatch sends ``--mem-per-cpu=0``/``--mem-per-gpu=0`` (``memory_per_node_bytes=0``),
    and as Slurm takes them; HAL's API refused 0 ("greater than or equal to 1")."""
    request = JobSubmit(script="#!/bin/sh\n", **{field: 0})
    check(request)  # (the bounds the server checks; 0 was below them)
    spec = to_spec(request, "alice", max_array_size=10)
    assert spec.memory_per_node_bytes == 0
    assert spec.memory_per_cpu_bytes is None and spec.memory_per_gpu_bytes is None
