"""A real tree of cache nodes: pull-through, fan-in, freshness, expiry, eviction, clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import socket
import time
from pathlib import Path

import pytest
import redis
from cachetree import ControlPlane, Node, Tree, start_all, wait_for

from hal.cache.controlclient import ControlPlaneClient


def test_leaf_miss_pulls_through_its_branch_which_keeps_a_copy(tree: Tree) -> None:
    """A dataset written at the root is read at a leaf: the branch fans in for its leaves."""
    tree["root"].client().set("dataset:a", b"payload-a")
    assert tree["l1"].client().get("dataset:a") == b"payload-a"
    # the branch between them now holds it too, and both reported where they got it from
    assert tree["b1"].client().exists("dataset:a") == 1
    assert tree["l1"].client().exists("dataset:a") == 1
    assert tree.cp.holders("dataset:a", "l1") == ["l1", "b1", "root"]
    events = tree.cp.http.get(
        "/content/nearest/dataset%3Aa", params={"sourceInstanceId": "l2"}
    ).json()
    assert events["instanceId"] == "b1"
    # the sibling leaf is served by the branch; the root is not asked again
    before = tree["root"].client().info("stats")["keyspace_hits"]
    assert tree["l2"].client().get("dataset:a") == b"payload-a"
    after = tree["root"].client().info("stats")["keyspace_hits"]
    assert after == before
    assert tree["b1"].client().info("stats")["hal_pulls"] >= 1


def test_concurrent_misses_at_sibling_leaves_fan_in_at_their_branch(tree: Tree) -> None:
    """16 readers on the two leaves under b1 miss the same key at once: b1 pulls it from the
    root and serves both leaves, so the root is read at most once per leaf (once, unless a
    leaf asked the control plane before b1's copy was reported and so wants it re-checked)."""
    tree["root"].client().set("fan-in", b"f" * 1000)
    before_root = tree["root"].client().info("stats")["keyspace_hits"]
    before_b1 = tree["b1"].client().info("stats")["hal_pulls"]

    def read(i: int) -> bytes | None:
        return tree["l1" if i % 2 else "l2"].client().get("fan-in")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(read, range(16)))
    assert results == [b"f" * 1000] * 16
    assert tree["root"].client().info("stats")["keyspace_hits"] - before_root <= 2
    assert 1 <= tree["b1"].client().info("stats")["hal_pulls"] - before_b1 <= 2
    wait_for(
        lambda: set(tree.cp.holders("fan-in")) == {"root", "b1", "l1", "l2"},
        5,
        "every copy on the way down to be reported",
    )


def test_miss_everywhere_is_nil_and_creates_no_holder(tree: Tree) -> None:
    assert tree["l3"].client().get("never-written") is None
    assert tree.cp.holders("never-written") == []
    assert tree["b2"].client().exists("never-written") == 0


def test_exists_and_ttl_never_pull(tree: Tree) -> None:
    """EXISTS and TTL look at the local copy only."""
    tree["root"].client().set("local-only", b"v")
    leaf = tree["l3"].client()
    assert leaf.exists("local-only") == 0
    assert leaf.ttl("local-only") == -2
    assert tree.cp.holders("local-only") == ["root"]


def test_refetch_after_an_origin_overwrite_returns_the_new_value(tree: Tree) -> None:
    """A leaf drops its copy after the root overwrote the key: the branch's copy is stale,
    so the leaf must get the new value, not the branch's."""
    root, leaf = tree["root"].client(), tree["l1"].client()
    root.set("model", b"v1")
    assert leaf.get("model") == b"v1"
    root.set("model", b"v2")
    assert tree.cp.holders("model", "l1") == ["root"]  # b1 and l1 hold stale copies
    leaf.delete("model")
    assert leaf.get("model") == b"v2"
    assert tree["b1"].client().get("model") == b"v2"
    assert tree.cp.holders("model", "l1") == ["l1", "b1", "root"]
    # a leaf that never had it gets the new value as well
    assert tree["l2"].client().get("model") == b"v2"


def _forget(tree: Tree, key: str, holders: list[str]) -> None:
    """Clear the key's holder list in the control plane, as its API allows anyone to."""
    stamp = dt.datetime.now(dt.UTC).isoformat()
    for iid in holders:
        event = {"eventType": "key_evicted", "timestamp": stamp, "key": key}
        resp = tree.cp.http.post("/events", json={"instanceId": iid, **event})
        assert resp.status_code == 202, resp.text
    assert not set(holders) & set(tree.cp.holders(key))


