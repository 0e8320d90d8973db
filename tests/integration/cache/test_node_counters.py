"""A node's read counters in ``INFO stats`` and in its heartbeats: hits, misses (pulled or
nil), bytes served, bytes pulled by source (parent chain, peer), on a real tree with peer
sourcing on::

    root ─┬─ b1 ─┬─ l1
          │      └─ l2
          └─ b2 ─── l3
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cachetree import Tree, wait_for

SIZE = 50_000


@pytest.fixture(scope="module")
def peer_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    t = Tree(tmp_path_factory.mktemp("counters"), "--peer-sourcing",
             node_args=("--peer-sourcing",))  # fmt: skip
    try:
        t.start()
        yield t
    finally:
        t.stop()


def stats(tree: Tree, iid: str) -> dict[str, Any]:
    return dict(tree[iid].client().info("stats"))


def grew(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    return {k: int(after[k]) - int(before[k]) for k in after if k.startswith(("hal_", "keyspace_"))}


def test_a_miss_pulled_through_the_parent_chain_is_counted_at_every_level(
    peer_tree: Tree,
) -> None:
    assert peer_tree["root"].client().set("ds:deep", b"r" * SIZE)
    wait_for(lambda: peer_tree.cp.holders("ds:deep") == ["root"], 10, "the root's copy")
    before = {i: stats(peer_tree, i) for i in ("l3", "b2", "root")}
    assert peer_tree["l3"].client().get("ds:deep") == b"r" * SIZE
    assert peer_tree["l3"].client().get("ds:deep") == b"r" * SIZE
    l3 = grew(before["l3"], stats(peer_tree, "l3"))
    assert l3["keyspace_hits"] == 1 and l3["keyspace_misses"] == 1
    assert l3["hal_pulls_parent"] == 1 and l3["hal_bytes_pulled_parent"] == SIZE
    assert l3["hal_pulls_peer"] == 0 and l3["hal_bytes_served"] == 2 * SIZE
    b2 = grew(before["b2"], stats(peer_tree, "b2"))
    # the branch served its leaf's miss by missing itself and pulling from the root
    assert b2["keyspace_misses"] == 1 and b2["hal_bytes_pulled_parent"] == SIZE
    assert b2["hal_bytes_served"] == SIZE
    root = grew(before["root"], stats(peer_tree, "root"))
    assert root["keyspace_hits"] == 1 and root["hal_bytes_served"] == SIZE


def test_a_copy_at_a_sibling_is_pulled_from_the_peer(peer_tree: Tree) -> None:
    assert peer_tree["l1"].client().set("ds:sibling", b"s" * SIZE)
    wait_for(lambda: peer_tree.cp.holders("ds:sibling") == ["l1"], 10, "l1's copy")
    before_l2, before_l1 = stats(peer_tree, "l2"), stats(peer_tree, "l1")
    assert peer_tree["l2"].client().get("ds:sibling") == b"s" * SIZE
    l2 = grew(before_l2, stats(peer_tree, "l2"))
    assert l2["keyspace_misses"] == 1 and l2["hal_pulls_peer"] == 1
    assert l2["hal_bytes_pulled_peer"] == SIZE and l2["hal_bytes_pulled_parent"] == 0
    l1 = grew(before_l1, stats(peer_tree, "l1"))
    assert l1["keyspace_hits"] == 1 and l1["hal_bytes_served"] == SIZE


def test_a_miss_nowhere_is_counted_as_not_found(peer_tree: Tree) -> None:
    before = stats(peer_tree, "l1")
    assert peer_tree["l1"].client().get("ds:nowhere") is None
    l1 = grew(before, stats(peer_tree, "l1"))
    assert l1["keyspace_misses"] == 1 and l1["hal_misses_not_found"] == 1
    assert l1["hal_pulls"] == 0 and l1["hal_bytes_served"] == 0


def test_heartbeats_carry_the_counters_to_the_control_plane(peer_tree: Tree) -> None:
    """What ``INFO`` shows reaches ``GET /v1/instances`` with the next heartbeat (2 s)."""
    assert peer_tree["l1"].client().set("ds:beat", b"b" * SIZE)
    wait_for(lambda: peer_tree.cp.holders("ds:beat") == ["l1"], 10, "l1's copy")
    assert peer_tree["l2"].client().get("ds:beat") == b"b" * SIZE  # from the peer
    assert peer_tree["l2"].client().get("ds:beat") == b"b" * SIZE  # a hit
    info = stats(peer_tree, "l2")
    expected = {
        "hits": info["keyspace_hits"],
        "misses": info["keyspace_misses"],
        "missesNotFound": info["hal_misses_not_found"],
        "bytesServed": info["hal_bytes_served"],
        "pulls": {"parent": info["hal_pulls_parent"], "peer": info["hal_pulls_peer"]},
        "bytesPulled": {
            "parent": info["hal_bytes_pulled_parent"],
            "peer": info["hal_bytes_pulled_peer"],
        },
        "evictions": info["evicted_keys"],
        "expirations": info["expired_keys"],
    }
    assert expected["hits"] >= 1 and expected["bytesPulled"]["peer"] >= SIZE

    def reported() -> dict[str, Any] | None:
        listed = peer_tree.cp.http.get("/instances").json()["instances"]
        return next((i.get("halStats") for i in listed if i["id"] == "l2"), None)

    wait_for(lambda: reported() == expected, 10, "l2's heartbeat with its counters")
