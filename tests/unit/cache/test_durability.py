"""The registry, topology and content map survive a control-plane restart, on SQLite and
on PostgreSQL (a fresh database per test on 127.0.0.1:5432; skipped where none runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cacheapi import Api
from sqlalchemy.exc import OperationalError

from hal.cache.contentmap import Entry
from hal.cache.directory import DirectorySettings
from hal.cache.store import Journal
from hal.core.clock import VirtualClock


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def api(
    request: pytest.FixtureRequest, tmp_path: Path, settings: DirectorySettings
) -> Iterator[Api]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'cache.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    client = Api(url, settings, VirtualClock(1_700_000_000.0))
    try:
        yield client
    finally:
        client.close()
        client.loop.close()


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


def test_a_failed_database_write_is_a_500_and_the_retry_makes_it_durable(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database refuses one commit (disk full, failover): the node gets the 500 error
    shape and retries the same event. Memory already holds it, so the replay changes
    nothing there; the rows of the failed commit must still reach the database."""
    api.register("n1")
    real_write = api.plane.store.write
    calls = 0

    def fail_once(journal: Journal) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        real_write(journal)

    monkeypatch.setattr(api.plane.store, "write", fail_once)
    resp = api.event("n1", "k", size=7)
    assert resp.status_code == 500
    assert resp.json()["code"] == "internal_error" and resp.json()["message"]
    assert api.event("n1", "k", size=7).status_code == 202  # the node's retry: a duplicate
    monkeypatch.undo()
    api.restart()
    assert api.get("/v1/content/locate/k").json()["instances"] == [{"instanceId": "n1", "size": 7}]


def test_a_journal_kept_after_a_failure_is_overridden_by_later_changes() -> None:
    """Rows of a failed flush go first; what happened after wins, drops included."""
    failed = Journal()
    failed.content[("a", "k")] = Entry(size=1)
    failed.content[("b", "k")] = Entry(size=2)
    later = Journal()
    later.drop_instance("b")
    later.content[("a", "k")] = Entry(size=3)
    later.content[("b", "new")] = Entry(size=4)  # b registered again after its drop
    merged = failed.then(later)
    assert merged.content == {("a", "k"): Entry(size=3), ("b", "new"): Entry(size=4)}
    assert merged.dropped == {"b"} and merged.instances == {"b": None}
