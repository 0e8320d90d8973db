"""Content map endpoints: locate, nearest, key listing and bulk inventory."""

from __future__ import annotations

import pytest
from cacheapi import Api


def test_locate_decodes_each_path_segment_so_encoded_slashes_stay_in_the_key(api: Api) -> None:
    """`checkpoint%3Aresnet%2Fepoch10` is one key, echoed decoded."""
    api.register("n1")
    key = "checkpoint:resnet/epoch10"
    api.event("n1", key)
    resp = api.get("/v1/content/locate/checkpoint%3Aresnet%2Fepoch10")
    assert resp.status_code == 200
    assert resp.json()["key"] == key
    assert [i["instanceId"] for i in resp.json()["instances"]] == ["n1"]
    # unicode and spaces survive too
    api.event("n1", "donnée 1")
    assert api.get("/v1/content/locate/donn%C3%A9e%201").json()["instances"][0]["size"] == 10


def test_locate_of_an_unknown_key_is_200_with_no_instances(api: Api) -> None:
    resp = api.get("/v1/content/locate/nothing-here")
    assert resp.status_code == 200 and resp.json() == {"key": "nothing-here", "instances": []}


def test_locate_orders_by_tree_distance_from_the_source_then_by_id(api: Api) -> None:
    """From l1: itself (0), b1 (1), l2 and root (2, by id), b2 (3), l3 (4)."""
    api.tree()
    for iid in ("root", "b1", "b2", "l1", "l2", "l3"):
        api.event(iid, "k", source="elsewhere")
    assert api.holders("k", "l1") == ["l1", "b1", "l2", "root", "b2", "l3"]
    assert api.holders("k") == sorted(["root", "b1", "b2", "l1", "l2", "l3"])
    first = api.get("/v1/content/locate/k", params={"sourceInstanceId": "l1"}).json()
    assert first["instances"][0]["proximity"]["latencyMs"] == 0.0


def test_locate_lists_only_registered_instances(api: Api) -> None:
    """Events from an instance that never registered are refused, not kept for later: the
    copy it claimed appears only once it registers and reports it again."""
    api.register("n1")
    api.event("n1", "k")
    assert api.event("stranger", "k").json()["accepted"] is False
    assert api.holders("k") == ["n1"]
    api.register("stranger")
    assert api.holders("k") == ["n1"]
    api.event("stranger", "k", ts="2025-01-01T00:00:01Z")
    assert api.holders("k") == ["n1", "stranger"]


def test_nearest_prefers_the_requester_then_its_ancestors(api: Api) -> None:
    api.tree()
    api.event("root", "k")
    resp = api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"})
    assert resp.status_code == 200
    body = resp.json()
    assert body["instanceId"] == "root" and body["key"] == "k" and body["size"] == 10
    assert body["address"] and body["proximity"]["latencyMs"] == 2.0
    api.event("b1", "k", source="root")
    assert (
        api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).json()["instanceId"]
        == "b1"
    )
    api.event("l1", "k", source="b1")
    assert (
        api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).json()["instanceId"]
        == "l1"
    )


def test_nearest_ignores_siblings_and_other_trees_by_default(api: Api) -> None:
    """Without peer sourcing only self and ancestors are eligible: a sibling's copy is a 404."""
    api.tree()
    api.register("other-root", "root")
    api.event("l2", "k")
    api.event("other-root", "k")
    resp = api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"})
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"


@pytest.mark.parametrize("settings", [pytest.param(None, id="peer-sourcing")], indirect=True)
def test_nearest_with_peer_sourcing_takes_the_closest_holder_in_the_same_tree(api: Api) -> None:
    api.tree()
    api.register("other-root", "root")
    api.event("l3", "k")
    api.event("l2", "k")
    api.event("other-root", "k")
    got = api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).json()
    assert got["instanceId"] == "l2"
    api.event("l2", "k", etype="key_evicted")
    got = api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).json()
    assert got["instanceId"] == "l3"
    api.event("l3", "k", etype="key_evicted")
    # another tree's copy is never offered
    assert api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).status_code == 404


