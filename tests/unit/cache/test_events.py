"""Event ingestion (single and batch) and the stale-replica rules."""

from __future__ import annotations

from typing import Any

import pytest
from cacheapi import T0, Api


def _batch(iid: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"instanceId": iid, "events": events}


def _ev(key: str, etype: str = "key_added", ts: str = T0, **extra: Any) -> dict[str, Any]:
    return {"eventType": etype, "timestamp": ts, "key": key, **extra}


def test_single_event_is_202_with_an_id_and_visible_at_once(api: Api) -> None:
    """A node reads `locate` right after its write was acknowledged: it must be there."""
    api.register("n1")
    resp = api.event("n1", "k", size=42)
    assert resp.status_code == 202
    body = resp.json()
    assert body["accepted"] is True and body["eventId"]
    assert api.get("/v1/content/locate/k").json()["instances"] == [{"instanceId": "n1", "size": 42}]
    updated = api.event("n1", "k", etype="key_updated", size=7, ts="2025-01-01T00:00:01Z")
    assert updated.status_code == 202
    assert api.get("/v1/content/locate/k").json()["instances"][0]["size"] == 7
    assert api.event("n1", "k", etype="key_evicted", ts="2025-01-01T00:00:02Z").status_code == 202
    assert api.holders("k") == []


@pytest.mark.parametrize(
    "ts",
    [
        "2025-01-01T00:00:00Z",
        "2025-01-01T02:00:00+02:00",
        "2025-01-01T00:00:00.123456Z",
        "2025-01-01T00:00:00.1-05:30",
        "2025-01-01t00:00:00z",
        "2025-06-30T23:59:60Z",
    ],
)
def test_timestamps_accept_z_offsets_and_fractions(api: Api, ts: str) -> None:
    api.register("n1")
    assert api.event("n1", "k", ts=ts).status_code == 202


@pytest.mark.parametrize(
    "body",
    [
        {"eventType": "key_added", "timestamp": T0, "key": "k"},  # no instanceId
        {"instanceId": "n1", "timestamp": T0, "key": "k"},  # no eventType
        {"instanceId": "n1", "eventType": "key_touched", "timestamp": T0, "key": "k"},
        {"instanceId": "n1", "eventType": "key_added", "key": "k"},  # no timestamp
        {"instanceId": "n1", "eventType": "key_added", "timestamp": "yesterday", "key": "k"},
        {
            "instanceId": "n1",
            "eventType": "key_added",
            "timestamp": "2025-13-01T00:00:00Z",
            "key": "k",
        },
        # no key
        {"instanceId": "n1", "eventType": "key_added", "timestamp": T0},
        {"instanceId": "n1", "eventType": "key_added", "timestamp": T0, "key": 5},
        {"instanceId": "n1", "eventType": "key_added", "timestamp": T0, "key": "k", "size": "1"},
        {
            "instanceId": "n1",
            "eventType": "key_added",
            "timestamp": T0,
            "key": "k",
            "retrievalTimeMs": "fast",
        },
    ],
)
def test_single_event_validation_errors_are_400(api: Api, body: dict[str, Any]) -> None:
    resp = api.post("/v1/events", json=body)
    assert resp.status_code == 400 and resp.json()["code"] == "bad_request"
    assert api.holders("k") == []


def test_batch_is_applied_in_arrival_order_not_by_client_timestamps(api: Api) -> None:
    """A late-stamped add, then an earlier-stamped evict: the evict wins (arrival order)."""
    api.register("n1")
    resp = api.post(
        "/v1/events/batch",
        json=_batch(
            "n1",
            [
                _ev("a", size=1),
                _ev("b", size=2, ts="2030-01-01T00:00:00Z"),
                _ev("b", "key_evicted", ts="2020-01-01T00:00:00Z"),
                _ev("a", "key_updated", size=9, ts="2021-01-01T00:00:00Z"),
            ],
        ),
    )
    assert resp.status_code == 202
    body = resp.json()
    assert body == {"accepted": True, "count": 4, "batchId": body["batchId"]}
    assert api.holders("b") == []
    assert api.get("/v1/content/locate/a").json()["instances"][0]["size"] == 9


@pytest.mark.parametrize("events", [[], [_ev("k")] * 10_001], ids=["empty", "10001"])
def test_batch_size_must_be_1_to_10000(api: Api, events: list[dict[str, Any]]) -> None:
    resp = api.post("/v1/events/batch", json=_batch("n1", events))
    assert resp.status_code == 400 and resp.json()["code"] == "bad_request"


