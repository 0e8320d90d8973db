"""``hal topology show``: the server's switch tree (``GET /v1/topology``) as indented
text, with free/total nodes per switch::

    spine0                       free   20/32
      leaf0                      free    4/16    n[000-015]
      leaf1                      free   16/16    n[016-031]

and its blocks (topology/block), one line each with free/total nodes, then the
configured ``BlockSizes``; then the label tree (site > region > zone > rack), the
multi-node NVLink domains and each node's GPU islands::

    labels (place jobs): rack, zone
    zone z1                      free    3/4
      rack r1                    free    1/2    n[1-2]
    nvlink domain nvl0           free    2/2    g[1-2]
    gpu islands: g1 0-3,4-7
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hal.wire.nodes import TopologyInfo

NAME_WIDTH = 28


def add_commands(sub: Any) -> None:
    topo = sub.add_parser(
        "topology", help="the network topology (switch tree, blocks) of the cluster"
    )
    tsub = topo.add_subparsers(metavar="ACTION")
    p = tsub.add_parser(
        "show", help="draw the switch tree and blocks with free/total nodes of each"
    )
    p.add_argument("--json", action="store_true", help="print the REST object unchanged")
    p.set_defaults(func=cmd_show)


def cmd_show(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as hal:
        info = hal.topology()
    if ns.json:
        print(info.model_dump_json(indent=2))
        return 0
    print(draw(info), end="")
    return 0


def draw(info: TopologyInfo) -> str:
    """The tree, roots first, children indented two spaces under their switch."""
    from hal.slurm.syntax import compress_hostlist

    if not info.configured:
        return (
            "no topology configured (add a [topology] table to hal.toml, or start agents "
            "with --topology-label / --nvlink-domain)\n"
        )
    by_name = {s.name: s for s in info.switches}
    lines: list[str] = []

    def visit(name: str, depth: int) -> None:
        s = by_name[name]
        label = ("  " * depth + s.name).ljust(NAME_WIDTH)
        members = f"  {compress_hostlist(s.nodes)}" if s.nodes else ""
        lines.append(f"{label} free {s.nodes_free:>4}/{s.nodes_total:<4}{members}".rstrip())
        for child in s.switches:
            visit(child, depth + 1)

    for root in info.roots:
        visit(root, 0)
    if info.level_names:
        lines.append("levels (leaf first): " + ", ".join(info.level_names))
    for b in info.blocks:
        lines.append(
            f"block {b.name}: free {b.nodes_free}/{len(b.nodes)}  {compress_hostlist(b.nodes)}"
        )
    if info.block_sizes:
        lines.append("block sizes: " + ",".join(str(n) for n in info.block_sizes))
    if info.unplaced:
        lines.append("nodes outside the tree: " + compress_hostlist(info.unplaced))
    if info.unregistered:
        lines.append("in the tree, never registered: " + compress_hostlist(info.unregistered))
    lines += draw_node_topology(info)
    return "\n".join(lines) + "\n"


def draw_node_topology(info: TopologyInfo) -> list[str]:
    """The label tree, NVLink domains and GPU islands, one line each."""
    from hal.core.gpu_islands import islands_text
    from hal.slurm.syntax import compress_hostlist

    lines: list[str] = []
    if info.label_levels:
        role = "place jobs" if info.labels_place else "shown only: the switch tree places"
        lines.append(f"labels ({role}): " + ", ".join(info.label_levels))
    for d in info.label_domains:
        label = ("  " * d.depth + f"{d.level} {d.name}").ljust(NAME_WIDTH)
        members = f"  {compress_hostlist(d.nodes)}" if d.nodes else ""
        lines.append(f"{label} free {d.nodes_free:>4}/{d.nodes_total:<4}{members}".rstrip())
    for v in info.nvlink_domains:
        label = f"nvlink domain {v.name}".ljust(NAME_WIDTH)
        lines.append(
            f"{label} free {v.nodes_free:>4}/{len(v.nodes):<4}  {compress_hostlist(v.nodes)}"
        )
    for node, islands in info.gpu_islands.items():
        lines.append(f"gpu islands: {node} {islands_text(islands)}")
    return lines
