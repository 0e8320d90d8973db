"""The failover gate of a server that does not lead (``hal.api.role_gate``): its 307 to
the leader carries the path as it came, percent-encoded, whatever characters it holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from hal.api.role_gate import LEADER_HEADER, ROLE_HEADER, SERVERS_HEADER, install
from hal.server.standby import Leadership
from hal.state.leader import LeaderRecord
from hal.state.peers import Peer
from hal.state.store import SqlStateStore

LEADER = "http://leader.example:8470"


@pytest.fixture
def standby() -> Iterator[TestClient]:
    store = SqlStateStore("sqlite://")
    leadership = Leadership(store, standby=True)
    leadership.role = "standby"
    leadership.leader = LeaderRecord(1, LEADER, "leader", 1, 0.0, 0.0)
    app = FastAPI()

    @app.get("/v1/jobs/{job_id}")
    async def job(job_id: str) -> dict[str, str]:
        return {"id": job_id}

    install(app, leadership)
    with TestClient(app, follow_redirects=False) as client:
        yield client
    store.close()


def test_a_standby_sends_any_path_to_the_leader_as_it_came(standby: TestClient) -> None:
    answer = standby.post("/v1/jobs/%C3%97%F2%AF%B5%B4/suspend?x=%E2%9C%93")
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{LEADER}/v1/jobs/%C3%97%F2%AF%B5%B4/suspend?x=%E2%9C%93"
    assert answer.headers[LEADER_HEADER] == LEADER
    assert answer.headers[ROLE_HEADER] == "standby"


def test_a_standby_answers_its_role_and_health_itself(standby: TestClient) -> None:
    ha = standby.get("/v1/ha")
    assert ha.status_code == 200 and ha.json()["role"] == "standby"
    assert standby.get("/v1/jobs/1").status_code == 307  # the app's own route: not served


def test_every_answer_names_the_live_servers_and_v1_ha_lists_them() -> None:
    """What the last heartbeat read (``Leadership.take_peers``): ``/v1/ha`` lists every
    live server, the leader first, beside its fields of before; every answer, a 307
    too, carries their URLs in ``X-HAL-Servers``. Before any heartbeat (or on SQLite)
    no answer carries the header."""
    store = SqlStateStore("sqlite://")
    leadership = Leadership(store, standby=True)
    leadership.role, leadership.url = "standby", "http://standby.example:8470"
    leadership.leader = LeaderRecord(1, LEADER, "leader", 1, 0.0, 0.0)
    app = FastAPI()
    install(app, leadership)
    with TestClient(app, follow_redirects=False) as client:
        before = client.get("/v1/ha")
        assert SERVERS_HEADER.lower() not in before.headers
        assert before.json()["peers"] == [
            {"server": leadership.server, "url": leadership.url, "role": "standby"}
        ]
        leadership.take_peers((Peer("leader:1", LEADER, "leader", 0.5),))
        ha = client.get("/v1/ha")
        both = f"{LEADER},{leadership.url}"
        assert ha.headers[SERVERS_HEADER] == both
        body = ha.json()
        assert body["peers"] == [
            {"server": "leader:1", "url": LEADER, "role": "leader"},
            {"server": leadership.server, "url": leadership.url, "role": "standby"},
        ]
        assert {"role", "epoch", "leader_url", "leader_since", "server"} <= set(body)
        assert body["leader_url"] == LEADER and body["role"] == "standby"
        sent = client.post("/v1/jobs", json={})
        assert sent.status_code == 307 and sent.headers[SERVERS_HEADER] == both
    store.close()
