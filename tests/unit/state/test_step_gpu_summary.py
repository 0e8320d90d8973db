"""What sacct shows of an ended step's GPU use (``hal.state.step_usage.gpu_summary``),
as Slurm's gpu/nvml per task: TRESUsageInMax's ``gres/gpumem`` and ``gres/gpuutil`` are
the most of one task, TRESUsageInAve's the mean over the tasks (of their most memory and
of their mean utilisation); a step whose tasks were not read for GPUs has none."""

from __future__ import annotations

from hal.state.step_usage import gpu_summary
from hal.wire.jobs import StepGpuUsage

GiB = 1 << 30


def test_the_most_of_one_task_and_the_mean_over_the_tasks() -> None:
    gpus = {
        0: (1 * GiB, 70, 60.0),
        1: (3 * GiB, 40, 35.5),  # the most memory
        2: (2 * GiB, 95, 80.0),  # the most utilisation
        3: (0, 0, 0.0),  # on the step's GPUs, but touched none: counts in the mean
    }
    assert gpu_summary(gpus) == StepGpuUsage(
        max_mem_bytes=3 * GiB, ave_mem_bytes=GiB + GiB // 2, max_util=95, ave_util=43.9
    )


def test_no_task_read_for_gpus_is_none() -> None:
    assert gpu_summary({}) is None