def test_a_node_serves_its_own_copy_when_the_map_does_not_list_it(tree: Tree) -> None:
    """The control plane's map lags (or lost the key's holders): the branch and the root
    still hold the value, so readers get it at once, not nil until the next full
    inventory, and the map catches up from the nodes that served it."""
    root = tree["root"].client()
    root.set("lagging", b"v")
    assert tree["l1"].client().get("lagging") == b"v"
    wait_for(lambda: set(tree.cp.holders("lagging")) == {"root", "b1", "l1"}, 5, "the pull")
    _forget(tree, "lagging", ["root", "b1", "l1"])
    assert tree.cp.holders("lagging") == []
    # l2 misses; b1 holds a pulled copy that nothing calls stale: it serves it
    assert tree["l2"].client().get("lagging") == b"v"
    # l3 misses; b2 does not have it; the root's own write is served through b2
    assert tree["l3"].client().get("lagging") == b"v"
    wait_for(
        lambda: {"root", "b1", "l2", "b2", "l3"} <= set(tree.cp.holders("lagging")),
        5,
        "the nodes that served their copies to report them again",
    )
    assert tree.cp.holders("lagging", "l2")[:3] == ["l2", "b1", "root"]


def test_a_copy_the_map_lost_is_not_passed_on_once_the_origin_rewrote_it(tree: Tree) -> None:
    """b1's copy left the map, then the root rewrote the key: nothing marked b1's copy
    stale, but the map lists a fresh holder, so b1 fetches rather than pass on its own."""
    root = tree["root"].client()
    root.set("lost-then-rewritten", b"v1")
    assert tree["l1"].client().get("lost-then-rewritten") == b"v1"
    wait_for(lambda: "b1" in tree.cp.holders("lost-then-rewritten"), 5, "b1's copy reported")
    _forget(tree, "lost-then-rewritten", ["b1", "l1"])
    root.set("lost-then-rewritten", b"v2")
    assert tree["l2"].client().get("lost-then-rewritten") == b"v2"
    assert tree["b1"].client().get("lost-then-rewritten") == b"v2"


def test_a_leaf_drops_a_copy_made_stale_and_reports_the_new_one(tree: Tree) -> None:
    """The root rewrites a key a leaf holds: the leaf's copy leaves ``locate`` and, with
    no read asking, the leaf stops serving it (its heartbeat answer names it); the next
    read fetches the new value, which the leaf reports."""
    root, leaf = tree["root"].client(), tree["l3"].client()
    root.set("rewritten", b"v1")
    assert leaf.get("rewritten") == b"v1"
    wait_for(lambda: "l3" in tree.cp.holders("rewritten"), 5, "the leaf's copy reported")
    root.set("rewritten", b"v2")
    assert tree.cp.holders("rewritten", "l3") == ["root"]
    wait_for(lambda: leaf.exists("rewritten") == 0, 5, "the leaf to drop its stale copy")
    assert leaf.get("rewritten") == b"v2"
    wait_for(
        lambda: tree.cp.holders("rewritten", "l3") == ["l3", "b2", "root"],
        5,
        "the new copies reported",
    )
    # an origin write at a leaf is never dropped, even after another origin write
    written = dt.datetime.now(dt.UTC)
    tree["l2"].client().set("rewritten", b"v3")
    wait_for(lambda: leaf.exists("rewritten") == 0, 5, "l3 to drop its copy, stale again")
    wait_for(
        lambda: (
            dt.datetime.fromisoformat(
                tree.cp.http.get("/instances/l2").json()["lastHeartbeat"].replace("Z", "+00:00")
            )
            > written + dt.timedelta(seconds=0.7)
        ),
        5,
        "l2 to heartbeat after its write",
    )
    assert tree["l2"].client().get("rewritten") == b"v3"


def test_ttl_follows_the_copy_down_and_expiry_is_reported(tree: Tree) -> None:
    root = tree["root"].client()
    root.set("short-lived", b"x", px=1500)
    assert tree["l3"].client().get("short-lived") == b"x"
    ttl = tree["l3"].client().pttl("short-lived")
    assert 0 < ttl <= 1500
    wait_for(lambda: tree.cp.holders("short-lived") == [], 10, "expired copies to be reported")
    assert tree["l3"].client().get("short-lived") is None


