"""EASY in one partition and conservative in another, chosen through ``[scheduler]
plugin_args`` alone (the server's default profile otherwise kept). Each partition has
four single-CPU nodes, two busy until 1090."""

from __future__ import annotations

from hal.config.model import config_from_dict
from hal.scheduler.plugins import build_scheduler
from hal.server.profile import server_profile
from hal.testing import cluster, expected_starts, make_job

NOW = 1000.0
ARGS = {"backfill": {"resolution_s": 1, "partitions": {"long": "conservative"}}}


def test_each_partition_backfills_with_its_own_mode() -> None:
    """Both partitions hold a 4-node head and a 3-node job behind it. EASY (``short``)
    reserves for the head only (the job behind it gets a forecast start); conservative
    (``long``) reserves for both."""
    sched = build_scheduler(server_profile(config_from_dict({"scheduler": {"plugin_args": ARGS}})))
    nodes = [f"n{i:04d}" for i in range(1, 9)]
    builder = cluster(NOW).uniform_nodes(8, cpus=1)
    builder.partition("short", *nodes[:4]).partition("long", *nodes[4:])
    for part, base, first in (("short", 0, 0), ("long", 100, 4)):
        builder.running(
            make_job(base + 1).partition(part).limit(100).running_on(nodes[first], start=NOW - 10),
            make_job(base + 2)
            .partition(part)
            .limit(100)
            .running_on(nodes[first + 1], start=NOW - 10),
        )
        builder.pending(
            make_job(base + 10).partition(part).nodes(4).limit(100),
            make_job(base + 11).partition(part).nodes(3).limit(60),
        )
    result = sched.run_pass(builder.build())
    assert expected_starts(sched, result.plan) == {10: 1090, 11: 1190, 110: 1090, 111: 1190}
    assert set(result.reservations) == {10, 110, 111}
