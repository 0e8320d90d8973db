"""``hal cloud``: the node groups of ``[cloud]`` and the nodes the autoscaler made;
``hal cloud prices``: each group's price and where it came from; ``hal cloud costs``:
what cloud capacity cost per account and user, and each budget."""

from __future__ import annotations

import argparse
import time
from typing import Any

from hal.cli.output import emit
from hal.core.cloud_costs import money
from hal.wire.cloud import CloudCosts, CloudGroupInfo, CloudPrices, CloudStatus


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "cloud", help="node groups made on demand ([cloud]): their nodes, costs and errors"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cloud)
    more = p.add_subparsers(dest="cloud_command", metavar="{prices,costs}")
    prices = more.add_parser("prices", help="each group's price an hour, its source and age")
    prices.add_argument("--json", action="store_true")
    prices.set_defaults(func=cmd_prices)
    costs = more.add_parser(
        "costs", help="what cloud nodes cost per account and user, and each cloud_budget"
    )
    costs.add_argument(
        "--since",
        "-S",
        help="from this time on (as sacct's --starttime: 2026-11-01, now-7days; "
        "default: the start of this month, UTC)",
    )
    costs.add_argument("--json", action="store_true")
    costs.set_defaults(func=cmd_costs)


def cmd_cloud(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        status = client.cloud_status()
    return emit(status, ns.json, lambda s: render(s, time.time()))


def cmd_prices(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        prices = client.cloud_prices()
    return emit(prices, ns.json, render_prices)


def cmd_costs(ns: argparse.Namespace) -> int:
    from hal.client import HalClient
    from hal.slurm.syntax import parse_begin

    since = parse_begin(ns.since, time.time(), field="since", past=True) if ns.since else None
    with HalClient() as client:
        costs = client.cloud_costs(since)
    return emit(costs, ns.json, render_costs)


def render_prices(prices: CloudPrices) -> str:
    if not prices.prices:
        return "no node groups: hal.toml has no [cloud] groups (docs/admin/cloud.md)\n"
    lines = [f"{'GROUP':<12} {'PRICE/H':>9} CUR {'AGE':>8}  SOURCE"]
    for p in prices.prices:
        lines.append(
            f"{p.group:<12} {p.price_per_hour:>9.4f} {p.currency:<3} "
            f"{_age(p.age_seconds):>8}  {p.source}"
        )
    for p in prices.prices:
        if p.error:
            lines.append(f"{p.group}: {p.error} (the price above is the last one read)")
    return "\n".join(lines) + "\n"


def render_costs(costs: CloudCosts) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(costs.since))
    lines = [f"cloud costs since {since} ({costs.currency})"]
    lines.append(f"{'ACCOUNT':<16} {'USER':<12} {'COST':>10} {'RUNS':>6} {'RUNNING':>8}")
    for c in costs.costs:
        lines.append(f"{c.account:<16} {c.user:<12} {money(c.cost):>10} {c.runs:>6} {c.running:>8}")
    lines.append(f"{'total':<29} {money(costs.total):>10}")
    if costs.budgets:
        lines.append("")
        lines.append(
            f"{'BUDGET':<22} {'LIMIT':>10} {'PERIOD':<6} {'SPENT':>10} {'COMMITTED':>10} WAITING"
        )
        for b in costs.budgets:
            lines.append(
                f"{b.holder:<22} {money(b.limit):>10} {b.period:<6} {money(b.spent):>10} "
                f"{money(b.committed):>10} {b.waiting:>7}"
            )
    return "\n".join(lines) + "\n"


def render(status: CloudStatus, now: float) -> str:
    if not status.groups:
        return "no node groups: hal.toml has no [cloud] groups (docs/admin/cloud.md)\n"
    lines = ["GROUP        PROVIDER    NODES  CPUS   MEMORY GPUS  $/HOUR"]
    for g in status.groups:
        lines.append(
            f"{g.name:<12} {g.provider:<9} {f'{len(g.instances)}/{len(g.nodes)}':>7} "
            f"{g.cpus:>5} {_mib(g.memory_bytes):>8} {g.gpus:>4} {g.price_per_hour:>7.3f}"
        )
    for g in status.groups:
        lines.extend(_nodes(g, now))
    return "\n".join(lines) + "\n"


def _nodes(g: CloudGroupInfo, now: float) -> list[str]:
    lines = []
    if g.instances:
        lines.append(f"\n{g.name}: {'NODE':<14} {'STATE':<9} {'AGE':>8} {'IDLE':>8}  INSTANCE")
        for i in sorted(g.instances, key=lambda i: i.node):
            idle = _age(now - i.idle_since) if i.idle_since is not None else "-"
            lines.append(
                f"{'':<{len(g.name) + 2}}{i.node:<14} {i.state:<9} "
                f"{_age(now - i.created_at):>8} {idle:>8}  {i.instance}"
            )
    facts = f"made {g.created}, removed {g.removed}, failed to join {g.boot_failures}"
    lines.append(f"\n{g.name}: {facts} (since the server started)")
    if g.retiring:
        lines.append(f"{g.name}: taken out of [cloud]; its nodes go as their jobs end")
    if not g.healthy:
        since = _age(now - g.unhealthy_since) if g.unhealthy_since is not None else "?"
        lines.append(f"{g.name}: UNHEALTHY for {since}: its provider fails or does not answer")
    if g.resting_until is not None:
        lines.append(f"{g.name}: resting for {_age(g.resting_until - now)}")
    if g.last_error:
        lines.append(f"{g.name}: last error: {g.last_error}")
    return lines


def _mib(n: int) -> str:
    return f"{n // (1 << 30)}G" if n % (1 << 30) == 0 else f"{n >> 20}M"


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
