"""What an ended job step's tasks used, as accounting keeps it (ADR 0012).

Each node's end report (``StepEnd.tasks``, or srun's ``StepClose.tasks`` for a step it
ran on the batch node) carries each task's most resident memory and CPU seconds. Once
every node has ended, the step's record (``job_steps``) keeps what Slurm's sacct shows of
a step: MaxRSS (the most of one task), MaxRSSNode and MaxRSSTask (where: the lowest rank
of those with the most), AveRSS (the mean over the tasks whose memory was measured) and
TotalCPU (user and system seconds of all its tasks), and UserCPU and SystemCPU, its user
and system parts, where every task's end said them apart (``cpu_times``). A task of a
step given GPUs on its node also carries what its agent's NVML samples saw
(``gpu_summary``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hal.wire.jobs import StepGpuUsage

# rank → (its node, its most resident bytes (0: not measured), its CPU seconds)
Totals = Mapping[int, tuple[str, int, float]]
# rank → (its most GPU memory, its most utilisation, its samples' mean utilisation): the
# tasks read for GPUs (their step was given GPUs on their node, whose NVML answered)
GpuTotals = Mapping[int, tuple[int, int, float]]
# rank → (its user, its system CPU seconds): the tasks whose end said its CPU seconds'
# parts (an agent or srun before them did not)
CpuTimes = Mapping[int, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class StepUsage:
    max_rss_bytes: int = 0  # 0: no task's memory was measured
    max_rss_node: str = ""
    max_rss_task: int = 0
    ave_rss_bytes: int = 0
    total_cpu_seconds: float = 0.0


def summary(totals: Totals) -> StepUsage:
    """The step's usage from its tasks'."""
    cpu = sum(t[2] for t in totals.values())
    measured = {rank: t for rank, t in totals.items() if t[1] > 0}
    if not measured:
        return StepUsage(total_cpu_seconds=cpu)
    rank = min(measured, key=lambda r: (-measured[r][1], r))
    node, most, _ = measured[rank]
    mean = sum(t[1] for t in measured.values()) // len(measured)
    return StepUsage(most, node, rank, mean, cpu)


def cpu_times(totals: Totals, times: CpuTimes) -> tuple[float, float] | None:
    """The step's user and system CPU seconds (sacct's UserCPU and SystemCPU): its
    tasks' sums, their TotalCPU's parts; None, not known, where a task that used CPU
    did not say its parts (a task without CPU seconds has none to say)."""
    if any(used[2] > 0 and rank not in times for rank, used in totals.items()):
        return None
    parts = [times[rank] for rank in totals if rank in times]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def gpu_summary(gpus: GpuTotals) -> StepGpuUsage | None:
    """The step's GPU use from its tasks', as Slurm's gpu/nvml: ``TRESUsageInMax``'s
    ``gres/gpumem`` and ``gres/gpuutil`` the most of one task, ``TRESUsageInAve``'s the
    mean over the tasks (of each one's most memory, and of its mean utilisation); None
    when no task was read for GPUs."""
    if not gpus:
        return None
    used = list(gpus.values())
    return StepGpuUsage(
        max_mem_bytes=max(u[0] for u in used),
        ave_mem_bytes=sum(u[0] for u in used) // len(used),
        max_util=max(u[1] for u in used),
        ave_util=round(sum(u[2] for u in used) / len(used), 1),
    )