def test_batch_of_exactly_10000_is_accepted(api: Api) -> None:
    api.register("n1")
    events = [_ev(f"k{i}", size=1) for i in range(10_000)]
    resp = api.post("/v1/events/batch", json=_batch("n1", events))
    assert resp.status_code == 202 and resp.json()["count"] == 10_000
    assert api.get("/v1/instances/n1").json()["keyCount"] == 10_000


@pytest.mark.parametrize(
    "bad",
    [
        {"eventType": "key_moved", "timestamp": T0, "key": "x"},
        {"eventType": "key_added", "key": "x"},
        {"eventType": "key_added", "timestamp": T0},
        "not-an-object",
    ],
)
def test_batch_is_validated_whole_one_bad_event_rejects_all(api: Api, bad: Any) -> None:
    api.register("n1")
    resp = api.post("/v1/events/batch", json=_batch("n1", [_ev("good"), bad]))
    assert resp.status_code == 400 and resp.json()["code"] == "bad_request"
    assert api.holders("good") == []


def test_batch_without_instance_id_or_events_is_400(api: Api) -> None:
    assert api.post("/v1/events/batch", json={"events": [_ev("k")]}).status_code == 400
    assert api.post("/v1/events/batch", json={"instanceId": "n1"}).status_code == 400
    assert api.post("/v1/events/batch", json={"instanceId": "n1", "events": {}}).status_code == 400


def test_replayed_duplicates_change_nothing(api: Api) -> None:
    """A node replays its buffer after an outage; events already applied must not re-apply."""
    api.register("n1")
    add = _ev("k", size=1, ts="2025-01-01T00:00:01Z")
    evict = _ev("k", "key_evicted", ts="2025-01-01T00:00:02Z")
    re_add = _ev("k", size=3, ts="2025-01-01T00:00:03Z")
    api.post("/v1/events/batch", json=_batch("n1", [add, evict, re_add]))
    # the whole buffer again, then the evict alone
    api.post("/v1/events/batch", json=_batch("n1", [add, evict, re_add]))
    first = api.post("/v1/events", json={"instanceId": "n1", **evict}).json()["eventId"]
    again = api.post("/v1/events", json={"instanceId": "n1", **evict}).json()["eventId"]
    assert first == again
    assert api.get("/v1/content/locate/k").json()["instances"] == [{"instanceId": "n1", "size": 3}]


def test_origin_write_makes_pulled_copies_stale_until_they_pull_again(api: Api) -> None:
    """root writes k; b1 and l1 pull it; root overwrites: b1 and l1 must not be offered."""
    api.tree()
    api.event("root", "k", ts="2025-01-01T00:00:00Z")
    api.event("b1", "k", source="root", ts="2025-01-01T00:00:01Z")
    api.event("l1", "k", source="b1", ts="2025-01-01T00:00:02Z")
    assert api.holders("k", "l1") == ["l1", "b1", "root"]
    api.event("root", "k", etype="key_updated", size=20, ts="2025-01-01T00:00:03Z")
    assert api.holders("k", "l1") == ["root"]
    assert (
        api.get("/v1/content/nearest/k", params={"sourceInstanceId": "l1"}).json()["instanceId"]
        == "root"
    )
    # an inventory re-sync of the stale copy does not make it fresh
    api.post(
        "/v1/content/instances/b1/keys", json={"mode": "full", "keys": [{"key": "k", "size": 10}]}
    )
    assert api.holders("k", "l1") == ["root"]
    # a copy taken from a stale copy is stale too
    api.event("l2", "k", source="b1", ts="2025-01-01T00:00:04Z")
    assert "l2" not in api.holders("k")
    # b1 pulls again from root: fresh
    api.event("b1", "k", source="root", size=20, ts="2025-01-01T00:00:05Z")
    assert api.holders("k", "l1") == ["b1", "root"]


@pytest.mark.parametrize("source", [None, "l3"], ids=["no-source", "self-as-source"])
def test_origin_holders_are_never_marked_stale(api: Api, source: str | None) -> None:
    """Two instances both wrote k at origin: each keeps being offered after the other writes."""
    api.tree()
    api.event("l1", "k", ts="2025-01-01T00:00:00Z")
    api.event("l3", "k", source=source, ts="2025-01-01T00:00:01Z")
    assert set(api.holders("k")) == {"l1", "l3"}