def test_a_key_that_is_not_utf8_is_found_where_nodes_ask_for_it(tree: Tree) -> None:
    """Redis keys are bytes: a node reports b"\\xff" as "\\udcff" (surrogateescape) and asks
    `locate` for it as %FF, so the control plane must decode the path to the same string;
    it used to read %FF as U+FFFD and never found such a key. Reporting such a key used to
    kill the node's event sender (httpx could not encode the body): no later write of that
    node reached the control plane."""
    key = b"bin:\xff\xfe"
    assert tree["l1"].client().set(key, b"x") is True
    assert tree["l1"].client().set("after-binary", b"x") is True
    assert tree.cp.holders("after-binary") == ["l1"]

    async def ask(wanted: bytes) -> list[str]:
        client = ControlPlaneClient(tree.cp.url, "l2")
        try:
            return [i["instanceId"] for i in await client.locate(wanted, 5.0)]
        finally:
            await client.close()

    assert asyncio.run(ask(key)) == ["l1"]
    assert asyncio.run(ask(b"bin:\xfe\xff")) == []  # another key, not a lossy look-alike


def test_delete_is_reported_before_the_reply(tree: Tree) -> None:
    root = tree["root"].client()
    root.set("gone-soon", b"x")
    assert tree.cp.holders("gone-soon") == ["root"]
    assert root.delete("gone-soon", "not-there") == 1
    assert tree.cp.holders("gone-soon") == []


def test_write_is_reported_before_the_client_gets_ok(tree: Tree) -> None:
    """A client that reads `locate` right after SET sees the key with its byte size."""
    assert tree["l2"].client().set("fresh-write", b"12345") is True
    body = tree.cp.http.get("/content/locate/fresh-write").json()
    assert body["instances"] == [{"instanceId": "l2", "size": 5}]


def test_allkeys_lru_evicts_under_memory_pressure_and_reports_it(tree: Tree) -> None:
    leaf = tree["l2"].client()
    leaf.config_set("maxmemory-policy", "allkeys-lru")
    leaf.config_set("maxmemory", str(leaf.info("memory")["used_memory"] + 5000))
    try:
        for i in range(20):
            leaf.set(f"bulk:{i}", b"x" * 1000)
        assert leaf.info("stats")["evicted_keys"] > 0
        assert leaf.exists("bulk:19") == 1 and leaf.exists("bulk:0") == 0
        wait_for(lambda: tree.cp.holders("bulk:0") == [], 5, "evictions to reach the map")
        assert tree.cp.holders("bulk:19") == ["l2"]
    finally:
        leaf.config_set("maxmemory", "0")
        leaf.config_set("maxmemory-policy", "noeviction")


