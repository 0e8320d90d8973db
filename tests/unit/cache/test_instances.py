"""Instance registry endpoints: register, get, list, heartbeat, deregister, and their errors."""

from __future__ import annotations

import pytest
from cacheapi import Api


def test_register_answers_201_and_the_instance_becomes_active(api: Api) -> None:
    """A node registering for the first time is told it is registered and shows as active."""
    resp = api.register("leaf-1", "leaf", "branch-1", region="eu", maxSize=1024)
    assert resp.status_code == 201
    body = resp.json()
    assert body["id"] == "leaf-1" and body["registered"] is True
    assert isinstance(body["controlPlaneVersion"], str)
    got = api.get("/v1/instances/leaf-1").json()
    assert got["status"] == "active" and got["parentId"] == "branch-1"
    assert got["region"] == "eu" and got["maxSize"] == 1024 and got["tier"] == "leaf"
    assert got["keyCount"] == 0 and got["totalSize"] == 0 and got["children"] == []
    assert got["registeredAt"].endswith("Z") and got["lastHeartbeat"].endswith("Z")


def test_register_twice_is_409_even_with_a_broken_body(api: Api) -> None:
    """The conflict is checked before the body: a re-register with garbage still says 409."""
    api.register("n1")
    for kwargs in ({"json": {"address": "x:1", "tier": "leaf"}}, {"content": b"not json"}, {}):
        resp = api.post("/v1/instances/n1/register", **kwargs)
        assert resp.status_code == 409
        assert resp.json()["code"] == "already_exists"


@pytest.mark.parametrize(
    "body",
    [
        {"tier": "leaf"},  # no address
        {"address": "h:1"},  # no tier
        {"address": "h:1", "tier": "trunk"},  # tier outside the enum
        {"address": 5, "tier": "leaf"},  # address of the wrong type
        {"address": "h:1", "tier": "leaf", "maxSize": "big"},
        {"address": "h:1", "tier": "leaf", "metadata": [1]},
        [1, 2],  # not an object
    ],
)
def test_register_rejects_bad_bodies_with_400(api: Api, body: object) -> None:
    """A registration the control plane cannot use is refused with the error shape."""
    resp = api.post("/v1/instances/n1/register", json=body)
    assert resp.status_code == 400
    err = resp.json()
    assert err["code"] == "bad_request" and err["message"]
    assert api.get("/v1/instances/n1").status_code == 404


@pytest.mark.parametrize("raw", [b"", b"{", b"null"])
def test_missing_or_non_json_body_is_400(api: Api, raw: bytes) -> None:
    """Every POST without a usable JSON body gets 400 and the error shape."""
    api.register("n1")
    for path in (
        "/v1/instances/n2/register",
        "/v1/instances/n1/heartbeat",
        "/v1/content/instances/n1/keys",
        "/v1/events",
        "/v1/events/batch",
    ):
        resp = api.post(path, content=raw, headers={"content-type": "application/json"})
        assert resp.status_code == 400, path
        assert resp.json()["code"] == "bad_request"


def test_register_does_not_require_the_parent_to_exist(api: Api) -> None:
    """Nodes start in any order: a leaf may register before its branch."""
    assert api.register("leaf", "leaf", "not-yet").status_code == 201
    assert api.register("not-yet", "branch").status_code == 201
    assert api.get("/v1/instances/not-yet").json()["children"] == ["leaf"]


@pytest.mark.parametrize("bad", ["a.b", "a%20b", "%C3%A9t%C3%A9", "a%2Fb", "x:y", "abc%0A"])
def test_ids_outside_the_pattern_are_400_on_every_id_path(api: Api, bad: str) -> None:
    """Instance ids are [a-zA-Z0-9_-]+; anything else on an {id} path is a 400, not a 404."""
    for method, path in (
        ("GET", f"/v1/instances/{bad}"),
        ("POST", f"/v1/instances/{bad}/register"),
        ("POST", f"/v1/instances/{bad}/heartbeat"),
        ("DELETE", f"/v1/instances/{bad}/deregister"),
        ("GET", f"/v1/content/instances/{bad}/keys"),
        ("POST", f"/v1/content/instances/{bad}/keys"),
    ):
        resp = api.call(method, path, json={"address": "h:1", "tier": "leaf", "keys": []})
        assert resp.status_code == 400, (method, path)
        assert resp.json()["code"] == "bad_request"


def test_list_filters_by_status_and_region_and_counts_the_filtered_result(api: Api) -> None:
    """`total` is the size of what the filters let through."""
    api.register("a", region="eu")
    api.register("b", region="us")
    api.register("c", region="eu")
    body = api.get("/v1/instances").json()
    assert [i["id"] for i in body["instances"]] == ["a", "b", "c"] and body["total"] == 3
    body = api.get("/v1/instances", params={"region": "eu"}).json()
    assert [i["id"] for i in body["instances"]] == ["a", "c"] and body["total"] == 2
    body = api.get("/v1/instances", params={"status": "inactive"}).json()
    assert body == {"instances": [], "total": 0}
    assert api.get("/v1/instances", params={"status": "active"}).json()["total"] == 3


