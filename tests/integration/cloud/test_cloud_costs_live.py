"""Prices, costs and budgets live: a real control plane whose ``[cloud]`` group of the
local provider reads its price from a file (the provider's published price: change the
file and the next reading follows it), and an account with a ``cloud_budget``.

A job within the budget gets a node made at the file's price and, once ended, a cost in
``GET /v1/jobs`` and ``sacct -o Cost``; a job whose burst would pass the budget gets no
node and waits with reason ``CloudBudget``, which ``hal explain`` spells out (the budget,
what is spent, the limit); a price that cannot be read keeps the last one and shows the
error in ``hal cloud prices``. The set-up is ``test_autoscaler_live``'s."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from pathlib import Path

from test_autoscaler_live import Cloud, config_toml, created_nodes, group_toml, start_cloud

from hal.testing.live import wait_until

__all__ = ["start_cloud"]  # (the fixture, imported to be found)


def budget_toml(price_file: Path) -> str:
    user = getpass.getuser()
    group = group_toml("burst", "burst[1-2]", cpus=2, price=9.0)
    group += f'[cloud.groups.local]\nprice_file = "{price_file}"\n'
    return (
        config_toml(group).replace(
            "pending_seconds = 0\n", "pending_seconds = 0\nprice_interval_seconds = 0.5\n"
        )
        + '\n[[accounts]]\nname = "physics"\ncloud_budget = "1 USD/day"\n'
        + f'\n[[users]]\nname = "{user}"\ndefault_account = "physics"\n'
    )


def test_a_burst_is_charged_its_price_and_one_past_the_budget_waits(
    start_cloud: Callable[[str], Cloud], tmp_path: Path
) -> None:
    price_file = tmp_path / "price"
    price_file.write_text("2.0\n")
    cloud = start_cloud(budget_toml(price_file))

    # past it: 2.0 an hour for an hour is 2 > 1; no node, the reason says why (first,
    # while nothing is learnt of the user's jobs: a short prediction would be cheap)
    dear = cloud.sbatch("-c", "2", "-t", "60", "-A", "physics", "--wrap", "sleep 1")
    wait_until(lambda: cloud.job(dear).reason == "CloudBudget", 30, message="CloudBudget")
    explained = cloud.server.cli("explain", str(dear))
    assert "account physics's cloud_budget is 1.00 USD/day" in explained.stdout, explained
    assert created_nodes(cloud) == []
    waiting = json.loads(cloud.server.cli("cloud", "costs", "--json").stdout)["budgets"]
    assert [(b["holder"], b["waiting"]) for b in waiting] == [("account physics", 1)]
    cloud.server.cli("scancel", str(dear))  # (else it would start on the node made next)

    # within it: 2.0 an hour for 10 minutes is 0.33 of 1
    cheap = cloud.sbatch("-c", "2", "-t", "10", "-A", "physics", "--wrap", "sleep 2")
    job = cloud.wait_done(cheap, 90)
    assert job.state == "COMPLETED"
    ((node, group, _),) = created_nodes(cloud)
    assert group == "burst" and job.nodes == [node]
    assert job.cost is not None and job.start_time is not None and job.end_time is not None
    assert abs(job.cost - 2.0 * (job.end_time - job.start_time) / 3600) < 1e-4
    done = cloud.server.cli("sacct", "-X", "-n", "-P", "-j", str(cheap), "-o", "JobID,Cost")
    assert done.stdout.strip() == f"{cheap}|{job.cost:.2f}", done.stderr

    costs = json.loads(cloud.server.cli("cloud", "costs", "--json").stdout)
    (row,) = costs["costs"]
    assert row["account"] == "physics" and abs(row["cost"] - job.cost) < 1e-4
    (budget,) = costs["budgets"]
    assert budget["holder"] == "account physics" and abs(budget["spent"] - job.cost) < 1e-4

    # a price that cannot be read: the last one stays, with the error
    price_file.write_text("cheap\n")

    def prices() -> dict[str, object]:
        found = json.loads(cloud.server.cli("cloud", "prices", "--json").stdout)
        return dict(found["prices"][0])

    wait_until(lambda: "not a price" in str(prices()["error"]), 30, message="the error")
    assert prices()["price_per_hour"] == 2.0 and "price file" in str(prices()["source"])


def test_a_budget_lowered_below_the_spend_stops_new_bursts_only(
    start_cloud: Callable[[str], Cloud], tmp_path: Path
) -> None:
    """``scontrol reconfigure`` refuses a budget without its currency (the key named, what
    to write said) and changes nothing; one that lowers the budget below what is spent
    leaves the running burst alone and makes no node for the next job."""
    price_file = tmp_path / "price"
    price_file.write_text("2.0\n")
    toml = budget_toml(price_file)
    cloud = start_cloud(toml.replace('"1 USD/day"', '"100 USD/day"'))
    first = cloud.sbatch("-c", "2", "-t", "10", "-A", "physics", "--wrap", "sleep 120")
    wait_until(lambda: cloud.job(first).state == "RUNNING", 60, message="the first burst")

    cloud.toml.write_text(toml.replace('"1 USD/day"', '"100"'))
    refused = cloud.server.cli("scontrol", "reconfigure")
    assert refused.returncode != 0
    assert "accounts[0].cloud_budget" in refused.stderr
    assert '"100 USD/month"' in refused.stderr, refused.stderr

    wait_until(lambda: (cloud.job(first).cost or 0) > 0.0001, 30, message="some spend")
    cloud.toml.write_text(toml.replace('"1 USD/day"', '"0.0001 USD/day"'))
    done = cloud.server.cli("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr
    second = cloud.sbatch("-c", "2", "-t", "10", "-A", "physics", "--wrap", "sleep 1")
    wait_until(lambda: cloud.job(second).reason == "CloudBudget", 30, message="CloudBudget")
    assert cloud.job(first).state == "RUNNING"
    assert [n for n, _, _ in created_nodes(cloud)] == ["burst1"]
    cloud.server.cli("scancel", str(first), str(second))


def test_the_group_is_chosen_at_its_published_price(
    start_cloud: Callable[[str], Cloud], tmp_path: Path
) -> None:
    """Configured, "cheap" is the cheaper group; its provider now publishes a price above
    "dear"'s, so the job's node comes from "dear", and ``hal cloud`` shows both prices
    as the autoscaler uses them."""
    price_file = tmp_path / "price"
    price_file.write_text("5.0\n")
    cheap = group_toml("cheap", "cheap1", cpus=2, price=1.0)
    cheap += f'[cloud.groups.local]\nprice_file = "{price_file}"\n'
    dear = group_toml("dear", "dear1", cpus=2, price=2.0)
    cloud = start_cloud(config_toml(cheap, dear))
    job = cloud.sbatch("-c", "2", "-t", "5", "--wrap", "sleep 1")
    wait_until(lambda: bool(created_nodes(cloud)), 30, message="a node made")
    assert created_nodes(cloud)[0][:2] == ("dear1", "dear")
    status = json.loads(cloud.server.cli("cloud", "--json").stdout)
    assert {g["name"]: g["price_per_hour"] for g in status["groups"]} == {
        "cheap": 5.0,
        "dear": 2.0,
    }
    assert cloud.wait_done(job, 60).cost is not None
