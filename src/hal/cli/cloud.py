"""``hal cloud``: the node groups of ``[cloud]`` and the nodes the autoscaler made."""

from __future__ import annotations

import argparse
import time
from typing import Any

from hal.wire.cloud import CloudGroupInfo, CloudStatus


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "cloud", help="node groups made on demand ([cloud]): their nodes, costs and errors"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cloud)


def cmd_cloud(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        status = client.cloud_status()
    if ns.json:
        print(status.model_dump_json(indent=2))
        return 0
    print(render(status, time.time()), end="")
    return 0


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
