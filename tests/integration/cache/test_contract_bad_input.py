"""Bad input against a running control plane: every refusal is the contract's status with the
``{code, message, details?}`` body as JSON, never a 500, and nothing accepted can later make
an answer fail or stop being JSON (the contract: ``hal/cache/spec``, served at
``/openapi.yaml``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cachetree import ControlPlane

from hal.cache.app import CONTRACT
from hal.testing import http

T0 = "2025-01-01T00:00:00Z"
CODES = {400: "bad_request", 404: "not_found", 409: "already_exists"}
BIG = "1" + "0" * 400  # an integer no float can hold


def _no_constant(name: str) -> Any:
    raise AssertionError(f"the answer holds {name}, which is not JSON")


def strict(resp: httpx.Response) -> Any:
    """The body read as RFC 8259 JSON: no NaN or Infinity."""
    assert resp.headers["content-type"] == "application/json", resp.headers
    return json.loads(resp.text, parse_constant=_no_constant)


def refused(resp: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    body = strict(resp)
    assert set(body) <= {"code", "message", "details"}, body
    assert body["code"] == CODES[status]
    assert isinstance(body["message"], str) and body["message"]
    if "details" in body:
        assert isinstance(body["details"], dict)
    if field is not None:
        assert body["details"]["field"] == field, body
    return dict(body)


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("contract"))
    plane.start()
    try:
        for iid, body in (
            ("root", {"address": "10.0.0.1:6400", "tier": "root"}),
            ("l1", {"address": "10.0.0.2:6400", "tier": "leaf", "parentId": "root"}),
        ):
            assert plane.http.post(f"/instances/{iid}/register", json=body).status_code == 201
        yield plane
    finally:
        plane.kill()
        plane.http.close()


def event(**fields: Any) -> dict[str, Any]:
    return {"instanceId": "l1", "eventType": "key_added", "timestamp": T0, "key": "k", **fields}


# every POST, with a body that is otherwise valid: "@" is where a bad value goes
POST_BODIES = [
    ("/instances/{new}/register", '{"address":"a:1","tier":"leaf","metadata":{"x":@}}'),
    ("/instances/l1/heartbeat", '{"hitRate":@}'),
    ("/content/instances/l1/keys", '{"keys":[{"key":"k","size":1}],"x":@}'),
    ("/events", json.dumps(event())[:-1] + ',"retrievalTimeMs":@}'),
    (
        "/events/batch",
        '{"instanceId":"l1","events":[{"eventType":"key_added","timestamp":"T0","key":"k",'
        '"retrievalTimeMs":@}]}'.replace("T0", T0),
    ),
]


@pytest.mark.parametrize(("path", "template"), POST_BODIES)
def test_a_body_nested_too_deeply_is_a_400_on_every_post(
    cp: ControlPlane, path: str, template: str
) -> None:
    # was a RecursionError out of json.loads: 500
    deep = "[" * 100_000 + "]" * 100_000
    resp = cp.http.post(path.format(new="deep"), content=template.replace("@", deep).encode())
    refused(resp, 400)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize(("path", "template"), POST_BODIES)
def test_nan_and_infinity_are_not_json(
    cp: ControlPlane, path: str, template: str, constant: str
) -> None:
    # Python's json reads them; a heartbeat's NaN hitRate then came back out of
    # GET /v1/instances/{id} as a bare NaN, which no JSON parser accepts
    resp = cp.http.post(path.format(new="nan"), content=template.replace("@", constant).encode())
    refused(resp, 400)
    strict(cp.http.get("/instances/l1"))


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/instances/l1/heartbeat", '{"hitRate":@}'.replace("@", BIG), "hitRate"),
        ("/instances/l1/heartbeat", '{"cpuUsage":@}'.replace("@", BIG), "cpuUsage"),
        ("/instances/l1/heartbeat", '{"memoryUsage":-@}'.replace("@", BIG), "memoryUsage"),
        (
            "/events",
            json.dumps(event())[:-1] + ',"retrievalTimeMs":@}'.replace("@", BIG),
            "retrievalTimeMs",
        ),
    ],
)
def test_a_number_too_large_for_a_float_is_a_400(
    cp: ControlPlane, path: str, body: str, field: str
) -> None:
    # was OverflowError from float(): 500
    refused(cp.http.post(path, content=body.encode()), 400, field)


@pytest.mark.parametrize("huge", ["1e400", "-1e400", "1.5E+309"])
@pytest.mark.parametrize(
    ("path", "template", "field"),
    [
        ("/instances/l1/heartbeat", '{"hitRate":@}', "hitRate"),
        ("/instances/l1/heartbeat", '{"cpuUsage":@}', "cpuUsage"),
        ("/events", json.dumps(event())[:-1] + ',"retrievalTimeMs":@}', "retrievalTimeMs"),
        (
            "/events/batch",
            '{"instanceId":"l1","events":[{"eventType":"key_added","timestamp":"T0","key":"k",'
            '"retrievalTimeMs":@}]}'.replace("T0", T0),
            "events[0].retrievalTimeMs",
        ),
    ],
)
def test_a_decimal_past_the_float_range_is_a_400_not_an_infinity(
    cp: ControlPlane, path: str, template: str, field: str, huge: str
) -> None:
    # json reads 1e400 as inf: a heartbeat's hitRate then came back out of
    # GET /v1/instances/{id} as a bare Infinity, which no JSON parser accepts
    refused(cp.http.post(path, content=template.replace("@", huge).encode()), 400, field)
    strict(cp.http.get("/instances/l1"))


def test_huge_link_metrics_never_break_topology_answers(cp: ControlPlane) -> None:
    # metadata is free-form, so these registrations stand; they used to make /topology and
    # the routes through them 500 (int too large for a float) or answer a bare Infinity
    for iid, value in (("hugeint", BIG), ("huge1", "1e308"), ("huge2", "1e308")):
        body = '{"address":"a:1","tier":"leaf","parentId":"root","metadata":{"linkLatencyMs":@}}'
        resp = cp.http.post(f"/instances/{iid}/register", content=body.replace("@", value).encode())
        assert resp.status_code == 201, resp.text
    topo = cp.http.get("/topology")
    assert topo.status_code == 200
    edges = {e["to"]: e for e in strict(topo)["edges"]}
    assert edges["hugeint"]["proximity"]["latencyMs"] == 1.0  # unusable: the default
    route = cp.http.get("/topology/routes/huge1/huge2")
    assert route.status_code == 200
    assert strict(route)["hops"] == ["huge1", "root", "huge2"]
    assert strict(route)["totalLatencyMs"] > 1e308
    matrix = cp.http.get("/topology/proximity", params={"instanceIds": "huge1,huge2,hugeint"})
    assert matrix.status_code == 200
    assert len(strict(matrix)["matrix"]) == 3
    assert cp.http.post("/events", json=event(instanceId="huge2", key="far")).status_code == 202
    near = cp.http.get("/content/locate/far", params={"sourceInstanceId": "huge1"})
    assert near.status_code == 200
    assert [h["instanceId"] for h in strict(near)["instances"]] == ["huge2"]


@pytest.mark.parametrize(
    "stamp",
    [
        "2025-01-01T00:00:00+99:99",  # was a 500 (timezone() refused the offset)
        "2025-01-01T00:00:00+24:00",
        "2025-01-01T00:00:00+05:60",
        "2025-01-01T00:00:61Z",  # was read as :59
        "２０２５-01-01T00:00:00Z",  # fullwidth digits matched \d
        "2025-01-01T00:00:00Z\n",  # "$" matched before the newline
        "9999-12-31T23:59:59-01:00",  # year 10000 in UTC
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
    ],
)
def test_timestamps_that_are_not_rfc3339_instants_are_400(cp: ControlPlane, stamp: str) -> None:
    refused(cp.http.post("/events", json=event(timestamp=stamp)), 400, "timestamp")
    batch = {
        "instanceId": "l1",
        "events": [{"eventType": "key_added", "timestamp": stamp, "key": "k"}],
    }
    refused(cp.http.post("/events/batch", json=batch), 400, "events[0].timestamp")
    keys = {"keys": [{"key": "k", "size": 1, "lastAccessed": stamp}]}
    refused(cp.http.post("/content/instances/l1/keys", json=keys), 400, "keys[0].lastAccessed")


@pytest.mark.parametrize(
    "stamp",
    [
        "2025-01-01T00:00:60Z",
        "2025-01-01T00:00:00.123456789+23:59",
        "2025-01-01t00:00:00z",
        "2025-01-01T00:00:00",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00Z",
    ],
)
def test_valid_timestamps_are_still_accepted(cp: ControlPlane, stamp: str) -> None:
    assert cp.http.post("/events", json=event(timestamp=stamp)).status_code == 202


def test_a_last_accessed_the_listing_cannot_show_is_refused_and_the_listing_stays_up(
    cp: ControlPlane,
) -> None:
    # the inventory used to take it, and every later listing of the instance was a 500
    assert (
        cp.http.post("/instances/inv/register", json={"address": "a", "tier": "leaf"}).status_code
        == 201
    )
    keys = {"keys": [{"key": "k", "size": 1, "lastAccessed": "9999-12-31T23:59:59-23:59"}]}
    refused(cp.http.post("/content/instances/inv/keys", json=keys), 400, "keys[0].lastAccessed")
    listing = cp.http.get("/content/instances/inv/keys")
    assert listing.status_code == 200
    assert strict(listing)["keys"] == []


@pytest.mark.parametrize("fraction", [".999999", ".9999999", ".99999"])
def test_the_last_instant_of_9999_is_accepted_and_the_listing_still_shows_it(
    cp: ControlPlane, fraction: str
) -> None:
    # a valid RFC 3339 instant whose float time rounds up into year 10000: the event and the
    # inventory took it, and every later listing of the instance was a 500
    iid = f"late{len(fraction)}"
    body = {"address": "a", "tier": "leaf"}
    assert cp.http.post(f"/instances/{iid}/register", json=body).status_code == 201
    stamp = f"9999-12-31T23:59:59{fraction}Z"
    ev = event(instanceId=iid, key="by-event", timestamp=stamp)
    assert cp.http.post("/events", json=ev).status_code == 202
    keys = {"keys": [{"key": "by-inventory", "size": 1, "lastAccessed": stamp}]}
    assert cp.http.post(f"/content/instances/{iid}/keys", json=keys).status_code == 200
    listing = cp.http.get(f"/content/instances/{iid}/keys")
    assert listing.status_code == 200, listing.text
    shown = [k["lastAccessed"] for k in strict(listing)["keys"]]
    assert len(shown) == 2 and all(s.startswith("9999-12-31T23:59:59") for s in shown), shown


def test_an_empty_last_accessed_is_not_a_date_time(cp: ControlPlane) -> None:
    # "" used to be read as "not given"
    keys = {"keys": [{"key": "k", "size": 1, "lastAccessed": ""}]}
    refused(cp.http.post("/content/instances/l1/keys", json=keys), 400, "keys[0].lastAccessed")


@pytest.mark.parametrize(
    "limit", [" 1", "1_0", "\u0661", "1e3", "0x10", "", "1.0", "abc", "9" * 5000]
)
def test_a_limit_that_is_not_an_integer_is_a_400(cp: ControlPlane, limit: str) -> None:
    # " 1", "1_0" and the Arabic-Indic "١" used to pass through int()
    resp = cp.http.get("/content/instances/l1/keys", params={"limit": limit})
    refused(resp, 400, "limit")


@pytest.mark.parametrize(("limit", "count"), [("+2", 2), ("2", 2), ("10000", 3), ("0", 0)])
def test_integer_limits_still_work(cp: ControlPlane, limit: str, count: int) -> None:
    assert cp.http.post(
        "/instances/lim/register", json={"address": "a", "tier": "leaf"}
    ).status_code in (201, 409)
    keys = {"mode": "full", "keys": [{"key": f"k{i}", "size": 1} for i in range(3)]}
    assert cp.http.post("/content/instances/lim/keys", json=keys).status_code == 200
    resp = cp.http.get("/content/instances/lim/keys", params={"limit": limit})
    assert resp.status_code == 200
    body = strict(resp)
    assert set(body) == {"instanceId", "keys", "cursor", "total"}
    assert len(body["keys"]) == count and body["total"] == 3


def test_an_instance_id_longer_than_the_store_holds_is_a_400(cp: ControlPlane) -> None:
    ok = cp.http.post(f"/instances/{'a' * 255}/register", json={"address": "a", "tier": "leaf"})
    assert ok.status_code == 201
    long = cp.http.post(f"/instances/{'b' * 256}/register", json={"address": "a", "tier": "leaf"})
    refused(long, 400, "id")
    refused(cp.http.get(f"/instances/{'b' * 256}"), 404)


@pytest.mark.postgres
def test_an_overlong_id_does_not_wedge_a_postgresql_plane(tmp_path: Path, pg_url: str) -> None:
    """The id column is VARCHAR(255): a longer id failed the commit with a 500, and since a
    failed commit stays queued, every later write failed too until a restart."""
    plane = ControlPlane(tmp_path, pg_url)
    plane.start()
    try:
        long = plane.http.post(
            f"/instances/{'c' * 300}/register", json={"address": "a", "tier": "root"}
        )
        refused(long, 400, "id")
        assert strict(plane.http.get("/instances"))["total"] == 0
        after = plane.http.post("/instances/next/register", json={"address": "a", "tier": "root"})
        assert after.status_code == 201, after.text
        ev = plane.http.post("/events", json=event(instanceId="next", key="k\u0000nul"))
        assert ev.status_code == 202, ev.text
    finally:
        plane.kill()
        plane.http.close()


# -- the sweep: refusals the plane already gave right, kept right ---------------------------


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "field"),
    [
        ("POST", "/instances/s1/register", {}, 400, None),
        ("POST", "/instances/s1/register", {"content": b"{bad"}, 400, None),
        ("POST", "/instances/s1/register", {"content": b"\xff\xfe\x00"}, 400, None),
        ("POST", "/instances/s1/register", {"json": [1]}, 400, None),
        ("POST", "/instances/s1/register", {"json": {"tier": "leaf"}}, 400, "address"),
        (
            "POST",
            "/instances/s1/register",
            {"json": {"address": 1, "tier": "leaf"}},
            400,
            "address",
        ),
        ("POST", "/instances/s1/register", {"json": {"address": "a", "tier": "mid"}}, 400, "tier"),
        ("POST", "/instances/s1/register", {"json": {"address": "a"}}, 400, "tier"),
        (
            "POST",
            "/instances/s1/register",
            {"json": {"address": "a", "tier": "leaf", "maxSize": "1"}},
            400,
            "maxSize",
        ),
        (
            "POST",
            "/instances/s1/register",
            {"json": {"address": "a", "tier": "leaf", "maxSize": 2**63}},
            400,
            "maxSize",
        ),
        (
            "POST",
            "/instances/s1/register",
            {"json": {"address": "a", "tier": "leaf", "metadata": []}},
            400,
            "metadata",
        ),
        (
            "POST",
            "/instances/bad.id/register",
            {"json": {"address": "a", "tier": "leaf"}},
            400,
            "id",
        ),
        (
            "POST",
            "/instances/a%00b/register",
            {"json": {"address": "a", "tier": "leaf"}},
            400,
            "id",
        ),
        (
            "POST",
            "/instances/a%2Fb/register",
            {"json": {"address": "a", "tier": "leaf"}},
            400,
            "id",
        ),
        (
            "POST",
            "/instances/%E2%82%AC/register",
            {"json": {"address": "a", "tier": "leaf"}},
            400,
            "id",
        ),
        ("POST", "/instances/root/register", {"json": {"tier": 5}}, 409, None),
        ("GET", "/instances/nope", {}, 404, None),
        ("GET", "/instances/..%2F", {}, 400, "id"),
        ("GET", "/instances", {"params": {"status": "gone"}}, 400, "status"),
        ("POST", "/instances/l1/heartbeat", {"json": {"healthy": "yes"}}, 400, "healthy"),
        ("POST", "/instances/l1/heartbeat", {"json": {"keyCount": 1.5}}, 400, "keyCount"),
        ("POST", "/instances/l1/heartbeat", {"json": {"totalSize": 2**64}}, 400, "totalSize"),
        ("POST", "/instances/nope/heartbeat", {"json": {}}, 404, None),
        ("DELETE", "/instances/nope/deregister", {}, 404, None),
        ("DELETE", "/instances/bad%20id/deregister", {}, 400, "id"),
        ("GET", "/content/nearest/k", {}, 400, "sourceInstanceId"),
        (
            "GET",
            "/content/nearest/k",
            {"params": {"sourceInstanceId": "nope"}},
            400,
            "sourceInstanceId",
        ),
        ("GET", "/content/nearest/none", {"params": {"sourceInstanceId": "l1"}}, 404, None),
        ("GET", "/content/instances/nope/keys", {}, 404, None),
        ("GET", "/content/instances/l1/keys", {"params": {"limit": "10001"}}, 400, "limit"),
        ("POST", "/content/instances/nope/keys", {"json": {"keys": []}}, 404, None),
        ("POST", "/content/instances/l1/keys", {"json": {}}, 400, "keys"),
        ("POST", "/content/instances/l1/keys", {"json": {"mode": "all", "keys": []}}, 400, "mode"),
        (
            "POST",
            "/content/instances/l1/keys",
            {"json": {"keys": [{"key": "k"}]}},
            400,
            "keys[0].size",
        ),
        (
            "POST",
            "/content/instances/l1/keys",
            {"json": {"keys": [{"size": 1}]}},
            400,
            "keys[0].key",
        ),
        ("GET", "/topology/routes/l1/nope", {}, 404, None),
        ("POST", "/events", {"json": event(eventType="key_deleted")}, 400, "eventType"),
        ("POST", "/events", {"json": event(timestamp="yesterday")}, 400, "timestamp"),
        ("POST", "/events", {"json": event(key=None)}, 400, "key"),
        ("POST", "/events", {"json": event(size=2**63)}, 400, "size"),
        (
            "POST",
            "/events",
            {"json": {"eventType": "key_added", "timestamp": T0, "key": "k"}},
            400,
            "instanceId",
        ),
        ("POST", "/events/batch", {"json": {"instanceId": "l1", "events": []}}, 400, "events"),
        ("POST", "/events/batch", {"json": {"instanceId": "l1", "events": [5]}}, 400, "events[0]"),
        (
            "POST",
            "/events/batch",
            {
                "json": {
                    "instanceId": "l1",
                    "events": [{"eventType": "key_added", "timestamp": T0, "key": "k"}] * 10_001,
                }
            },
            400,
            "events",
        ),
    ],
)
def test_bad_input_sweep(
    cp: ControlPlane,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    refused(cp.http.request(method, path, **kwargs), status, field)


def test_the_running_plane_serves_the_contract_the_package_ships(cp: ControlPlane) -> None:
    """`hal cache control-plane` answers `GET /openapi.yaml` with the packaged contract,
    byte for byte (what schemathesis reads in test_schemathesis.py)."""
    resp = http.get(f"http://127.0.0.1:{cp.port}/openapi.yaml", timeout=5.0)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/yaml"
    assert resp.content == CONTRACT.read_bytes()


def test_a_method_the_path_does_not_have_is_405_with_allow(cp: ControlPlane) -> None:
    resp = cp.http.post("/instances/l1/deregister")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "DELETE"
    assert strict(resp)["code"] == "method_not_allowed"


def test_valid_answers_carry_exactly_the_documented_fields(cp: ControlPlane) -> None:
    reg = cp.http.post(
        "/instances/doc1/register",
        json={"address": "a:1", "tier": "leaf", "parentId": "l1", "maxSize": 10},
    )
    assert reg.status_code == 201
    assert set(strict(reg)) == {"id", "registered", "controlPlaneVersion"}
    hb = cp.http.post("/instances/doc1/heartbeat", json={"hitRate": 0.5, "healthy": True})
    assert hb.status_code == 200 and set(strict(hb)) == {"acknowledged", "nextHeartbeatMs"}
    detail = strict(cp.http.get("/instances/doc1"))
    assert set(detail) == {
        "id",
        "status",
        "address",
        "tier",
        "parentId",
        "lastHeartbeat",
        "keyCount",
        "totalSize",
        "maxSize",
        "hitRate",
        "children",
        "registeredAt",
    }
    ev = cp.http.post("/events", json=event(instanceId="doc1", key="d/k", size=7))
    assert ev.status_code == 202 and set(strict(ev)) == {"accepted", "eventId"}
    batch = cp.http.post(
        "/events/batch",
        json={
            "instanceId": "doc1",
            "events": [{"eventType": "key_added", "timestamp": T0, "key": "d2", "size": 1}],
        },
    )
    assert batch.status_code == 202 and set(strict(batch)) == {"accepted", "count", "batchId"}
    loc = strict(cp.http.get("/content/locate/d%2Fk", params={"sourceInstanceId": "l1"}))
    assert loc == {
        "key": "d/k",
        "instances": [
            {"instanceId": "doc1", "size": 7, "proximity": loc["instances"][0]["proximity"]}
        ],
    }
    assert set(loc["instances"][0]["proximity"]) == {"latencyMs", "bandwidthMbps", "cost"}
    near = strict(cp.http.get("/content/nearest/d%2Fk", params={"sourceInstanceId": "doc1"}))
    assert set(near) == {"key", "instanceId", "address", "size", "proximity"}
    upd = strict(
        cp.http.post("/content/instances/doc1/keys", json={"keys": [{"key": "x", "size": 1}]})
    )
    assert set(upd) == {"updated", "added", "removed"}
    route = strict(cp.http.get("/topology/routes/doc1/root"))
    assert set(route) == {"from", "to", "hops", "totalLatencyMs", "totalCost"}
    assert route["hops"] == ["doc1", "l1", "root"]
    gone = cp.http.delete("/instances/doc1/deregister")
    assert gone.status_code == 204 and gone.content == b""
    assert "content-type" not in gone.headers
