"""The registry, topology and content map survive a control-plane restart."""

from __future__ import annotations

from cacheapi import Api


def test_restart_keeps_registry_topology_content_and_stale_marks(api: Api) -> None:
    """After a restart, locate/nearest answer from the persisted map at once."""
    api.tree()
    api.event("root", "k", size=5)
    api.event("b1", "k", source="root", size=5, ts="2025-01-01T00:00:01Z")
    api.event("l1", "k", source="b1", size=5, ts="2025-01-01T00:00:02Z")
    api.event("root", "k", etype="key_updated", size=6, ts="2025-01-01T00:00:03Z")
    api.event("l2", "other/key", size=1)
    api.post("/v1/content/instances/l3/keys", json={"keys": [{"key": "inv", "size": 8}]})
    api.delete("/v1/instances/b2/deregister")
    api.restart()
    assert api.holders("k", "l1") == ["root"]
    assert (
        api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).json()["instanceId"]
        == "root"
    )
    assert api.holders("other%2Fkey") == ["l2"]
    assert api.holders("inv") == ["l3"]
    ids = {i["id"] for i in api.get("/v1/instances").json()["instances"]}
    assert ids == {"root", "b1", "l1", "l2", "l3"}
    assert api.get("/v1/topology/routes/l1/l2").json()["hops"] == ["l1", "b1", "l2"]
    # restored instances are unverified until they prove they are alive
    assert api.get("/v1/instances/l1").json()["status"] == "unverified"
    api.post("/v1/instances/l1/heartbeat", json={})
    assert api.get("/v1/instances/l1").json()["status"] == "active"


def test_restart_after_a_large_batch_and_a_full_inventory(api: Api) -> None:
    api.register("n1")
    events = [
        {"eventType": "key_added", "timestamp": "2025-01-01T00:00:00Z", "key": f"k{i}", "size": i}
        for i in range(3000)
    ]
    api.post("/v1/events/batch", json={"instanceId": "n1", "events": events})
    api.post(
        "/v1/content/instances/n1/keys",
        json={"mode": "full", "keys": [{"key": f"k{i}", "size": i} for i in range(1000)]},
    )
    api.restart()
    assert api.get("/v1/instances/n1").json()["keyCount"] == 1000
    assert api.get("/v1/content/instances/n1/keys", params={"limit": 1}).json()["total"] == 1000


def test_keys_with_nul_and_long_names_persist(api: Api) -> None:
    """Client strings go to SQL safely whatever they contain."""
    api.register("n1")
    weird = ["nul\u0000byte", "x" * 5000, "emoji-\U0001f600"]
    for key in weird:
        assert api.event("n1", key).status_code == 202
    api.restart()
    keys = {k["key"] for k in api.get("/v1/content/instances/n1/keys").json()["keys"]}
    assert keys == set(weird)
