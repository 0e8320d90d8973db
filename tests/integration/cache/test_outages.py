"""Failures around a small tree (root ─ b1 ─ l1): control plane outage and restart, node
restart, a dead parent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cachetree import ControlPlane, Node, registered, start_all, wait_for


class Small:
    def __init__(self, tmp: Path, db_url: str | None = None) -> None:
        self.tmp = tmp
        self.cp = ControlPlane(tmp, db_url)
        self.root = Node(tmp, self.cp, "root", None, "root")
        self.b1 = Node(tmp, self.cp, "b1", "root", "branch")
        self.l1 = Node(tmp, self.cp, "l1", "b1", "leaf")
        self.nodes = [self.root, self.b1, self.l1]

    def start(self) -> None:
        self.cp.start()
        start_all(list(self.nodes))
        wait_for(lambda: registered(self.cp, ["root", "b1", "l1"]), 15, "registration")
        for node in self.nodes:
            wait_for(
                lambda node=node: node.client().info("server")["hal_chain_complete"] == 1,
                15,
                f"{node.iid} to know its chain",
            )

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        self.cp.kill()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Small]:
    tree = Small(tmp_path)
    try:
        tree.start()
        yield tree
    finally:
        tree.stop()


def _key_count(cp: ControlPlane, iid: str) -> int:
    total: int = cp.http.get(f"/content/instances/{iid}/keys", params={"limit": 0}).json()["total"]
    return total


def _wipe_database(cp: ControlPlane) -> None:
    db = Path(cp.db_url.removeprefix("sqlite:///"))
    for path in db.parent.glob(db.name + "*"):
        path.unlink()


def test_nodes_keep_serving_through_a_control_plane_outage_and_replay_in_order(
    small: Small,
) -> None:
    """The control plane dies: writes are acknowledged quickly, misses pull up the saved
    chain, and once it is back every buffered event arrives, in order."""
    small.root.client().set("before", b"0")
    small.cp.kill()
    root = small.root.client()
    started = time.monotonic()
    for i in range(5):
        root.set(f"during:{i}", str(i))
    root.delete("during:0")
    root.set("during:1", b"overwritten")
    assert time.monotonic() - started < 3.0  # at most one bounded wait, then no waiting
    assert small.l1.client().get("during:2") == b"2"  # pulled through b1 without locate
    assert small.l1.client().info("stats")["hal_control_plane_down"] == 1
    small.cp.start()
    wait_for(
        lambda: set(small.cp.holders("during:2")) == {"root", "b1", "l1"},
        15,
        "buffered events to be replayed",
    )
    assert small.cp.holders("during:0") == []
    sizes = small.cp.http.get("/content/locate/during%3A1").json()["instances"]
    assert sizes == [{"instanceId": "root", "size": len(b"overwritten")}]
    assert small.cp.holders("before") == ["root"]


def test_a_control_plane_that_lost_its_database_is_repopulated_by_the_nodes(small: Small) -> None:
    """Restart on an empty database: heartbeats get 404, nodes register again and send full
    inventories, so locate knows what they hold."""
    small.root.client().set("survivor", b"s")
    assert small.l1.client().get("survivor") == b"s"
    small.cp.kill()
    _wipe_database(small.cp)
    small.cp.start()
    wait_for(lambda: registered(small.cp, ["root", "b1", "l1"]), 15, "nodes to register again")
    wait_for(
        lambda: set(small.cp.holders("survivor")) == {"root", "b1", "l1"},
        15,
        "inventories to arrive",
    )
    topo = small.cp.http.get("/topology").json()
    assert {(e["from"], e["to"]) for e in topo["edges"]} == {("root", "b1"), ("b1", "l1")}


def test_a_restarted_node_sends_its_empty_inventory_so_stale_entries_disappear(
    small: Small,
) -> None:
    small.root.client().set("k1", b"v")
    assert small.l1.client().get("k1") == b"v"
    assert "l1" in small.cp.holders("k1")
    small.l1.kill()  # no goodbye: the control plane still lists l1's copy
    assert "l1" in small.cp.holders("k1")
    small.l1.start()
    wait_for(lambda: "l1" not in small.cp.holders("k1"), 15, "the restarted node's inventory")
    assert small.l1.client().get("k1") == b"v"
    wait_for(lambda: "l1" in small.cp.holders("k1"), 5, "the new copy to be reported")


def test_a_deregistered_node_registers_again_and_its_writes_still_arrive(small: Small) -> None:
    """An operator deregisters a live node. The control plane refuses its later events
    (applied, they would bring back copies of an instance it forgot), so the node
    registers again and resends them before acknowledging the write, then sends its
    inventory for what it held before."""
    root = small.root.client()
    root.set("before", b"1")
    wait_for(lambda: small.cp.holders("before") == ["root"], 5, "the first write")
    assert small.cp.http.delete("/instances/root/deregister").status_code == 204
    assert small.cp.holders("before") == []
    root.set("after", b"2")
    assert small.cp.holders("after") == ["root"]
    wait_for(lambda: small.cp.holders("before") == ["root"], 10, "the node's inventory")


def test_a_big_inventory_goes_in_parts_and_still_removes_what_the_node_lost(
    tmp_path: Path,
) -> None:
    """A node whose key list does not fit one request sends its full inventory in parts
    (here 10 keys each, ``--inventory-part-keys``): after a control plane lost its
    database every key comes back, and a copy the node does not hold still goes."""
    cp = ControlPlane(tmp_path)
    node = Node(
        tmp_path, cp, "big", None, "root",
        "--inventory-part-keys", "10", "--reconcile-interval", "0.5", "--log-level", "INFO",
    )  # fmt: skip
    try:
        cp.start()
        start_all([node])
        wait_for(lambda: registered(cp, ["big"]), 15, "registration")
        pipe = node.client().pipeline(transaction=False)
        for i in range(35):
            pipe.set(f"k{i:02d}", b"v")
        pipe.execute()
        wait_for(lambda: _key_count(cp, "big") == 35, 10, "the writes")
        cp.kill()
        _wipe_database(cp)
        cp.start()
        wait_for(lambda: _key_count(cp, "big") == 35, 15, "the inventory after the restart")
        ghost = {"keys": [{"key": "ghost", "size": 1}]}  # the node does not hold it
        assert cp.http.post("/content/instances/big/keys", json=ghost).status_code == 200
        wait_for(lambda: cp.holders("ghost") == [], 10, "the next inventory to drop it")
        assert _key_count(cp, "big") == 35
        assert "sent the full inventory: 35 keys in 4 requests" in node.log.read_text()
    finally:
        node.kill()
        cp.kill()


@pytest.mark.slow
def test_a_node_whose_inventory_passes_the_64_mib_body_limit_still_syncs(
    tmp_path: Path,
) -> None:
    """70,000 keys of 1 KB names: their inventory is about 72 MB, past the control plane's
    64 MiB request limit, which refused it whole, so a control plane that lost its
    database never learnt what the node held. With the default parts it does."""
    cp = ControlPlane(tmp_path)
    node = Node(tmp_path, cp, "big", None, "root", "--ack-wait", "0")
    count = 70_000
    try:
        cp.start()
        start_all([node])
        wait_for(lambda: registered(cp, ["big"]), 15, "registration")
        client = node.client()
        for start in range(0, count, 5000):
            pipe = client.pipeline(transaction=False)
            for i in range(start, start + 5000):
                pipe.set(f"{'k' * 990}{i:08d}", b"v")
            pipe.execute()
        wait_for(lambda: _key_count(cp, "big") == count, 120, "the writes")
        cp.kill()
        _wipe_database(cp)
        cp.start()
        wait_for(lambda: _key_count(cp, "big") == count, 90, "the inventory after the restart")
    finally:
        node.kill()
        cp.kill()


def test_a_node_restarted_while_the_control_plane_is_down_uses_its_saved_chain(
    small: Small,
) -> None:
    small.root.client().set("cold", b"c")
    small.cp.kill()
    small.l1.kill()
    small.l1.start()
    assert small.l1.client().get("cold") == b"c"


def test_a_dead_parent_is_bypassed_quickly(small: Small) -> None:
    """b1 is gone without a goodbye: l1 reads from the root directly, in well under the pull
    timeout, and the next miss does not wait for b1 again."""
    small.root.client().set("x", b"1")
    small.root.client().set("y", b"2")
    small.b1.kill()
    leaf = small.l1.client()
    started = time.monotonic()
    assert leaf.get("x") == b"1"
    first = time.monotonic() - started
    started = time.monotonic()
    assert leaf.get("y") == b"2"
    second = time.monotonic() - started
    assert first < 1.5 and second < 0.5
    assert set(small.cp.holders("x")) == {"root", "l1"}


def test_a_hung_parent_times_out_instead_of_hanging(small: Small) -> None:
    """b1 is stopped (SIGSTOP): it accepts connections but never answers."""
    import signal

    small.root.client().set("z", b"3")
    assert small.b1.proc is not None
    small.b1.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        value = small.l1.client().get("z")
        took = time.monotonic() - started
        assert value in (b"3", None)
        assert took < 3.0
    finally:
        small.b1.proc.send_signal(signal.SIGCONT)


@pytest.mark.postgres
def test_control_plane_on_postgresql_keeps_its_map_across_restarts(
    tmp_path: Path, pg_url: str
) -> None:
    tree = Small(tmp_path, pg_url)
    try:
        tree.start()
        tree.root.client().set("pg-key", b"v")
        assert tree.l1.client().get("pg-key") == b"v"
        wait_for(lambda: len(tree.cp.holders("pg-key")) == 3, 5, "pulls reported")
        for node in tree.nodes:
            node.kill()
        tree.cp.kill()
        tree.cp.start()
        # no node is running: the answer can only come from the database
        assert tree.cp.holders("pg-key", "l1") == ["l1", "b1", "root"]
        near = tree.cp.http.get("/content/nearest/pg-key", params={"sourceInstanceId": "b1"})
        assert near.json()["instanceId"] == "b1"
    finally:
        tree.stop()
