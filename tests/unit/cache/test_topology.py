"""Topology graph, proximity matrix and routes, with per-edge link metrics."""

from __future__ import annotations

from cacheapi import Api


def test_topology_lists_nodes_parent_child_edges_and_the_root(api: Api) -> None:
    api.tree()
    api.event("l1", "k")
    topo = api.get("/v1/topology").json()
    assert topo["rootId"] == "root"
    nodes = {n["id"]: n for n in topo["nodes"]}
    assert set(nodes) == {"root", "b1", "b2", "l1", "l2", "l3"}
    assert nodes["l1"] == {"id": "l1", "tier": "leaf", "status": "active", "keyCount": 1}
    edges = {(e["from"], e["to"]) for e in topo["edges"]}
    assert edges == {("root", "b1"), ("root", "b2"), ("b1", "l1"), ("b1", "l2"), ("b2", "l3")}
    assert all(e["relationship"] == "parent-child" for e in topo["edges"])


def test_empty_topology_is_valid(api: Api) -> None:
    assert api.get("/v1/topology").json() == {"nodes": [], "edges": []}


def test_independent_trees_coexist_and_have_no_route_between_them(api: Api) -> None:
    api.tree()
    api.register("x-root", "root")
    api.register("x-leaf", "leaf", "x-root")
    resp = api.get("/v1/topology/routes/l1/x-leaf")
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"
    assert api.get("/v1/topology/routes/x-leaf/x-root").json()["hops"] == ["x-leaf", "x-root"]


def test_route_is_the_tree_path_with_summed_latency_and_cost(api: Api) -> None:
    api.register("root", "root")
    api.register(
        "b1",
        "branch",
        "root",
        metadata={"linkLatencyMs": 5, "linkCost": 0.5, "linkBandwidthMbps": 1000},
    )
    api.register("b2", "branch", "root", metadata={"linkLatencyMs": 20, "linkCost": 2})
    api.register("l1", "leaf", "b1")
    route = api.get("/v1/topology/routes/l1/b2").json()
    assert route["from"] == "l1" and route["to"] == "b2"
    assert route["hops"] == ["l1", "b1", "root", "b2"]
    assert route["totalLatencyMs"] == 1 + 5 + 20 and route["totalCost"] == 1 + 0.5 + 2
    assert api.get("/v1/topology/routes/l1/l1").json()["hops"] == ["l1"]
    assert api.get("/v1/topology/routes/l1/ghost").status_code == 404
    assert api.get("/v1/topology/routes/ghost/l1").status_code == 404


def test_expensive_links_do_not_change_ordering_by_tree_distance(api: Api) -> None:
    """A slow direct parent is still nearer than a fast grandparent route: hops decide."""
    api.register("root", "root")
    api.register("b1", "branch", "root", metadata={"linkLatencyMs": 1})
    api.register("l1", "leaf", "b1", metadata={"linkLatencyMs": 500})
    api.event("b1", "k", source="x")
    api.event("root", "k", source="x")
    resp = api.get("/v1/content/locate/k", params={"sourceInstanceId": "l1"}).json()
    assert [i["instanceId"] for i in resp["instances"]] == ["b1", "root"]
    assert resp["instances"][0]["proximity"]["latencyMs"] == 500
    assert resp["instances"][1]["proximity"]["latencyMs"] == 501


def test_proximity_matrix_covers_all_pairs_and_filters_silently(api: Api) -> None:
    api.tree()
    api.register("x-root", "root")
    full = api.get("/v1/topology/proximity").json()
    n = len(full["instances"])
    assert n == 7 and len(full["matrix"]) == n and all(len(r) == n for r in full["matrix"])
    some = api.get("/v1/topology/proximity", params={"instanceIds": "l1,ghost,root,x-root"}).json()
    assert some["instances"] == ["l1", "root", "x-root"]
    l1_root = some["matrix"][0][1]
    assert l1_root == {"latencyMs": 2.0, "bandwidthMbps": 10000.0, "cost": 2.0}
    assert some["matrix"][0][0]["latencyMs"] == 0.0
    # different trees: no metrics
    assert some["matrix"][0][2] == {}
    assert api.get("/v1/topology/proximity", params={"instanceIds": "ghost"}).json() == {
        "instances": [],
        "matrix": [],
    }


def test_parent_cycles_do_not_hang_the_control_plane(api: Api) -> None:
    """Two instances naming each other as parent: walks stop instead of looping."""
    api.register("a", "branch", "b")
    api.register("b", "branch", "a")
    assert api.get("/v1/topology").status_code == 200
    assert api.get("/v1/topology/routes/a/b").json()["hops"] == ["a", "b"]
    api.event("a", "k")
    assert api.holders("k", "b") == ["a"]
