"""``hal cloud``'s table (hal.cli.cloud.render)."""

from __future__ import annotations

from hal.cli.cloud import render
from hal.wire.cloud import CloudGroupInfo, CloudNodeInfo, CloudStatus


def test_groups_then_each_groups_nodes_with_age_and_idle_time() -> None:
    burst = CloudGroupInfo(
        name="burst",
        provider="local",
        nodes=["burst1", "burst2", "burst3"],
        cpus=8,
        memory_bytes=4 << 30,
        price_per_hour=0.5,
        idle_seconds=300,
        boot_timeout_seconds=300,
        instances=[
            CloudNodeInfo(
                node="burst2", instance="i-2", state="idle", created_at=0.0, idle_since=40.0
            ),
            CloudNodeInfo(node="burst1", instance="i-1", state="booting", created_at=95.0),
        ],
        created=3,
        removed=1,
        boot_failures=1,
        resting_until=160.0,
        last_error="node burst3 (instance i-3) did not join within 300 s",
    )
    gpu = CloudGroupInfo(
        name="gpu", provider="ec2", nodes=["g1"], cpus=16, memory_bytes=1536 << 20, gpus=4,
        price_per_hour=3.06, idle_seconds=0, boot_timeout_seconds=600,
    )  # fmt: skip
    assert render(CloudStatus(groups=[burst, gpu]), now=100.0).splitlines() == [
        "GROUP        PROVIDER    NODES  CPUS   MEMORY GPUS  $/HOUR",
        "burst        local         2/3     8       4G    0   0.500",
        "gpu          ec2           0/1    16    1536M    4   3.060",
        "",
        "burst: NODE           STATE          AGE     IDLE  INSTANCE",
        "       burst1         booting    0:00:05        -  i-1",
        "       burst2         idle       0:01:40  0:01:00  i-2",
        "",
        "burst: made 3, removed 1, failed to join 1 (since the server started)",
        "burst: resting for 0:01:00",
        "burst: last error: node burst3 (instance i-3) did not join within 300 s",
        "",
        "gpu: made 0, removed 0, failed to join 0 (since the server started)",
    ]


def test_no_groups_says_where_to_look() -> None:
    assert render(CloudStatus(), now=0.0) == (
        "no node groups: hal.toml has no [cloud] groups (docs/admin/cloud.md)\n"
    )


def test_an_unhealthy_group_says_so_and_since_when() -> None:
    gpu = CloudGroupInfo(
        name="gpu", provider="lambda", nodes=["g1"], cpus=16, memory_bytes=1 << 30,
        idle_seconds=0, boot_timeout_seconds=600, resting_until=220.0, healthy=False,
        unhealthy_since=10.0, last_error="listing instances: Lambda Cloud (group gpu): no answer",
    )  # fmt: skip
    assert render(CloudStatus(groups=[gpu]), now=100.0).splitlines()[-3:] == [
        "gpu: UNHEALTHY for 0:01:30: its provider fails or does not answer",
        "gpu: resting for 0:02:00",
        "gpu: last error: listing instances: Lambda Cloud (group gpu): no answer",
    ]


def test_prices_show_source_age_and_a_reading_error() -> None:
    from hal.cli.cloud import render_prices
    from hal.wire.cloud import CloudPrice, CloudPrices

    prices = CloudPrices(
        price_interval_seconds=300,
        prices=[
            CloudPrice(group="burst", price_per_hour=0.17, source="config", observed_at=0.0,
                       age_seconds=192.0),
            CloudPrice(group="spot", price_per_hour=0.052, source="ec2 spot price history",
                       observed_at=0.0, age_seconds=3700.0, error="reading its price: timeout"),
        ],
    )  # fmt: skip
    assert render_prices(prices).splitlines() == [
        "GROUP          PRICE/H CUR      AGE  SOURCE",
        "burst           0.1700 USD  0:03:12  config",
        "spot            0.0520 USD  1:01:40  ec2 spot price history",
        "spot: reading its price: timeout (the price above is the last one read)",
    ]


def test_costs_per_account_and_user_then_each_budget() -> None:
    from hal.cli.cloud import render_costs
    from hal.wire.cloud import CloudBudgetInfo, CloudCost, CloudCosts

    costs = CloudCosts(
        since=0.0,
        until=10.0,
        total=12.5,
        costs=[CloudCost(account="physics", user="alice", cost=12.5, runs=3, running=1)],
        budgets=[
            CloudBudgetInfo(holder="account physics", limit=500.0, period="month", since=0.0,
                            spent=12.5, committed=4.0, waiting=2),
        ],
    )  # fmt: skip
    lines = render_costs(costs).splitlines()
    assert lines[1:4] == [
        "ACCOUNT          USER               COST   RUNS  RUNNING",
        "physics          alice             12.50      3        1",
        "total                              12.50",
    ]
    assert lines[-1] == "account physics            500.00 month       12.50       4.00       2"
