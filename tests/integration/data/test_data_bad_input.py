"""Bad input to the data plane's server side, against a real server: the ``/v1/data``
routes, ``data`` on submit and ``hal data``. Each refusal is a 400 problem+json naming
the field, or a CLI message with a non-zero exit: never a 500, a traceback, or an answer
about another key or node than the one asked for.

A real cache control plane and two real cache nodes (``root`` ─ ``leaf1``); the HAL
server maps node ``node1`` to ``leaf1`` in ``[data.node_cache]`` (no agent is needed to
stage into it) and defines the dataset ``pair``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cachetree import ControlPlane, Node, start_nodes, wait_for

from hal.config.model import DataConfig
from hal.testing.live import LiveServer, wait_until

SCRIPT = "#!/bin/sh\ntrue\n"


class Plane:
    def __init__(self, tmp: Path) -> None:
        self.cp = ControlPlane(tmp)
        self.nodes = [Node(tmp, self.cp, "root", None, "root"), Node(tmp, self.cp, "leaf1", "root")]
        self.server = LiveServer(
            tmp / "hal",
            config_overrides={
                "data": DataConfig(
                    cache_url=self.cp.url,
                    refresh_seconds=0.5,
                    node_cache={"node1": "leaf1"},
                    datasets={"pair": ("ds:a", "ds:b")},
                )
            },
        )
        self.http: httpx.Client | None = None

    def start(self) -> None:
        self.cp.start()
        start_nodes(self.cp, self.nodes)
        self.server.start()
        self.http = httpx.Client(
            base_url=self.server.url,
            headers={"Authorization": f"Bearer {self.server.token}"},
            timeout=30,
        )
        wait_until(
            lambda: '"instances": 2' in self.server.cli("data", "status", "--json").stdout,
            30,
            message="the data view to know the cache tree",
        )

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        self.server.stop()
        for node in self.nodes:
            node.kill()
        self.cp.kill()

    def get(self, path: str) -> httpx.Response:
        assert self.http is not None
        return self.http.get(path)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> httpx.Response:
        assert self.http is not None
        if raw is not None:
            return self.http.post(path, content=raw, headers={"Content-Type": "application/json"})
        return self.http.post(path, json=body)

    def hal(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``hal ARGS`` with arguments as raw bytes (what a shell passes)."""
        return subprocess.run(
            [
                sys.executable.encode(),
                b"-m",
                b"hal.cli.main",
                *(a.encode("utf-8", "surrogateescape") for a in args),
            ],
            env=self.server.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    p = Plane(tmp_path_factory.mktemp("databad"))
    try:
        p.start()
        yield p
    finally:
        p.stop()


def refused(r: httpx.Response, field: str | None, *words: str, status: int = 400) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body.get("field") == field, body
    for word in words:
        assert word in body["detail"], body


# -- GET /v1/data/locate/{key} ------------------------------------------------------------


def test_locate_refuses_a_nul_character(plane: Plane) -> None:
    refused(plane.get("/v1/data/locate/ds%00a"), "key", "NUL")


def test_locate_takes_utf8_percent_escapes(plane: Plane) -> None:
    ok = plane.get("/v1/data/locate/caf%C3%A9")
    assert ok.status_code == 200 and ok.json()["key"] == "café", ok.text


def test_locate_of_a_dataset_name_says_which_keys_to_locate(plane: Plane) -> None:
    """``@pair`` is a dataset, not a cache key: located literally it would always show
    'no cache holds the key'."""
    refused(plane.get("/v1/data/locate/@pair"), "key", "names a dataset of 2 keys", "ds:a, ds:b")
    refused(plane.get("/v1/data/locate/@nope"), "key", "no dataset named 'nope'", "pair")


def test_locate_without_a_key_says_what_the_route_takes(plane: Plane) -> None:
    refused(plane.get("/v1/data/locate/"), "key", "takes one cache key")


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/v1/data/status?verbose=1", "verbose"),
        ("/v1/data/locate/ds:a?node=node1", "node"),
    ],
)
def test_query_parameters_are_refused_not_ignored(plane: Plane, path: str, param: str) -> None:
    refused(plane.get(path), param, "takes no query parameters")


# -- POST /v1/data/stage ------------------------------------------------------------------


def test_stage_refuses_a_query_parameter(plane: Plane) -> None:
    r = plane.post("/v1/data/stage?dry_run=1", {"keys": ["ds:a"], "node": "node1"})
    refused(r, "dry_run", "takes no query parameters")


def test_stage_refuses_nul_characters_and_lone_surrogates(plane: Plane) -> None:
    refused(
        plane.post("/v1/data/stage", {"keys": ["ok", "d\x00s"], "node": "node1"}), "keys", "NUL"
    )
    refused(plane.post("/v1/data/stage", {"keys": ["ds:a"], "node": "no\x00de1"}), "node")
    lone = b'{"keys": ["\\ud800"], "node": "node1"}'  # json.loads takes it; UTF-8 cannot
    refused(plane.post("/v1/data/stage", raw=lone), "keys", "not UTF-8")
    lone = b'{"keys": ["ds:a"], "node": "n\\udc80"}'  # pydantic's str refuses this one
    refused(plane.post("/v1/data/stage", raw=lone), "node")


def test_stage_refuses_unknown_fields(plane: Plane) -> None:
    """A misspelt field (``nodes`` next to ``node``, ``dry_run``) is not silently dropped."""
    r = plane.post("/v1/data/stage", {"keys": ["ds:a"], "node": "node1", "dry_run": True})
    refused(r, "dry_run", "Extra inputs")