def test_list_rejects_an_unknown_status_filter(api: Api) -> None:
    resp = api.get("/v1/instances", params={"status": "sleeping"})
    assert resp.status_code == 400 and resp.json()["code"] == "bad_request"


def test_silent_instance_turns_inactive_and_a_heartbeat_revives_it(api: Api) -> None:
    """No heartbeat for longer than the window: inactive; the next heartbeat: active again."""
    api.register("n1")
    api.clock.advance(api.settings.inactive_after_s + 1)
    assert api.get("/v1/instances/n1").json()["status"] == "inactive"
    resp = api.post(
        "/v1/instances/n1/heartbeat",
        json={
            "keyCount": 3,
            "totalSize": 30,
            "hitRate": 0.5,
            "cpuUsage": 0.1,
            "memoryUsage": 0.2,
            "healthy": True,
        },
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["acknowledged"] is True and body["nextHeartbeatMs"] > 0
    got = api.get("/v1/instances/n1").json()
    assert got["status"] == "active" and got["hitRate"] == 0.5


def test_heartbeat_of_an_unknown_instance_is_404(api: Api) -> None:
    """A node the control plane forgot learns it from the 404 and registers again."""
    resp = api.post("/v1/instances/ghost/heartbeat", json={})
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"


def test_heartbeat_with_wrong_types_is_400(api: Api) -> None:
    api.register("n1")
    assert api.post("/v1/instances/n1/heartbeat", json={"keyCount": "many"}).status_code == 400
    assert api.post("/v1/instances/n1/heartbeat", json={"healthy": "yes"}).status_code == 400


HAL_STATS = {
    "hits": 7,
    "misses": 3,
    "missesNotFound": 1,
    "bytesServed": 700,
    "pulls": {"parent": 2, "peer": 0},
    "bytesPulled": {"parent": 200, "peer": 0},
    "evictions": 1,
    "expirations": 0,
}


def test_a_hal_nodes_read_counters_travel_from_its_heartbeat_to_the_instance_list(
    api: Api,
) -> None:
    """``halStats`` (an extension field; the heartbeat schema leaves properties open) is
    kept in memory and shown on the instance list and the instance, where the HAL server
    reads it; an instance that never sent it shows none."""
    api.register("n1")
    api.register("n2")
    assert api.post("/v1/instances/n1/heartbeat", json={"halStats": HAL_STATS}).status_code == 200
    listed = {i["id"]: i for i in api.get("/v1/instances").json()["instances"]}
    assert listed["n1"]["halStats"] == HAL_STATS
    assert "halStats" not in listed["n2"]
    assert api.get("/v1/instances/n1").json()["halStats"] == HAL_STATS
    # a heartbeat without them keeps the last ones
    assert api.post("/v1/instances/n1/heartbeat", json={"keyCount": 1}).status_code == 200
    assert api.get("/v1/instances/n1").json()["halStats"]["hits"] == 7


@pytest.mark.parametrize(
    ("stats", "field"),
    [
        ([1, 2], "halStats"),
        ({"hits": -1}, "halStats.hits"),
        ({"misses": "3"}, "halStats.misses"),
        ({"pulls": 3}, "halStats.pulls"),
        ({"bytesPulled": {"parent": 1.5}}, "halStats.bytesPulled.parent"),
    ],
)
def test_malformed_hal_stats_are_400_naming_the_field(api: Api, stats: object, field: str) -> None:
    api.register("n1")
    resp = api.post("/v1/instances/n1/heartbeat", json={"halStats": stats})
    assert resp.status_code == 400
    assert resp.json()["details"]["field"] == field


def test_deregister_removes_the_instance_its_content_and_its_place(api: Api) -> None:
    """Graceful shutdown: 204 with no body; its keys and its tree position disappear."""
    api.tree()
    api.event("b1", "k")
    resp = api.delete("/v1/instances/b1/deregister")
    assert resp.status_code == 204 and resp.content == b""
    assert "content-type" not in resp.headers
    assert api.get("/v1/instances/b1").status_code == 404
    assert api.holders("k") == []
    topo = api.get("/v1/topology").json()
    assert "b1" not in {n["id"] for n in topo["nodes"]}
    assert not [e for e in topo["edges"] if "b1" in (e["from"], e["to"])]
    # its children are now roots of their own trees
    assert api.get("/v1/topology/routes/l1/root").status_code == 404
    second = api.delete("/v1/instances/b1/deregister")
    assert second.status_code == 404 and second.json()["code"] == "not_found"


def test_register_again_after_deregister_works(api: Api) -> None:
    api.register("n1")
    api.delete("/v1/instances/n1/deregister")
    assert api.register("n1").status_code == 201


def test_unknown_paths_and_methods_answer_json_errors(api: Api) -> None:
    """Even routing failures keep the error shape and the JSON content type."""
    resp = api.get("/v2/instances")
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"
    resp = api.call("PUT", "/v1/instances")
    assert resp.status_code == 405 and resp.headers["allow"] == "GET"
    assert api.get("/v1/content/locate/").status_code == 404
