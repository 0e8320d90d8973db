"""What the nvlink plugin's per-node island bitmasks cost a scheduling pass: building them
for a table of N GPU nodes with two NVLink islands each, and finding them again in the
next pass's new table of the same nodes (the server builds a table every pass).

    PYTHONPATH=src python bench/island_masks.py [N]
"""

from __future__ import annotations

import json
import sys
import time

from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.plugins.noderesources.islands import NvlinkIslands


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    islands = ((0, 1, 2, 3), (4, 5, 6, 7))
    big = ResourceVector(cpus=64, memory_bytes=256 * GiB, gpus=8)
    nodes = [Node(f"n{i:05d}", big, gpu_islands=islands) for i in range(n)]
    plugin = NvlinkIslands()
    began = time.perf_counter()
    first = plugin.masks_for(NodeTable(nodes, ()))
    built = time.perf_counter() - began
    table = NodeTable(nodes, ())  # the next pass's table
    began = time.perf_counter()
    again = plugin.masks_for(table)
    found = time.perf_counter() - began
    assert again is first
    print(
        json.dumps(
            {"nodes": n, "build_ms": round(built * 1e3, 2), "next_pass_ms": round(found * 1e3, 3)}
        )
    )


if __name__ == "__main__":
    main()
