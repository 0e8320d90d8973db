"""An array element the server no longer holds in memory (ended more than MinJobAge ago)
is read from the store by every route that names it: ``GET /v1/jobs/12_3``, its script,
and ``GET /v1/jobs?id=12_3&history=true``, against a real server restarted past
MinJobAge."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer

SCRIPT = {"script": "#!/bin/sh\necho element\n", "workdir": "/tmp"}


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    """A server whose array job 0-3 was cancelled, restarted after MinJobAge: the
    elements are in the store only."""
    with LiveServer(
        tmp_path_factory.mktemp("srv"), config_overrides={"min_job_age_seconds": 1}
    ) as live:
        array = call(live, "POST", "/v1/jobs", json={**SCRIPT, "array": "0-3"}).json()["job_id"]
        assert call(live, "DELETE", f"/v1/jobs/{array}").status_code == 200
        time.sleep(1.5)
        live.stop()
        live.start()
        assert call(live, "GET", f"/v1/jobs?id={array}").json()["jobs"] == []  # not held
        yield live, array


def call(server: LiveServer, method: str, path: str, json: object = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.token}"}
    return http.request(method, server.url + path, headers=headers, json=json, timeout=10)


def test_show_finds_an_ended_element_past_the_first(ended: tuple[LiveServer, int]) -> None:
    live, array = ended
    r = call(live, "GET", f"/v1/jobs/{array}_2")
    assert r.status_code == 200, r.text
    assert r.json()["display_id"] == f"{array}_2" and r.json()["state"] == "CANCELLED"
    r = call(live, "GET", f"/v1/jobs/{array}_3/script")
    assert r.status_code == 200 and "echo element" in r.text, r.text


def test_a_history_limit_counts_the_elements_asked_for(ended: tuple[LiveServer, int]) -> None:
    live, array = ended
    r = call(live, "GET", f"/v1/jobs?id={array}_2,{array}_3&history=true&limit=1")
    assert [j["display_id"] for j in r.json()["jobs"]] == [f"{array}_2"], r.text


def test_an_index_range_reads_as_it_does_for_a_held_array(ended: tuple[LiveServer, int]) -> None:
    """``12_[1-2]`` and ``12_[0-3:3]``, taken by every route while the array is held, are
    not refused as invalid ids once it is read from the store."""
    live, array = ended
    r = call(live, "GET", f"/v1/jobs/{array}_[1-2]")
    assert r.status_code == 200 and r.json()["display_id"] == f"{array}_1", r.text
    for ident, shown in ((f"{array}_[1-2]", ["1", "2"]), (f"{array}_[0-3:3]", ["0", "3"])):
        r = call(live, "GET", f"/v1/jobs?id={ident}&history=true")
        assert [j["display_id"] for j in r.json()["jobs"]] == [f"{array}_{i}" for i in shown]
