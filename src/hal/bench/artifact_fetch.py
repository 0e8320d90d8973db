"""One node's fetch of an artifact for ``hal bench artifacts``: the agent's own code
(``ArtifactCache`` over ``HttpAgentChannel``) in a process of its own, as on a node.

    python -m hal.bench.artifact_fetch SERVER NODE SHA256 KIND FOLDER [--direct]

The agent token comes from ``HAL_TOKEN``. The process imports everything, prints
``ready``, waits for a line on its standard input (so that every node starts at once,
none paying its Python start-up), fetches, and prints one JSON line: the seconds the
fetch took and what went through the tree. ``--direct``: from the server, as a node
without a leaf cache does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from hal.agent.artifacts import ArtifactCache
from hal.agent.channel import HttpAgentChannel
from hal.wire.agent import ArtifactPin


async def fetch(server: str, node: str, pin: ArtifactPin, folder: Path) -> dict[str, object]:
    channel = HttpAgentChannel(server, os.environ.get("HAL_TOKEN"))
    cache = ArtifactCache(folder, channel, 1 << 40, lambda: [1], node=node)
    try:
        started, cpu = time.monotonic(), time.process_time()
        await cache.copy(1, pin)
        took, cpu = time.monotonic() - started, time.process_time() - cpu
    finally:
        await channel.aclose()
    tree = cache.tree
    return {
        "node": node,
        "s": round(took, 3),
        "cpu_s": round(cpu, 3),  # this process's, its hashing threads' included
        "bytes": cache.fetched_bytes,
        "through_tree": tree.fetches,
        "fallbacks": tree.fallbacks,
        "refused": tree.refused,
    }


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m hal.bench.artifact_fetch")
    for name in ("server", "node", "sha256", "kind", "folder"):
        p.add_argument(name)
    p.add_argument("--direct", action="store_true", help="from the server, not the tree")
    ns = p.parse_args()
    pin = ArtifactPin(name="bench", version="1", sha256=ns.sha256, kind=ns.kind)
    print("ready", flush=True)
    sys.stdin.readline()
    node = "" if ns.direct else ns.node  # no node name: no route asked, as with no tree
    result = asyncio.run(fetch(ns.server, node, pin, Path(ns.folder)))
    print(json.dumps({**result, "node": ns.node}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
