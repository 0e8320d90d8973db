"""GPU use of job step tasks, as Slurm's gpu/nvml reads it per task: each usage sample
the agent reads NVML once (``GpuSampler.sample``) for its GPU jobs and step tasks
together, sums the per-process use over a task's process tree (the task itself and the
processes below it) for a step given GPUs on this node, keeps a tally per task, sends it
with the task's sample (``StepTaskUsage.gpu``, for ``sstat -j JOB.N``) and, once the
node's part ends, with the task's end (``TaskTotals.gpu``, for sacct)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from test_step_tasks import step

from hal.agent.channel import AgentChannel
from hal.agent.config import AgentConfig
from hal.agent.gpuusage import ProcessGpu
from hal.agent.procfs import children
from hal.agent.shell import AgentShell, _Watch
from hal.agent.steps import _NodeStep, _totals
from hal.host.process import start_ticks

GiB = 1 << 30


class CountingSampler:
    """NVML's per-process use, fixed: ``pid → use``; counts its reads."""

    def __init__(self, use: dict[int, ProcessGpu]) -> None:
        self.use = use
        self.reads = 0

    def sample(self) -> dict[int, ProcessGpu]:
        self.reads += 1
        return dict(self.use)


def tree() -> subprocess.Popen[bytes]:
    """A shell (the task, or a batch script's supervisor) with one child below it."""
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    for _ in range(200):
        if children(proc.pid):
            return proc
        time.sleep(0.01)
    raise AssertionError("the child did not start")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        for child in children(proc.pid):
            os.kill(child, 9)
        proc.kill()
        proc.wait()


def shell(tmp_path: Path) -> AgentShell:
    return AgentShell(AgentConfig(state_dir=tmp_path, token="t"), cast(AgentChannel, None))


def add_step(agent: AgentShell, tmp_path: Path, step_id: int, pid: int, gpus: list[int]) -> None:
    launch = step(tmp_path, "true", [step_id], step_id=step_id)
    launch.launch.gpu_ids = gpus
    part = _NodeStep(launch, str(tmp_path / f"12.{step_id}"))
    part.tasks = {step_id: (pid, start_ticks(pid))}  # rank = step id: one task each
    agent.steps._steps[(12, 0, step_id)] = part  # (job, run, step)


def test_one_nvml_read_for_jobs_and_step_tasks_summed_over_each_tree(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    job, gpu_task, plain_task = tree(), tree(), tree()
    procs += [job, gpu_task, plain_task]
    (job_child,) = children(job.pid)
    (task_child,) = children(gpu_task.pid)
    (plain_child,) = children(plain_task.pid)
    sampler = CountingSampler(
        {
            job_child: ProcessGpu(4 * GiB, 90),
            gpu_task.pid: ProcessGpu(1 * GiB, 30),  # the task itself counts
            task_child: ProcessGpu(2 * GiB, 40),
            plain_child: ProcessGpu(8 * GiB, 99),  # a step given no GPUs here: not read
        }
    )
    agent = shell(tmp_path)
    agent.gpu_sampler = sampler  # type: ignore[assignment]
    agent._watches = {7: _Watch(7, 0, job.pid, start_ticks(job.pid), str(tmp_path))}
    agent._holds_gpus = lambda job_id: job_id == 7  # type: ignore[method-assign]
    add_step(agent, tmp_path, 0, gpu_task.pid, [0])
    add_step(agent, tmp_path, 1, plain_task.pid, [])

    jobs, tasks = asyncio.run(agent._sample_usage())
    assert sampler.reads == 1  # one NVML read for both
    (job_use,) = jobs
    assert job_use.gpu is not None and (job_use.gpu.mem_bytes, job_use.gpu.util) == (4 * GiB, 90)
    used = {t.step_id: t for t in tasks}
    first = used[0].gpu
    assert first is not None and (first.mem_bytes, first.util) == (3 * GiB, 70), first
    assert used[1].gpu is None  # no GPUs given: none, not zero

    sampler.use[task_child] = ProcessGpu(5 * GiB, 10)  # the next sample: less busy, more memory
    agent._sampled_at = -100.0
    _, again = asyncio.run(agent._sample_usage())
    later = {t.step_id: t for t in again}[0].gpu
    assert later is not None
    assert (later.mem_bytes, later.max_mem_bytes, later.util, later.max_util, later.ave_util) == (
        6 * GiB,
        6 * GiB,
        40,
        70,
        55.0,
    )
    assert sampler.reads == 2

    ended = agent.steps._steps[(12, 0, 0)]
    (total,) = _totals(ended)  # what goes with the node's end
    assert total.gpu is not None
    assert (total.gpu.max_mem_bytes, total.gpu.max_util, total.gpu.ave_util) == (6 * GiB, 70, 55.0)
    (plain_total,) = _totals(agent.steps._steps[(12, 0, 1)])
    assert plain_total.gpu is None


def test_no_nvml_read_without_gpu_jobs_or_gpu_steps(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    task = tree()
    procs.append(task)
    sampler = CountingSampler({task.pid: ProcessGpu(GiB, 50)})
    agent = shell(tmp_path)
    agent.gpu_sampler = sampler  # type: ignore[assignment]
    add_step(agent, tmp_path, 0, task.pid, [])
    _, tasks = asyncio.run(agent._sample_usage())
    assert sampler.reads == 0 and [t.gpu for t in tasks] == [None]