def test_noeviction_refuses_writes_with_the_redis_oom_error(tree: Tree) -> None:
    leaf = tree["l3"].client()
    assert leaf.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    used = leaf.info("memory")["used_memory"]
    # lowering the limit below current use must succeed, as in Redis
    assert leaf.config_set("maxmemory", max(1, used // 2)) is True
    try:
        # redis-py recognises the "OOM" prefix and raises its OutOfMemoryError
        with pytest.raises(
            redis.exceptions.OutOfMemoryError,
            match=r"^command not allowed when used memory > .maxmemory.\.$",
        ):
            leaf.set("too-much", b"x" * 100)
        assert tree.cp.holders("too-much") == []
        limit = leaf.config_get("maxmemory")["maxmemory"]
        assert leaf.config_set("maxmemory", limit) is True  # what GET said, SET accepts
    finally:
        leaf.config_set("maxmemory", "0")


def test_resp3_clients_get_resp3_types(tree: Tree) -> None:
    """redis-py with protocol=3 sends HELLO 3 on connect; nil and maps must be RESP3."""
    client = tree["l1"].client(protocol=3)
    assert client.ping() is True
    assert client.get("resp3-missing") is None
    assert client.set("resp3", b"v", ex=100) is True
    assert client.get("resp3") == b"v"
    assert 0 < client.ttl("resp3") <= 100
    assert client.config_get("maxmemory*") == {
        b"maxmemory": b"0",
        b"maxmemory-policy": b"noeviction",
    } or client.config_get("maxmemory*") == {"maxmemory": "0", "maxmemory-policy": "noeviction"}
    assert client.expire("resp3", 50) is True
    assert client.execute_command("SELECT", 0) in (b"OK", "OK", True)


def test_redis_cli_speaks_to_a_node(tree: Tree) -> None:
    node = tree["b2"]
    assert node.cli("PING") == "PONG"
    assert node.cli("SET", "cli-key", "cli-value", "EX", "100") == "OK"
    assert node.cli("GET", "cli-key") == "cli-value"
    assert node.cli("EXISTS", "cli-key") == "1"
    assert int(node.cli("TTL", "cli-key")) > 0
    assert node.cli("SET", "cli-key", "other", "NX") == ""
    assert node.cli("DEL", "cli-key") == "1"
    assert node.cli("TTL", "cli-key") == "-2"
    assert "maxmemory_policy:noeviction" in node.cli("INFO", "memory")
    assert node.cli("SELECT", "1").startswith("ERR")
    assert node.cli("-3", "GET", "nothing-at-all") in ("", "(nil)")
    assert node.cli("NOSUCHCOMMAND").startswith("ERR unknown command")


def test_handshake_commands_hello_client_setinfo_and_quit(tree: Tree) -> None:
    """What clients send on connect and on close, on a raw socket: HELLO 3 answers a map
    and switches to RESP3 (nil is `_`), an unknown version is NOPROTO, CLIENT SETINFO is
    OK, and QUIT answers OK and closes the connection."""
    with socket.create_connection(("127.0.0.1", tree["l2"].port), timeout=10) as sock:
        reader = sock.makefile("rb")

        def send(*args: bytes) -> None:
            sock.sendall(
                b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
            )

        send(b"HELLO", b"4")
        assert reader.readline().startswith(b"-NOPROTO")
        send(b"CLIENT", b"SETINFO", b"lib-name", b"hal-test")
        assert reader.readline() == b"+OK\r\n"
        send(b"HELLO", b"3")
        assert reader.readline().startswith(b"%")  # a RESP3 map of server facts
        send(b"PING")
        while (line := reader.readline()) != b"+PONG\r\n":
            assert line, "connection closed before PONG"  # skip the rest of HELLO's map
        send(b"GET", b"handshake-missing")
        assert reader.readline() == b"_\r\n"
        send(b"QUIT")
        assert reader.readline() == b"+OK\r\n"
        assert reader.read() == b""  # closed by the node


def test_many_concurrent_clients_share_one_pull(tree: Tree) -> None:
    """64 clients miss the same key at a leaf at once: all get it, one pull goes up."""
    tree["root"].client().set("hot", b"h" * 100)
    pulls_before = tree["l3"].client().info("stats")["hal_pulls"]

    def read(_: int) -> bytes | None:
        return tree["l3"].client().get("hot")

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(read, range(64)))
    assert results == [b"h" * 100] * 64
    assert tree["l3"].client().info("stats")["hal_pulls"] - pulls_before == 1


def test_pipelined_replies_stay_in_order_across_misses(tree: Tree) -> None:
    tree["root"].client().set("pipe-a", b"A")
    pipe = tree["l1"].client().pipeline(transaction=False)
    pipe.get("pipe-a").set("pipe-b", b"B").get("pipe-b").get("pipe-none").ping()
    assert pipe.execute() == [b"A", True, b"B", None, True]


def test_nodes_keep_heartbeating_and_stay_active(tree: Tree) -> None:
    time.sleep(0.7)
    statuses = {i["id"]: i["status"] for i in tree.cp.http.get("/instances").json()["instances"]}
    assert set(statuses.values()) == {"active"}


def test_max_bytes_and_policy_flags_set_the_nodes_memory_limit(tmp_path: Path) -> None:
    """`hal cache node --max-bytes N --maxmemory-policy allkeys-lru`: the node starts with
    that limit, evicts the least recently used keys to stay under it and reports them."""
    cp = ControlPlane(tmp_path)
    node = Node(
        tmp_path, cp, "capped", None, "root", "--max-bytes", "20000",
        "--maxmemory-policy", "allkeys-lru",
    )  # fmt: skip
    try:
        start_all([cp, node])
        client = node.client()
        assert client.config_get("maxmemory*") == {
            "maxmemory": "20000",
            "maxmemory-policy": "allkeys-lru",
        }
        for i in range(40):
            assert client.set(f"cap:{i}", b"x" * 1000) is True
        assert client.info("memory")["used_memory"] <= 20000
        assert client.info("stats")["evicted_keys"] > 0
        assert client.exists("cap:39") == 1 and client.exists("cap:0") == 0
        wait_for(lambda: cp.holders("cap:0") == [], 5, "evictions to reach the map")
    finally:
        node.kill()
        cp.kill()
