"""Multi-node --topology required=nvlink when only some partitions have NVLink
domains: a partition without domains keeps the per-node meaning (PreFilter says so),
so its jobs are placed instead of waiting for a domain they can never get; a partition
with domains still never splits a job across them."""

from __future__ import annotations

from hal.core.states import PendingReason as R
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import JobBuilder, cluster, make_job, make_node, placed_nodes, reasons

NOW = 1_000_000.0


def _run(job: JobBuilder) -> tuple[tuple[str, ...] | None, R | None]:
    nodes = [
        make_node("g1").partitions("gpu").nvlink_domain("nvA"),
        make_node("g2").partitions("gpu").nvlink_domain("nvB"),
        make_node("g3").partitions("gpu").nvlink_domain("nvA"),
        make_node("c1").partitions("cpu"),
        make_node("c2").partitions("cpu"),
    ]
    snap = (
        cluster(NOW)
        .nodes(*nodes)
        .partition("gpu", "g1", "g2", "g3")
        .partition("cpu", "c1", "c2")
        .pending(job)
        .build()
    )
    plan = build_scheduler(default_profile()).schedule(snap)
    return placed_nodes(plan).get(job.build().id), reasons(plan).get(job.build().id)


def test_partition_without_domains_is_placed() -> None:
    """Was: waiting with Resources forever, since another partition has domains."""
    placed, reason = _run(make_job(1).partition("cpu").nodes(2).topology("nvlink", required=True))
    assert reason is None
    assert placed is not None and sorted(placed) == ["c1", "c2"]


def test_partition_with_domains_stays_in_one() -> None:
    placed, reason = _run(make_job(1).partition("gpu").nodes(2).topology("nvlink", required=True))
    assert reason is None
    assert placed is not None and sorted(placed) == ["g1", "g3"]


def test_partition_with_domains_too_large_is_bad_constraints() -> None:
    placed, reason = _run(make_job(1).partition("gpu").nodes(3).topology("nvlink", required=True))
    assert placed is None and reason is R.BAD_CONSTRAINTS
