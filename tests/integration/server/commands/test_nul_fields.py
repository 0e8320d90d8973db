"""A NUL character (``\\u0000``) in a job's fields is refused as the user's error, naming
the field, on both stores: PostgreSQL's text columns cannot hold one, and the insert
failed there with a 500 (the script and the name) or stored it (the rest)."""

from __future__ import annotations

import pytest

from hal.testing import http
from hal.testing.live import LiveServer

SCRIPT = "#!/bin/sh\necho hi\n"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"script": "#!/bin/sh\necho \x00\n"}, "script"),
        ({"script": SCRIPT, "name": "a\x00b"}, "name"),
        ({"script": SCRIPT, "comment": "c\x00"}, "comment"),
        ({"script": SCRIPT, "environment": {"A": "x\x00"}}, "environment.A"),
        ({"script": SCRIPT, "exclude": ["n1", "n\x002"]}, "exclude[1]"),
        ({"script": SCRIPT, "script_args": ["a", "b\x00"]}, "script_args[1]"),
    ],
)
def test_a_nul_in_a_submission_is_refused_naming_the_field(
    each_store_shared: LiveServer, body: dict[str, object], field: str
) -> None:
    live = each_store_shared  # its tests store no job: each is refused
    auth = {"Authorization": f"Bearer {live.token}"}
    r = http.post(live.url + "/v1/jobs", json=body, headers=auth, timeout=10)
    assert r.status_code == 400, r.text
    problem = r.json()
    assert problem["field"] == field
    assert "NUL character" in problem["detail"]
    batch = http.post(live.url + "/v1/jobs/batch", json={"jobs": [body]}, headers=auth)
    assert (batch.status_code, batch.json()["field"]) == (400, f"jobs[0].{field}")
    listed = http.get(live.url + "/v1/jobs", headers=auth).json()
    assert listed["jobs"] == []  # nothing half-stored


def test_a_nul_in_an_update_is_refused(each_store: LiveServer) -> None:
    auth = {"Authorization": f"Bearer {each_store.token}"}
    job = http.post(
        each_store.url + "/v1/jobs", json={"script": SCRIPT, "hold": True}, headers=auth
    ).json()["job_id"]
    r = http.patch(f"{each_store.url}/v1/jobs/{job}", json={"name": "x\x00"}, headers=auth)
    assert (r.status_code, r.json()["field"]) == (400, "name")
    shown = http.get(f"{each_store.url}/v1/jobs/{job}", headers=auth).json()
    assert "\x00" not in shown["name"]


@pytest.mark.parametrize("name", ["", "A=B"])
def test_an_environment_name_a_process_cannot_take_is_refused(
    each_store_shared: LiveServer, name: str
) -> None:
    """A name that is empty or holds '=' cannot reach the job's environment; the job
    failed on the node."""
    auth = {"Authorization": f"Bearer {each_store_shared.token}"}
    body = {"script": SCRIPT, "environment": {name: "x"}}
    r = http.post(each_store_shared.url + "/v1/jobs", json=body, headers=auth, timeout=10)
    assert (r.status_code, r.json()["field"]) == (400, "environment")
    assert repr(name) in r.json()["detail"]