@pytest.fixture
def settings(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    from hal.cache.directory import DirectorySettings

    return DirectorySettings(peer_sourcing=hasattr(request, "param"))


def test_nearest_needs_a_registered_source(api: Api) -> None:
    api.register("n1")
    api.event("n1", "k")
    for params in ({}, {"sourceInstanceId": ""}, {"sourceInstanceId": "ghost"}):
        resp = api.get("/v1/content/nearest/k", params=params)
        assert resp.status_code == 400 and resp.json()["code"] == "bad_request"


def test_key_listing_pages_with_an_opaque_cursor_in_a_stable_order(api: Api) -> None:
    api.register("n1")
    keys = [f"key-{i:03d}" for i in range(25)]
    api.post(
        "/v1/content/instances/n1/keys",
        json={"keys": [{"key": k, "size": i} for i, k in enumerate(reversed(keys))]},
    )
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, object] = {"limit": 10}
        if cursor:
            params["cursor"] = cursor
        body = api.get("/v1/content/instances/n1/keys", params=params).json()
        assert body["instanceId"] == "n1" and body["total"] == 25
        seen += [k["key"] for k in body["keys"]]
        pages += 1
        cursor = body["cursor"]
        if cursor is None:
            break
    assert seen == keys and pages == 3
    # a foreign cursor is a position too: keys after it
    after = api.get("/v1/content/instances/n1/keys", params={"cursor": "key-020"}).json()
    assert [k["key"] for k in after["keys"]] == keys[21:]
    empty = api.get("/v1/content/instances/n1/keys", params={"limit": 0}).json()
    assert empty["keys"] == [] and empty["total"] == 25
    default = api.get("/v1/content/instances/n1/keys").json()
    assert len(default["keys"]) == 25 and default["cursor"] is None


@pytest.mark.parametrize("params", [{"limit": 10001}, {"limit": "ten"}])
def test_key_listing_rejects_bad_paging_parameters(api: Api, params: dict[str, object]) -> None:
    api.register("n1")
    resp = api.get("/v1/content/instances/n1/keys", params=params)
    assert resp.status_code == 400 and resp.json()["code"] == "bad_request"


def test_key_listing_and_inventory_of_an_unknown_instance_are_404(api: Api) -> None:
    assert api.get("/v1/content/instances/ghost/keys").status_code == 404
    resp = api.post("/v1/content/instances/ghost/keys", json={"keys": []})
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"


def test_partial_inventory_adds_and_updates_full_inventory_also_removes(api: Api) -> None:
    """Reconciliation: `full` makes the map equal to the node's list, `partial` only adds."""
    api.register("n1")
    path = "/v1/content/instances/n1/keys"
    resp = api.post(path, json={"keys": [{"key": "a", "size": 1}, {"key": "b", "size": 2}]})
    # ``updated`` counts every key processed, new ones included (the contract's examples)
    assert resp.json() == {"updated": 2, "added": 2, "removed": 0}
    resp = api.post(
        path, json={"mode": "partial", "keys": [{"key": "b", "size": 5}, {"key": "c", "size": 3}]}
    )
    assert resp.json() == {"updated": 2, "added": 1, "removed": 0}
    resp = api.post(
        path,
        json={
            "mode": "full",
            "keys": [{"key": "c", "size": 3, "lastAccessed": "2025-02-01T10:00:00Z"}],
        },
    )
    assert resp.json() == {"updated": 1, "added": 0, "removed": 2}
    listed = api.get(path).json()
    assert listed["keys"] == [{"key": "c", "size": 3, "lastAccessed": "2025-02-01T10:00:00Z"}]
    # an empty full inventory (a restarted node) clears everything
    assert api.post(path, json={"mode": "full", "keys": []}).json()["removed"] == 1
    assert api.get("/v1/instances/n1").json()["keyCount"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {},  # keys missing
        {"keys": "a"},
        {"mode": "replace", "keys": []},
        {"keys": [{"key": "a", "size": 1}, {"key": "b"}]},  # second entry lacks size
        {"keys": [{"key": "a", "size": 1}, {"size": 1}]},  # second entry lacks key
        {"keys": [{"key": "a", "size": 1}, {"key": "b", "size": None}]},
        {"keys": [{"key": "a", "size": 1}, {"key": "b", "size": 1.5}]},
        {"keys": [{"key": "a", "size": 1}, "b"]},
        {"keys": [{"key": "a", "size": 1, "lastAccessed": "yesterday"}]},
    ],
)
def test_bulk_inventory_is_validated_whole_before_anything_changes(api: Api, body: object) -> None:
    """One bad entry rejects the request and leaves the map as it was."""
    api.register("n1")
    api.post("/v1/content/instances/n1/keys", json={"keys": [{"key": "old", "size": 1}]})
    resp = api.post("/v1/content/instances/n1/keys", json=body)
    assert resp.status_code == 400 and resp.json()["code"] == "bad_request"
    assert [k["key"] for k in api.get("/v1/content/instances/n1/keys").json()["keys"]] == ["old"]


