"""What sacct shows of an ended step's tasks (``hal.state.step_usage.summary``): the
most resident memory of one task, where it was (node, rank), the mean over the tasks
that were measured, and the CPU seconds of them all, as Slurm's MaxRSS, MaxRSSNode,
MaxRSSTask, AveRSS and TotalCPU of a step."""

from __future__ import annotations

from hal.state.step_usage import StepUsage, summary

MiB = 1 << 20


def test_the_most_of_one_task_where_it_was_the_mean_and_the_sum() -> None:
    totals = {
        0: ("n1", 10 * MiB, 1.5),
        1: ("n1", 70 * MiB, 2.0),
        2: ("n2", 70 * MiB, 0.25),  # as much as rank 1: the lower rank is named
        3: ("n2", 30 * MiB, 4.0),
    }
    assert summary(totals) == StepUsage(
        max_rss_bytes=70 * MiB,
        max_rss_node="n1",
        max_rss_task=1,
        ave_rss_bytes=45 * MiB,
        total_cpu_seconds=7.75,
    )


def test_a_task_whose_memory_was_not_measured_is_left_out_of_the_mean() -> None:
    totals = {0: ("n1", 0, 1.0), 1: ("n2", 40 * MiB, 1.0)}
    usage = summary(totals)
    assert (usage.max_rss_bytes, usage.ave_rss_bytes, usage.max_rss_node) == (
        40 * MiB,
        40 * MiB,
        "n2",
    )
    assert usage.total_cpu_seconds == 2.0


def test_no_task_reported_is_nothing_measured() -> None:
    assert summary({}) == StepUsage()
    assert summary({0: ("n1", 0, 0.5)}) == StepUsage(total_cpu_seconds=0.5)
