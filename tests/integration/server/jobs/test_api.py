"""The REST API's edges against a real server: auth, validation, limits, events."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hal.core.errors import InvalidRequest, NotFound, Unauthenticated
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

TRUE = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(
        tmp_path_factory.mktemp("api"), config_overrides={"max_request_bytes": 200_000}
    ) as srv:
        yield srv


def test_requests_without_a_valid_token_are_refused(server: LiveServer) -> None:
    r = http.get(server.url + "/v1/jobs")
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"
    assert "Authorization: Bearer" in r.json()["detail"]
    with server.client("hal_not-a-token") as c, pytest.raises(Unauthenticated):
        c.jobs()


def test_validation_errors_name_the_field(server: LiveServer) -> None:
    """A malformed job gets a 400 that says which field and why, and nothing is stored."""
    headers = {"Authorization": f"Bearer {server.token}"}
    body = {"jobs": [{"script": "#!/bin/sh\n"}, {"script": "x", "cpus_per_task": 0}]}
    r = http.post(server.url + "/v1/jobs/batch", json=body, headers=headers)
    assert r.status_code == 400
    assert r.json()["field"] == "jobs[1].cpus_per_task"  # as to_spec names fields
    with server.client() as c:
        before = len(c.jobs(history=True))
        with pytest.raises(InvalidRequest, match="empty") as err:
            c.submit_many([TRUE, dataclasses.replace(TRUE, script="   ")])
        assert err.value.field == "jobs[1].script"
        assert len(c.jobs(history=True)) == before, "a rejected batch stored some jobs"


def test_oversized_request_gets_413(server: LiveServer) -> None:
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    big = '{"script": "' + "x" * 300_000 + '"}'
    r = http.post(server.url + "/v1/jobs", content=big, headers=headers)
    assert r.status_code == 413
    assert "split a large batch" in r.json()["detail"]


def test_unknown_job_is_404_and_bad_id_is_400(server: LiveServer) -> None:
    with server.client() as c:
        with pytest.raises(NotFound, match="Invalid job id"):
            c.job(99999)
        with pytest.raises(InvalidRequest):
            c.job("12_x")


def test_a_bad_job_id_names_the_same_field_in_memory_and_in_the_history(
    server: LiveServer,
) -> None:
    """A malformed job id is refused naming ``job_id`` (as the ``/v1/jobs/{job_id}``
    routes call it) whether the server's memory or the stored history was asked: the
    history lookup said ``id``, the lookup in memory ``job_id``."""
    headers = {"Authorization": f"Bearer {server.token}"}
    for query in ("/v1/jobs/12_x", "/v1/jobs?id=12_x", "/v1/jobs?id=12_x&history=true"):
        r = http.get(server.url + query, headers=headers)
        assert (r.status_code, r.json().get("field")) == (400, "job_id"), query


def test_batch_of_thousands_is_accepted_in_one_request(server: LiveServer) -> None:
    with server.client() as c:
        results = c.submit_many([TRUE] * 2000)
        ids = [r.job_id for r in results]
        assert ids == list(range(ids[0], ids[0] + 2000))
        listed = {j.id for j in c.jobs(states=["PD"])}
        assert set(ids) <= listed


def test_event_stream_resumes_after_the_last_event_id(server: LiveServer) -> None:
    """A client that reconnects with Last-Event-ID gets exactly what it missed."""
    with server.client() as c:
        first = c.submit(TRUE).job_id
        events = list(c.events(0, follow=False))
        mark = next(e.id for e in events if e.job_id == first)
        second = c.submit(TRUE).job_id
        c.cancel(second)
        resumed = list(c.events(mark, follow=False))
    assert all(e.id > mark for e in resumed)
    assert [(e.kind, e.job_id) for e in resumed if e.job_id == second] == [
        ("job.submitted", second),
        ("job.finished", second),
    ]
    r = http.get(
        server.url + "/v1/events",
        params={"follow": "false"},
        headers={"Authorization": f"Bearer {server.token}", "Last-Event-ID": str(mark)},
    )
    ids = [int(line[4:]) for line in r.text.splitlines() if line.startswith("id: ")]
    assert ids and min(ids) > mark


def test_openapi_document_lists_the_job_endpoints(server: LiveServer) -> None:
    # the document is built at the first ask, which takes seconds on a loaded machine
    doc = http.get(server.url + "/openapi.json", timeout=120).json()
    paths = doc["paths"]
    for path in ("/v1/jobs", "/v1/jobs/batch", "/v1/jobs/{job_id}", "/v1/events", "/v1/nodes"):
        assert path in paths
    batch = paths["/v1/jobs/batch"]["post"]["requestBody"]["content"]["application/json"]
    assert batch["schema"]["$ref"].endswith("JobBatchSubmit")
    upload = paths["/v1/artifacts/{name}/{version}"]["put"]["requestBody"]["content"]
    assert upload["application/octet-stream"]["schema"]["format"] == "binary"  # the file
    refs: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    refs.add(str(value).rsplit("/", 1)[-1])
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    schemas = doc["components"]["schemas"]
    assert sorted(r for r in refs if r not in schemas) == [], "dangling $ref in OpenAPI"
    assert {"JobSubmit", "AgentSync", "AgentRegister"} <= set(schemas)


def test_hold_release_and_update(server: LiveServer, tmp_path: Path) -> None:
    with server.client() as c:
        jid = c.submit(dataclasses.replace(TRUE, hold=False, begin_time=4102444800.0))
        c.hold(jid.job_id)
        assert c.job(jid.job_id).held
        c.release(jid.job_id)
        info = c.job(jid.job_id)
        assert not info.held
        from hal.wire.jobs import JobUpdate

        updated = c.update_job(jid.job_id, JobUpdate(time_limit_seconds=600, name="renamed"))
        assert (updated.time_limit_seconds, updated.name) == (600, "renamed")
        c.cancel(jid.job_id)


def test_an_administrators_uhold_is_a_hold_the_owner_may_release(server: LiveServer) -> None:
    """Slurm's ``scontrol uhold``: an administrator holds a user's job so that the user
    may release it (``hold`` would need an administrator to release it). It was an admin
    hold: the user's ``scontrol release`` was refused."""
    alice = server.add_users("alice")["alice"]
    with server.client(alice) as c:
        jid = str(c.submit(dataclasses.replace(TRUE, hold=False, begin_time=4102444800.0)).job_id)
        out = server.cli("scontrol", "uhold", jid)  # as the administrator
        assert out.returncode == 0, out.stderr
        assert (c.job(jid).held, c.job(jid).reason) == (True, "JobHeldUser")
        out = server.cli("scontrol", "release", jid, token=alice)
        assert out.returncode == 0, out.stderr
        assert not c.job(jid).held
        server.cli("scontrol", "hold", jid)  # an administrator's hold stays his to lift
        assert c.job(jid).reason == "JobHeldAdmin"
        assert server.cli("scontrol", "release", jid, token=alice).returncode != 0
        c.cancel(jid)