def test_an_inventory_listing_a_key_twice_counts_it_once(api: Api) -> None:
    api.register("n1")
    body = {"mode": "full", "keys": [{"key": "x", "size": 1}, {"key": "x", "size": 2}]}
    resp = api.post("/v1/content/instances/n1/keys", json=body)
    assert resp.json() == {"updated": 1, "added": 1, "removed": 0}
    assert api.get("/v1/content/locate/x").json()["instances"] == [{"instanceId": "n1", "size": 2}]


def _part(sync: str, index: int, last: bool, *keys: str) -> dict[str, object]:
    return {
        "halInventory": {"syncId": sync, "part": index, "last": last},
        "keys": [{"key": k, "size": 1} for k in keys],
    }


def test_a_full_inventory_in_parts_removes_unlisted_keys_only_after_its_last_part(
    api: Api,
) -> None:
    """A big node's inventory does not fit one request body: it comes in parts (HAL's
    ``halInventory`` extension). Every part adds; keys that no part listed go only when
    the last part is in, so keys listed by later parts are never dropped in between."""
    api.register("n1")
    path = "/v1/content/instances/n1/keys"
    api.post(path, json={"keys": [{"key": k, "size": 1} for k in ("a", "b", "gone")]})
    first = api.post(path, json=_part("s1", 0, False, "a"))
    assert first.json() == {"updated": 1, "added": 0, "removed": 0}
    assert api.post(path, json=_part("s1", 1, False, "new")).json()["removed"] == 0
    assert sorted(api.holders(k)[0] for k in ("a", "b", "gone", "new")) == ["n1"] * 4
    last = api.post(path, json=_part("s1", 2, True, "b"))
    assert last.json() == {"updated": 1, "added": 0, "removed": 1}
    assert [k["key"] for k in api.get(path).json()["keys"]] == ["a", "b", "new"]
    api.restart()
    assert [k["key"] for k in api.get(path).json()["keys"]] == ["a", "b", "new"]


def test_a_part_that_does_not_follow_the_parts_received_is_refused(api: Api) -> None:
    """A part whose predecessors the control plane does not have (it restarted between
    them, or a newer inventory began) must not complete an inventory: its removals would
    drop keys that only the lost parts listed. 400 naming the field; the node starts over."""
    api.register("n1")
    path = "/v1/content/instances/n1/keys"
    api.post(path, json={"keys": [{"key": "kept", "size": 1}]})
    api.post(path, json=_part("s1", 0, False, "kept"))
    for body in (_part("s1", 2, True), _part("other", 1, True)):
        resp = api.post(path, json=body)
        assert resp.status_code == 400
        assert resp.json()["details"]["field"] == "halInventory.part"
    api.post(path, json=_part("s1", 1, False, "x"))
    api.restart()  # the parts so far are lost with the process
    assert api.post(path, json=_part("s1", 2, True)).status_code == 400
    assert api.holders("kept") == ["n1"]
    assert api.post(path, json=_part("s2", 0, True, "y")).json()["removed"] == 2  # kept, x


@pytest.mark.parametrize(
    ("extension", "field"),
    [
        ("s", "halInventory"),
        ({"part": 0}, "halInventory.syncId"),
        ({"syncId": "", "part": 0}, "halInventory.syncId"),
        ({"syncId": "s"}, "halInventory.part"),
        ({"syncId": "s", "part": -1}, "halInventory.part"),
        ({"syncId": "s", "part": 0, "last": "yes"}, "halInventory.last"),
    ],
)
def test_a_malformed_inventory_part_is_400_naming_the_field(
    api: Api, extension: object, field: str
) -> None:
    api.register("n1")
    resp = api.post("/v1/content/instances/n1/keys", json={"halInventory": extension, "keys": []})
    assert resp.status_code == 400 and resp.json()["details"]["field"] == field


def test_a_part_cannot_also_claim_to_be_a_whole_full_inventory(api: Api) -> None:
    api.register("n1")
    body = {"mode": "full", **_part("s1", 0, False, "a")}
    resp = api.post("/v1/content/instances/n1/keys", json=body)
    assert resp.status_code == 400 and resp.json()["details"]["field"] == "mode"
