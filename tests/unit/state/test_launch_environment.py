"""The job-level environment the server sends with a launch (slurm-conventions §1.5)."""

from __future__ import annotations

from hal.core.job import JobSpec
from hal.state.launch import job_environment
from hal.testing.builders import make_job


def test_memory_per_cpu_and_per_gpu_are_exported_in_mib() -> None:
    """sbatch.1: SLURM_MEM_PER_CPU is --mem-per-cpu and SLURM_MEM_PER_GPU --mem-per-gpu
    (MiB); scripts size their heaps from them (java -Xmx${SLURM_MEM_PER_CPU}m). A job that
    asked for neither does not get a copy from the job it was submitted in."""
    job = make_job(3).running_on("n1").build()
    per_cpu = job.evolve(
        spec=JobSpec(user="ana", script="#!/bin/sh\n", memory_per_cpu_bytes=1536 << 20)
    )
    env = job_environment(per_cpu, "hal")
    assert env["SLURM_MEM_PER_CPU"] == env["HAL_MEM_PER_CPU"] == "1536"
    assert "SLURM_MEM_PER_GPU" not in env
    per_gpu = job.evolve(
        spec=JobSpec(
            user="ana",
            script="#!/bin/sh\n",
            memory_per_gpu_bytes=20 << 30,
            environment=(("SLURM_MEM_PER_CPU", "999"),),  # the enclosing job's
        )
    )
    env = job_environment(per_gpu, "hal")
    assert env["SLURM_MEM_PER_GPU"] == "20480"
    assert "SLURM_MEM_PER_CPU" not in env