def test_a_submission_sent_again_with_its_idempotency_key_gives_the_same_jobs(
    server: LiveServer,
) -> None:
    """The three submit routes take an ``Idempotency-Key``: sent again by the same user
    with the same body, the answer is the first one's and nothing more is stored; another
    body under that key is a 409; a malformed key a 400 naming the header."""
    auth = {"Authorization": f"Bearer {server.token}"}
    one = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "hold": True}
    with server.client() as c:
        before = len(c.jobs(history=True))
    for path, body in (
        ("/v1/jobs", one),
        ("/v1/jobs/batch", {"jobs": [one, {**one, "array": "0-2"}]}),
        ("/v1/jobs/het", {"components": [one, one]}),
    ):
        headers = {**auth, "Idempotency-Key": f"key-of {path}"}
        first = http.post(server.url + path, json=body, headers=headers)
        again = http.post(server.url + path, json=body, headers=headers)
        assert first.status_code == again.status_code == 201, first.text
        assert again.json() == first.json()
        changed = json.dumps(body).replace("true", "false", 1)  # another script
        typed = {**headers, "Content-Type": "application/json"}
        other = http.post(server.url + path, content=changed, headers=typed)
        assert other.status_code == 409
        assert "use a new key for a new submission" in other.json()["detail"]
    with server.client() as c:
        assert len(c.jobs(history=True)) == before + 1 + 4 + 2
    bad = http.post(
        server.url + "/v1/jobs", json=one, headers={**auth, "Idempotency-Key": "x" * 256}
    )
    assert bad.status_code == 400 and bad.json()["field"] == "Idempotency-Key"


def test_a_pending_jobs_reason_is_the_same_in_the_queue_and_in_the_history(
    server: LiveServer,
) -> None:
    """A job behind a dependency that can never be met: ``squeue`` (the server's memory)
    said DependencyNeverSatisfied while ``sacct`` and ``GET /v1/jobs?history=true`` (the
    stored row) said WaitingForScheduling, the reason it was stored with at submit."""
    with server.client() as c:
        target = c.submit(TRUE).job_id
        c.cancel(target)
        dep = dataclasses.replace(TRUE, hold=False, dependency=f"afterok:{target}")
        jid = str(c.submit(dep).job_id)
        wait_until(
            lambda: c.job(jid).reason == "DependencyNeverSatisfied",
            message="the pass to judge the dependency",
        )
        assert [j.reason for j in c.jobs(ids=[jid], history=True)] == ["DependencyNeverSatisfied"]
        out = server.cli("sacct", "-n", "-X", "-j", jid, "-o", "Reason%30")
        assert out.stdout.split() == ["DependencyNeverSatisfied"], out.stderr
        c.cancel(jid)


def test_scontrol_show_topology_without_a_topology(server: LiveServer) -> None:
    """Slurm's message on a cluster without topology.conf, on stderr, exit status 0."""
    out = server.cli("scontrol", "show", "topology")
    assert (out.returncode, out.stdout) == (0, "")
    assert out.stderr == "scontrol: error: No topology information available\n"


def test_a_client_gone_before_its_body_is_no_server_error(
    server: LiveServer, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """An agent or a command killed while sending its body: the server logged a
    traceback ("Exception in ASGI application") for each; it is no server error."""
    url = httpx.URL(server.url)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="hal.api"):
        for path in ("/v1/jobs", "/v1/agent/node1/sync"):
            with socket.create_connection((url.host, url.port or 80)) as sock:
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                    f"{server.token}\r\nContent-Type: application/json\r\n"
                    "Content-Length: 1000\r\n\r\n"
                )
                sock.sendall(head.encode() + b'{"name":')
            wait_until(
                lambda p=path: f"client went away during POST {p}" in caplog.text,
                message="the server to see the client go",
            )
    err = capfd.readouterr().err
    assert "Exception in ASGI application" not in err and "ClientDisconnect" not in err, err