def test_evicted_stale_copy_then_fresh_pull_is_offered(api: Api) -> None:
    api.tree()
    api.event("root", "k")
    api.event("l1", "k", source="root", ts="2025-01-01T00:00:01Z")
    api.event("root", "k", etype="key_updated", ts="2025-01-01T00:00:02Z")
    api.event("l1", "k", etype="key_evicted", ts="2025-01-01T00:00:03Z")
    api.event("l1", "k", source="root", ts="2025-01-01T00:00:04Z")
    assert api.holders("k", "l1") == ["l1", "root"]


def test_a_replayed_pull_arriving_before_the_origin_write_it_followed_stays_fresh(api: Api) -> None:
    """After an outage nodes replay in any order across nodes: a pull stamped after the
    origin write is not stale even if its event arrives first."""
    api.tree()
    api.event("b1", "k", source="root", ts="2025-01-01T00:00:02Z")
    api.event("root", "k", ts="2025-01-01T00:00:01Z")
    assert api.holders("k", "l1") == ["b1", "root"]


def test_events_of_a_deregistered_instance_are_refused_and_change_nothing(api: Api) -> None:
    """An operator deregisters a cache node whose events are still in flight. They must
    not mark other instances' copies stale, nor come back as copies when an instance of
    that id registers again (or after a restart): ``accepted: false``, nothing applied."""
    api.tree()
    api.event("root", "k", ts="2025-01-01T00:00:00Z")
    api.event("l1", "k", source="root", ts="2025-01-01T00:00:01Z")
    assert api.delete("/v1/instances/root/deregister").status_code == 204
    late = api.event("root", "k", etype="key_updated", ts="2025-01-01T00:00:02Z")
    assert late.status_code == 202
    assert late.json()["accepted"] is False and late.json()["eventId"]
    batch = api.post("/v1/events/batch", json=_batch("root", [_ev("k2", size=4)]))
    assert batch.status_code == 202
    assert batch.json()["accepted"] is False and batch.json()["count"] == 0
    never = api.post("/v1/events/batch", json=_batch("ghost", [_ev("k3", size=4)]))
    assert never.json()["accepted"] is False
    assert api.holders("k", "l1") == ["l1"]  # l1's copy was not made stale
    api.register("root", "root")
    api.register("ghost", "root")
    api.restart()
    assert api.holders("k", "l1") == ["l1"]
    assert api.holders("k2") == [] and api.holders("k3") == []
    assert api.get("/v1/content/instances/root/keys").json()["total"] == 0


def test_stale_copies_are_named_to_their_holders_on_heartbeat_and_locate(api: Api) -> None:
    """HAL's ``halStale``: a node's local hits never ask the control plane, so its
    heartbeat answer names its stale copies; locate names the stale holders (never among
    ``instances``) so a node the map does not list can tell stale from not-yet-known."""
    api.tree()
    api.event("root", "k", ts="2025-01-01T00:00:00Z")
    api.event("b1", "k", source="root", ts="2025-01-01T00:00:01Z")
    api.event("l1", "k", source="b1", ts="2025-01-01T00:00:02Z")
    beat = api.post("/v1/instances/l1/heartbeat", json={}).json()
    assert "halStale" not in beat
    assert "halStale" not in api.get("/v1/content/locate/k").json()
    api.event("root", "k", etype="key_updated", ts="2025-01-01T00:00:03Z")
    assert api.post("/v1/instances/l1/heartbeat", json={}).json()["halStale"] == ["k"]
    assert "halStale" not in api.post("/v1/instances/root/heartbeat", json={}).json()
    located = api.get("/v1/content/locate/k", params={"sourceInstanceId": "l1"}).json()
    assert located["halStale"] == ["b1", "l1"]
    assert [i["instanceId"] for i in located["instances"]] == ["root"]
    api.restart()
    assert api.post("/v1/instances/b1/heartbeat", json={}).json()["halStale"] == ["k"]
    # dropped (or pulled again): no longer named
    api.event("l1", "k", etype="key_evicted", ts="2025-01-01T00:00:04Z")
    api.event("b1", "k", source="root", ts="2025-01-01T00:00:05Z")
    assert "halStale" not in api.post("/v1/instances/l1/heartbeat", json={}).json()
    assert "halStale" not in api.post("/v1/instances/b1/heartbeat", json={}).json()
    assert "halStale" not in api.get("/v1/content/locate/k").json()
