"""The job-level environment the server sends with a launch (slurm-conventions §1.5)."""

from __future__ import annotations

from hal.core.job import Allocation, JobSpec
from hal.core.resources import ResourceVector
from hal.slurm.syntax import parse_array
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


def test_tasks_per_node_add_up_to_the_tasks() -> None:
    """sbatch.1: SLURM_TASKS_PER_NODE lists each node's tasks in node-list order, runs of
    equal counts as N(xK) ("2(x3),1"). `-N 2 -n 3` was "2(x2)", four tasks for three."""
    job = make_job(3).running_on("n1", "n2", "n3").build()
    for ntasks, per_node, expected in (
        (4, None, "2,1(x2)"),
        (5, None, "2(x2),1"),
        (6, None, "2(x3)"),
        (9, 3, "3(x3)"),
    ):
        spec = JobSpec(user="ana", script="#!/bin/sh\n", ntasks=ntasks, ntasks_per_node=per_node)
        env = job_environment(job.evolve(spec=spec), "hal")
        assert env["SLURM_TASKS_PER_NODE"] == env["HAL_TASKS_PER_NODE"] == expected
        counts = [
            int(n) * int(k or 1)
            for part in expected.split(",")
            for n, _, k in [part.rstrip(")").partition("(x")]
        ]
        assert sum(counts) == ntasks
    two = make_job(4).running_on("n1", "n2").build()
    spec = JobSpec(user="ana", script="#!/bin/sh\n", ntasks=3)
    assert job_environment(two.evolve(spec=spec), "hal")["SLURM_TASKS_PER_NODE"] == "2,1"


def test_job_cpus_per_node_lists_every_node_in_node_list_order() -> None:
    """sbatch.1: SLURM_JOB_CPUS_PER_NODE is the CPUs of each node of the job, in node-list
    order, as Slurm 22.05.8 gave `-N2 -c2 --ntasks-per-node=1` ("2(x2)") and `-n3 -N2`
    on two-CPU nodes ("2,1"). It was the batch node's count alone ("2")."""
    job = make_job(3).running_on("n1").build()
    for nodes, cpus, expected in (
        (("n1", "n2"), (2, 2), "2(x2)"),
        (("n2", "n1"), (1, 2), "2,1"),  # (rank order n2 first; the node list sorts n1 first)
        (("n10", "n9", "n2"), (4, 4, 3), "3,4(x2)"),
        (("n1",), (8,), "8"),
    ):
        allocation = Allocation(nodes, tuple(ResourceVector(cpus=c) for c in cpus))
        env = job_environment(job.evolve(allocation=allocation), "hal")
        assert env["SLURM_JOB_CPUS_PER_NODE"] == expected


def test_array_task_step_is_the_step_written_and_open_mode_is_passed_to_sruns() -> None:
    """Slurm 22.05.8: SLURM_ARRAY_TASK_STEP is the spec's ``:N`` (else 1), not
    the gap its indices share (``1,3,5`` is 1, ``1,3,7-9:2`` is 2); ``--open-mode=append``
    sets SLURM_OPEN_MODE=a for the job's sruns, and a job without it has none."""
    base = make_job(3).running_on("n1").build().evolve(array_job_id=3, array_task_id=1)
    for text, step in (("1,3,5", "1"), ("1,3,7-9:2", "2"), ("0-4:2,7-9", "2"), ("0-3", "1")):
        spec = JobSpec(user="ana", script="#!/bin/sh\n", array=parse_array(text))
        env = job_environment(base.evolve(spec=spec), "hal")
        assert env["SLURM_ARRAY_TASK_STEP"] == step, text
        assert "SLURM_OPEN_MODE" not in env
    spec = JobSpec(user="ana", script="#!/bin/sh\n", open_mode="append")
    assert job_environment(base.evolve(spec=spec), "hal")["SLURM_OPEN_MODE"] == "a"


def test_cpus_per_task_and_ntasks_per_node_only_where_given() -> None:
    """Slurm 22.05.8 sets SLURM_CPUS_PER_TASK only where -c was given (sbatch
    sends its value), and SLURM_NTASKS_PER_NODE where --ntasks-per-node was; HAL set
    SLURM_CPUS_PER_TASK=1 always, so a script's ${SLURM_CPUS_PER_TASK:-4} got 1."""
    job = make_job(3).running_on("n1").build()

    def env(**kw: object) -> dict[str, str]:
        return job_environment(
            job.evolve(spec=JobSpec(user="ana", script="#!/bin/sh\n", **kw)), "hal"
        )  # type: ignore[arg-type]

    assert "SLURM_CPUS_PER_TASK" not in env() and "SLURM_NTASKS_PER_NODE" not in env()
    assert env(cpus_per_task=2)["SLURM_CPUS_PER_TASK"] == "2"
    given = env(environment=(("SLURM_CPUS_PER_TASK", "1"),))  # sbatch -c 1
    assert given["SLURM_CPUS_PER_TASK"] == "1"
    assert "SLURM_CPUS_PER_TASK" not in env(environment=(("SLURM_CPUS_PER_TASK", "4"),))
    assert env(ntasks_per_node=2, ntasks=2)["SLURM_NTASKS_PER_NODE"] == "2"
