"""Bad input to the REST API against a real server: every refusal is a 4xx in HAL's
problem+json that names the field and says what to send, never a 500 with a traceback
(numbers the database or the clock cannot hold, bodies FastAPI did not parse, routes
and methods that do not exist)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from json import dumps

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer

SCRIPT = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp"}
HUGE = 2**70


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv")) as live:
        yield live


def call(
    server: LiveServer,
    method: str,
    path: str,
    *,
    json: object = None,
    content: bytes | None = None,
    content_type: str = "application/json",
) -> httpx.Response:
    if json is not None:
        content = dumps(json).encode()  # NaN and Infinity as Python writes them
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": content_type}
    return http.request(method, server.url + path, headers=headers, content=content, timeout=10)


def refused(r: httpx.Response, status: int, field: str | None, *words: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json", r.text
    body = r.json()
    assert body.get("field") == field, body
    for word in words:
        assert word in body["detail"], body


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"time_limit_seconds": 2**63}, "time_limit_seconds"),
        ({"begin_time": 1e12}, "begin_time"),  # the year 33658: the job waited forever
        ({"dependency": f"afterok:{HUGE}"}, "dependency"),
    ],
)
def test_out_of_range_submissions_are_refused(
    server: LiveServer, extra: dict[str, object], field: str
) -> None:
    refused(call(server, "POST", "/v1/jobs", json={**SCRIPT, **extra}), 400, field)
    r = call(server, "POST", "/v1/jobs/batch", json={"jobs": [{**SCRIPT, **extra}]})
    assert r.status_code == 400 and r.json()["field"].endswith(field), r.text


@pytest.mark.parametrize(
    ("path", "args", "field", "words"),
    [
        ("/v1/jobs", ["a"] * 4097, "script_args", ()),
        ("/v1/jobs", ["x" * 70_000, "y" * 70_000], "script_args", ("128 KiB", "in a file")),
        # (the fast path's JSON parser refuses it already, as for any field)
        ("/v1/jobs/test", ["ok", "\ud800"], "script_args[1]", ("lone surrogate",)),
    ],
)
def test_script_arguments_no_node_could_pass_are_refused(
    server: LiveServer, path: str, args: list[str], field: str, words: tuple[str, ...]
) -> None:
    """An execve on the node takes at most 128 KiB in one argument, and only text it can
    encode: such arguments failed the job there, long after the submission."""
    r = call(server, "POST", path, json={**SCRIPT, "script_args": args})
    refused(r, 400, field, *words)


@pytest.mark.parametrize("umask", ["999", "0o22", "", "1777"])
def test_a_umask_that_is_not_three_or_four_octal_digits_is_refused(
    server: LiveServer, umask: str
) -> None:
    r = call(server, "POST", "/v1/jobs", json={**SCRIPT, "umask": umask})
    refused(r, 400, "umask", "octal")


def test_a_dependency_on_a_huge_id_says_the_job_does_not_exist(server: LiveServer) -> None:
    r = call(server, "POST", "/v1/jobs", json={**SCRIPT, "dependency": f"afterok:{HUGE}"})
    refused(r, 400, "dependency", f"job {HUGE} does not exist")


def test_an_infinite_begin_time_is_refused(server: LiveServer) -> None:
    body = {**SCRIPT, "begin_time": float("inf")}
    refused(call(server, "POST", "/v1/jobs", json=body), 400, "begin_time")


def test_updates_out_of_the_database_range_are_refused(server: LiveServer) -> None:
    job = call(server, "POST", "/v1/jobs", json=SCRIPT).json()["job_id"]
    for field in ("time_limit_seconds", "priority"):
        r = call(server, "PATCH", f"/v1/jobs/{job}", json={field: 2**63})
        refused(r, 400, field, "less than or equal to")


@pytest.mark.parametrize("field", ["cpus", "memory_bytes", "gpus"])
def test_an_agent_with_impossible_resources_is_refused(server: LiveServer, field: str) -> None:
    body = {"node": "huge", "cpus": 1, "memory_bytes": 1, field: HUGE}
    refused(call(server, "POST", "/v1/agent/register", json=body), 400, field)


@pytest.mark.parametrize(
    "times",
    [
        {"start_time": 1e300, "duration_seconds": 60},
        {"end_time": -1e300},
        {"start_time": float("nan"), "duration_seconds": 60},
    ],
)
def test_reservation_times_a_clock_cannot_show_are_refused(
    server: LiveServer, times: dict[str, float]
) -> None:
    body = {"name": "r1", "node_count": 1, "users": ["admin"], **times}
    r = call(server, "POST", "/v1/reservations", json=body)
    refused(r, 400, next(iter(times)))


def test_an_unknown_user_field_is_refused_not_ignored(server: LiveServer) -> None:
    r = call(server, "POST", "/v1/users", json={"name": "typo", "admn": True})
    refused(r, 400, "admn", "Extra inputs")
    names = [u["name"] for u in call(server, "GET", "/v1/users").json()["users"]]
    assert "typo" not in names


def test_a_user_name_with_a_lone_surrogate_is_refused_not_a_500(server: LiveServer) -> None:
    """JSON may escape a lone surrogate (``\\ud800``); the message naming the refused user
    name could not be encoded: a plain-text 500."""
    r = call(server, "POST", "/v1/users", content=b'{"name": "al\\ud800ce"}')
    refused(r, 400, "name", "is not a user name", "al\\ud800ce")


@pytest.mark.parametrize("path", ["/v1/jobs/1", "/v1/users", "/v1/jobs/het", "/v1/jobs/test"])
def test_a_body_not_in_utf8_is_invalid_json(server: LiveServer, path: str) -> None:
    """FastAPI's own refusal ("There was an error parsing the body", code http_error) said
    neither what was wrong nor what to send; the fast paths already said "Invalid JSON"."""
    method = "PATCH" if path == "/v1/jobs/1" else "POST"
    r = call(server, method, path, content=b'{"name": "caf\xe9"}')  # Latin-1
    refused(r, 400, None, "Invalid JSON", "UTF-8")
    assert r.json()["code"] == "invalid_request"


def test_malformed_json_says_so(server: LiveServer) -> None:
    r = call(server, "PATCH", "/v1/jobs/1", content=b'{"name": ')
    refused(r, 400, None, "Invalid JSON", "at character 9")
    # the fast paths (pydantic reads the bytes itself): a lone surrogate was a 500
    for path in ("/v1/jobs", "/v1/jobs/batch", "/v1/agent/register"):
        r = call(server, "POST", path, content=b'{"script": "#!/bin/sh\\n", "name": "\\ud800"}')
        refused(r, 400, None, "Invalid JSON", "hex escape", "line 1 column")
        refused(call(server, "POST", path, content=b'{"script": '), 400, None, "Invalid JSON")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/users", {"name": "zed"}),
        ("/v1/jobs", {"script": "#!/bin/sh\ntrue\n", "name": "as-form"}),  # the fast paths
        ("/v1/jobs/batch", {"jobs": [{"script": "#!/bin/sh\ntrue\n", "name": "as-form"}]}),
        ("/v1/agent/register", {"node": "as-form", "cpus": 1, "memory_bytes": 2**30}),
    ],
)
@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", ""])
def test_a_body_not_sent_as_json_asks_for_json(
    server: LiveServer, path: str, body: dict[str, object], content_type: str
) -> None:
    """Every route refuses a body not declared JSON (curl -d's default is a form), the
    fast paths (``api/fastpath.read_body``) as FastAPI's own routes do, and stores nothing."""
    r = call(server, "POST", path, content=dumps(body).encode(), content_type=content_type)
    refused(r, 400, None, "Content-Type: application/json")
    jobs = call(server, "GET", "/v1/jobs", content=None).json()["jobs"]
    assert not [j for j in jobs if j["name"] == "as-form"]
    assert "as-form" not in [n["name"] for n in call(server, "GET", "/v1/nodes").json()["nodes"]]


def test_json_with_a_charset_or_a_json_suffix_is_json(server: LiveServer) -> None:
    for media in ("application/json; charset=utf-8", "application/vnd.hal+json"):
        r = call(
            server, "POST", "/v1/jobs", json={"script": "#!/bin/sh\ntrue\n"}, content_type=media
        )
        assert r.status_code == 201, r.text


def test_unknown_paths_and_methods_are_problem_json(server: LiveServer) -> None:
    refused(call(server, "GET", "/v1/nope"), 404, None, "no such path /v1/nope")
    r = call(server, "PUT", "/v1/jobs")
    refused(r, 405, None, "PUT is not allowed on /v1/jobs", "/docs")
    assert r.headers["allow"]


def test_a_huge_array_index_range_answers_at_once(server: LiveServer) -> None:
    """``12_[0-999999999999]`` is looked up without listing its indices: listed, they
    held the server's event loop and filled its memory (every request waited)."""
    array = call(server, "POST", "/v1/jobs", json={**SCRIPT, "array": "0-3"}).json()["job_id"]
    huge = f"{array}_[2-999999999999]"
    r = call(server, "GET", f"/v1/jobs/{huge}")
    assert r.status_code == 200 and r.json()["display_id"] == f"{array}_2", r.text
    listed = call(server, "GET", f"/v1/jobs?id={huge}").json()["jobs"]
    assert [j["display_id"] for j in listed] == [f"{array}_2", f"{array}_3"]
    r = call(server, "DELETE", f"/v1/jobs/{array}_[0-999999999999:2]")
    assert r.status_code == 200 and len(r.json()["job_ids"]) == 2, r.text


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("param", ["start_after", "end_before"])
def test_a_time_filter_that_is_not_a_number_is_refused(
    server: LiveServer, param: str, value: str
) -> None:
    """`GET /v1/jobs?history=true&start_after=nan` listed every job (SQLite compares
    nothing with NaN as "no filter"); a time that is no number is refused, naming it."""
    r = call(server, "GET", f"/v1/jobs?history=true&{param}={value}")
    refused(r, 400, param)


def test_a_405_names_every_method_of_the_path(server: LiveServer) -> None:
    """HAL has one route per method: Starlette's 405 named the first route's alone
    (OPTIONS /v1/jobs/1 answered ``Allow: GET``, hiding PATCH and DELETE); the methods
    are the document's for the path."""
    r = call(server, "OPTIONS", "/v1/jobs/1")
    refused(r, 405, None, "OPTIONS is not allowed on /v1/jobs/1; it takes DELETE, GET")
    assert r.headers["allow"] == "DELETE, GET, PATCH"
    # /v1/jobs/batch also fits /v1/jobs/{job_id}: the literal path is the resource
    assert call(server, "OPTIONS", "/v1/jobs/batch").headers["allow"] == "POST"
    assert call(server, "PUT", "/v1/users/me").headers["allow"] == "GET"


@pytest.mark.parametrize("ids", ["0" * 20_000, "1,99999999999999999999"])
def test_feedback_job_ids_past_the_database_are_refused(server: LiveServer, ids: str) -> None:
    """``jobs=`` of 20,000 digits was a 500 (Python's int() refuses over 4,300 digits);
    on PostgreSQL an id past BIGINT was one too."""
    refused(call(server, "GET", f"/v1/feedback?jobs={ids}"), 400, "jobs", "below 2^63")


@pytest.mark.parametrize(
    ("change", "field"),
    [({"max_time_seconds": 2**90}, "max_time_seconds"), ({"max_nodes": 2**40}, "max_nodes")],
)
def test_partition_limits_past_the_database_are_refused(
    server: LiveServer, change: dict[str, int], field: str
) -> None:
    """PostgreSQL refused the write (BIGINT, INTEGER): a 500 ``internal_error``."""
    refused(call(server, "PATCH", "/v1/partitions/debug", json=change), 400, field, "less than")


def test_a_request_the_http_parser_refuses_gets_problem_json(server: LiveServer) -> None:
    """A URL over 65,535 bytes (httptools cannot index it) got uvicorn's text/plain
    "Invalid HTTP request received."; now HAL's problem+json saying what to do."""
    target = "/v1/feedback?jobs=" + "1," * 40_000 + "1"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"content-type: application/problem+json" in head.lower(), head
    problem = json.loads(body)
    assert problem["code"] == "invalid_request" and "65,535 bytes" in problem["detail"], problem


def test_the_openapi_document_says_what_errors_look_like(server: LiveServer) -> None:
    """Each operation documents HAL's 400 (not FastAPI's 422, which HAL never sends) and
    its refusals as Problems; the event stream, job output and artifacts their own media
    types (each was documented as JSON), a publish both its 201 and its 200: a client
    generated from the document, and the fuzzing run, rely on it."""
    doc = http.get(f"{server.url}/openapi.json", timeout=120).json()  # built at first ask
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            if path.startswith("/v1/"):
                for status in ("401", "403", "404", "409", "413", "429", "503"):
                    media = responses[status]["content"]["application/problem+json"]
                    assert media["schema"] == problem, (method, path, status)
    assert doc["paths"]["/v1/jobs"]["post"]["responses"]["400"]["content"]
    events = doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    assert set(events) == {"text/event-stream"} and "itemSchema" in events["text/event-stream"]
    output = doc["paths"]["/v1/jobs/{job_id}/output"]["get"]["responses"]["200"]["content"]
    assert set(output) == {"text/plain"}
    for path in ("/v1/artifacts/{name}/{version}/content", "/v1/agent/artifacts/{sha256}"):
        content = doc["paths"][path]["get"]["responses"]["200"]["content"]
        assert set(content) == {"application/octet-stream"}, path
    # publishing a version again with the same content is a 200, a new one a 201
    assert {"200", "201"} <= set(doc["paths"]["/v1/artifacts/{name}/{version}"]["put"]["responses"])
