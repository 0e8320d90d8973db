"""Artifacts through the cache tree (docs/user/artifacts.md): a real cache control plane,
real ``hal cache node`` processes and a live HAL server with ``[data]``; the nodes'
fetches are the agent's own code (``ArtifactCache`` over ``HttpAgentChannel``).

    root ── b1 ─┬─ l1 (node n1)
                ├─ l2 (node n2)
                └─ l3 (node n3)            node n4: no leaf

* Three nodes at once: the server reads the content once (into the root), the root sends
  it once (to the branch), no node fetches from the server, and all hold the same bytes.
* A leaf whose copy of a piece was replaced by other bytes: the piece is refused by its
  sha256, read again through the tree, and the node's copy is right.
* A node that reads through no cache fetches from the server, and so does one whose
  tree gives wrong bytes again after the first refusal.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cachetree import ControlPlane, Node, registered, start_nodes, wait_for
from prometheus_client.parser import text_string_to_metric_families

from hal.agent.artifacts import ArtifactCache
from hal.agent.channel import HttpAgentChannel
from hal.config.model import DataConfig
from hal.server.artifact_tree import TREE_PIECE, piece_key
from hal.testing import http
from hal.testing.live import LiveServer
from hal.wire.agent import ArtifactPin

SIZE = 2 * TREE_PIECE + 123  # three pieces in the tree
LEAVES = {"n1": "l1", "n2": "l2", "n3": "l3"}
# a 16 MiB piece's pull waits at each level for a locate and an acknowledgement from the
# control plane: on a loaded test machine that outlasts cachetree's 2 s (docs/admin/cache.md)
PULL = ("--pull-timeout", "20")


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[ControlPlane, dict[str, Node]]]:
    cp = ControlPlane(tmp_path)
    nodes = {"root": Node(tmp_path, cp, "root", None, "root")}
    nodes["b1"] = Node(tmp_path, cp, "b1", "root", "branch", *PULL)
    for leaf in LEAVES.values():
        nodes[leaf] = Node(tmp_path, cp, leaf, "b1", "leaf", *PULL)
    try:
        cp.start()
        start_nodes(cp, list(nodes.values()))
        wait_for(lambda: registered(cp, list(nodes)), 30, "the nodes to register")
        yield cp, nodes
    finally:
        for node in nodes.values():
            node.kill()
        cp.kill()


def _served(live: LiveServer) -> dict[str, float]:
    """``hal_artifact_served_bytes_total`` by ``to``."""
    text = http.get(f"{live.url}/metrics", timeout=10).text
    return {
        s.labels["to"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hal_artifact_served_bytes_total"
    }


def _fetch(live: LiveServer, places: dict[str, Path], pin: ArtifactPin) -> dict[str, ArtifactCache]:
    """Each node's copy of ``pin``, all at once, as their agents fetch it."""

    async def run() -> dict[str, ArtifactCache]:
        channels = {n: HttpAgentChannel(live.url, live.agent_token) for n in places}
        caches = {
            n: ArtifactCache(folder, channels[n], 1 << 30, lambda: [1], node=n)
            for n, folder in places.items()
        }
        try:
            await asyncio.gather(*(c.copy(1, pin) for c in caches.values()))
        finally:
            for channel in channels.values():
                await channel.aclose()
        return caches

    return asyncio.run(run())


def test_nodes_get_an_artifact_through_the_tree_once(
    tmp_path: Path, tree: tuple[ControlPlane, dict[str, Node]]
) -> None:
    cp, nodes = tree
    data = os.urandom(SIZE)
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / "tool.bin").write_bytes(data)
    config = {"data": DataConfig(cache_url=cp.url, node_cache=LEAVES, refresh_seconds=0.3)}
    with LiveServer(tmp_path / "hal", config_overrides=config) as live, live.client() as hal:
        hal.push_artifact("tool", "1", tmp_path / "tool.bin", kind="program")
        pin = ArtifactPin(name="tool", version="1", sha256=digest, kind="program")
        auth = {"Authorization": f"Bearer {live.agent_token}"}

        def routed(node: str) -> bool:
            path = f"{live.url}/v1/agent/artifacts/{digest}/route"
            got = http.get(path, params={"node": node}, headers=auth, timeout=30).json()
            return bool(got["cache"])

        for node_name in LEAVES:  # the server has read the tree
            wait_for(lambda n=node_name: routed(n), 30, f"a route through {node_name}'s leaf")
        for node in nodes.values():
            node.client().config_resetstat()

        caches = _fetch(live, {n: tmp_path / "nodes" / n for n in LEAVES}, pin)

        for name, cache in caches.items():
            copy = cache.root / f"{digest}.program" / "file"
            assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest, name
            assert (cache.tree.fetches, cache.tree.fallbacks, cache.tree.refused) == (1, 0, 0)
        served = _served(live)
        assert served.get("cache") == SIZE  # read from the store once, into the root
        assert served.get("agent", 0) == 0  # no node fetched from the server
        root = nodes["root"].client().info("stats")
        assert root["hal_bytes_served"] == SIZE  # the root sent each byte once
        branch = nodes["b1"].client().info("stats")
        assert branch["hal_bytes_pulled_parent"] == SIZE
        assert branch["hal_bytes_served"] == len(LEAVES) * SIZE

        # a leaf's copy of a piece replaced by other bytes of the same size
        assert nodes["l1"].client().set(piece_key(digest, 1), os.urandom(TREE_PIECE))
        again = _fetch(live, {"n1": tmp_path / "nodes" / "n1-again"}, pin)["n1"]
        assert again.tree.refused == 1 and again.tree.fallbacks == 0
        copy = again.root / f"{digest}.program" / "file"
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
        assert _served(live).get("agent", 0) == 0

        # a node that reads through no cache instance fetches from the server
        direct = _fetch(live, {"n4": tmp_path / "nodes" / "n4"}, pin)["n4"]
        assert direct.tree.fetches == 0 and direct.fetched_bytes == SIZE
        assert _served(live).get("agent") == SIZE

        # the root's own copy damaged (and nothing better below it): refused twice, the
        # node fetches the content from the server instead
        key = piece_key(digest, 2)
        assert nodes["root"].client().set(key, b"not the piece")
        for below in ("b1", "l2"):
            nodes[below].client().delete(key)
        last = _fetch(live, {"n2": tmp_path / "nodes" / "n2-again"}, pin)["n2"]
        assert last.tree.refused == 2 and last.tree.fallbacks == 1
        copy = last.root / f"{digest}.program" / "file"
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
        assert _served(live).get("agent") == 2 * SIZE
