"""What an ended job step's tasks used, as accounting keeps it (ADR 0012).

Each node's end report (``StepEnd.tasks``, or srun's ``StepClose.tasks`` for a step it
ran on the batch node) carries each task's most resident memory and CPU seconds. Once
every node has ended, the step's record (``job_steps``) keeps what Slurm's sacct shows of
a step: MaxRSS (the most of one task), MaxRSSNode and MaxRSSTask (where: the lowest rank
of those with the most), AveRSS (the mean over the tasks whose memory was measured) and
TotalCPU (user and system seconds of all its tasks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# rank → (its node, its most resident bytes (0: not measured), its CPU seconds)
Totals = Mapping[int, tuple[str, int, float]]


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
