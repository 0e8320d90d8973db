"""``hal topology show``: the server's switch tree (``GET /v1/topology``) as indented
text, with free/total nodes per switch::

    spine0                       free   20/32
      leaf0                      free    4/16    n[000-015]
      leaf1                      free   16/16    n[016-031]

and its blocks (topology/block), one line each with free/total nodes, then the
configured ``BlockSizes``.
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
    from hal.core.slurm_syntax import compress_hostlist

    if not info.configured:
        return "no topology configured (add a [topology] table to hal.toml)\n"
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
    return "\n".join(lines) + "\n"