def test_stage_refuses_a_node_name_no_node_can_have(plane: Plane) -> None:
    """Not a 404 that echoes 100 kB back."""
    r = plane.post("/v1/data/stage", {"keys": ["ds:a"], "node": "n" * 100_000})
    refused(r, "node", "should match pattern")
    assert len(r.content) < 1000


def test_stage_expands_a_dataset_name_and_refuses_an_unknown_one(plane: Plane) -> None:
    """``@pair`` stages the dataset's keys, as ``--data @pair`` would; it was staged as
    the literal key '@pair' (held by no cache: 'not found')."""
    assert plane.nodes[0].client().set("ds:a", b"x" * 1000)
    wait_for(lambda: "root" in plane.cp.holders("ds:a"), 10, "ds:a at root")
    r = plane.post("/v1/data/stage", {"keys": ["@pair"], "node": "node1"})
    assert r.status_code == 200, r.text
    assert r.json()["keys"] == ["ds:a", "ds:b"] and r.json()["held"] == ["ds:a"], r.text
    refused(
        plane.post("/v1/data/stage", {"keys": ["@nope"], "node": "node1"}),
        "keys",
        "no dataset named 'nope'",
    )


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"keys": [], "node": "node1"}, "keys", "at least 1"),
        ({"keys": [f"k{i}" for i in range(65)], "node": "node1"}, "keys", "at most 64"),
        ({"keys": "ds:a", "node": "node1"}, "keys", "valid list"),
        ({"keys": [7], "node": "node1"}, "keys[0]", "valid string"),
        ({"keys": ["ds:a"], "node": 10**30}, "node", "valid string"),
        ({"keys": ["ds:a"]}, "node", "Field required"),
        ({"keys": ["ds:a"], "node": ""}, "node", "should match pattern"),
        ({"keys": [""], "node": "node1"}, "keys", "empty key"),
        ({"keys": ["a b"], "node": "node1"}, "keys", "whitespace"),
        ({"keys": ["x" * 600], "node": "node1"}, "keys", "512 bytes"),
        ([1], None, "valid dictionary"),
    ],
)
def test_stage_pins_the_refusals_that_were_already_right(
    plane: Plane, body: Any, field: str | None, words: str
) -> None:
    refused(plane.post("/v1/data/stage", body), field, words)


def test_stage_pins_malformed_json_and_unknown_nodes(plane: Plane) -> None:
    refused(plane.post("/v1/data/stage", raw=b"{bad"), None, "Invalid JSON")
    r = plane.post("/v1/data/stage", {"keys": ["ds:a"], "node": "ghost"})
    refused(r, None, "'ghost' is not a HAL node", status=404)


# -- data on submit -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/jobs/test", "/v1/jobs/het/test"])
def test_submit_routes_refuse_a_data_key_that_is_not_utf8(plane: Plane, path: str) -> None:
    """Routes whose body FastAPI parses (json.loads keeps a lone surrogate) reached
    parse_data_keys, whose ``key.encode()`` raised: a 500."""
    job = f'{{"script": "{SCRIPT.encode("unicode_escape").decode()}", "workdir": "/tmp", '
    job += '"data": ["ok", "\\ud800"]}'
    raw = f'{{"components": [{job}, {job}]}}' if "het" in path else job
    where = "components[0]." if "het" in path else ""
    refused(plane.post(path, raw=raw.encode()), f"{where}data", "not UTF-8")


def test_submit_pins_the_data_refusals_that_were_already_right(plane: Plane) -> None:
    def submit(data: Any) -> httpx.Response:
        return plane.post(
            "/v1/jobs", {"script": SCRIPT, "workdir": "/tmp", "hold": True, "data": data}
        )

    refused(submit(["@nope"]), "data", "no dataset named 'nope'", "[data.datasets]")
    refused(submit([""]), "data", "empty key")
    refused(submit(["d\x00s"]), "data[0]", "NUL")
    refused(submit("ds:a"), "data", "valid array")
    refused(submit([f"k{i}" for i in range(65)]), "data", "at most 64")
    r = submit(["@pair", "ds:a", "ds:a"])
    assert r.status_code == 201, r.text
    jid = r.json()["job_id"]
    assert plane.get(f"/v1/jobs/{jid}").json()["data"] == ["ds:a", "ds:b"]


# -- hal data -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("data", "locate", "ds:\udcff"),
        ("data", "stage", "ds:a,\udcff", "--node", "node1"),
    ],
)
def test_hal_data_refuses_arguments_that_are_not_utf8(plane: Plane, args: tuple[str, ...]) -> None:
    """Bytes the shell passed that are not UTF-8: was a UnicodeEncodeError traceback."""
    r = plane.hal(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("hal: error: ") and "is not UTF-8 text" in r.stderr, r.stderr


def test_hal_data_stage_to_a_node_name_no_node_can_have(plane: Plane) -> None:
    r = plane.hal("data", "stage", "ds:a", "--node", "node\udcff")
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    assert r.stderr.startswith("hal: error: node: "), r.stderr


def test_hal_data_with_a_dataset_name(plane: Plane) -> None:
    r = plane.hal("data", "locate", "@pair")
    assert r.returncode == 2 and "names a dataset of 2 keys" in r.stderr, (r.stdout, r.stderr)
    r = plane.hal("data", "stage", "@nope", "--node", "node1")
    assert r.returncode == 2 and "no dataset named 'nope'" in r.stderr, (r.stdout, r.stderr)
    r = plane.hal("data", "stage", "@pair", "--node", "node1", "--json")
    assert '"ds:b"' in r.stdout, (r.stdout, r.stderr)
