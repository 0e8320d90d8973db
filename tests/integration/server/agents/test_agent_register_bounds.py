"""An agent's registration is refused (400, naming the field) when a value cannot be
stored: on PostgreSQL a GPU model or address longer than its column, or more CPUs than
its INTEGER holds, failed the insert with a 500 (SQLite stored them); and a feature no
job's --constraint could name (empty, with a space or an &, a NUL) or too many of them."""

from __future__ import annotations

import itertools

import pytest

from hal.testing import http
from hal.testing.live import LiveServer

# one server per store serves every case (``each_store_shared``): each registers its own node
NODE_NUMBERS = itertools.count(1)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"gpus": 1, "gpu_model": "x" * 257}, "gpu_model"),
        ({"address": "http://" + "a" * 600}, "address"),
        ({"gpus": 1, "gpu_model": "NVIDIA\x00"}, "gpu_model"),
        ({"topology_labels": {"rack": "r\x001"}}, "topology_labels.rack"),
        ({"cpus": 2**31}, "cpus"),
        ({"features": [""]}, "features[0]"),
        ({"features": ["ib", "a100 ib"]}, "features[1]"),
        ({"features": ["a&b"]}, "features[0]"),
        ({"features": ["ib\x00"]}, "features[0]"),
        ({"features": [f"f{i}" for i in range(65)]}, "features"),
    ],
)
def test_a_registration_that_cannot_be_stored_is_refused(
    each_store_shared: LiveServer, extra: dict[str, object], field: str
) -> None:
    live = each_store_shared
    name = f"n{next(NODE_NUMBERS)}"  # a node the server has not seen, as on a fresh one
    auth = {"Authorization": f"Bearer {live.token}"}
    body = {"node": name, "cpus": 2, "memory_bytes": 2**31, **extra}
    r = http.post(live.url + "/v1/agent/register", json=body, headers=auth, timeout=10)
    assert (r.status_code, r.json()["field"]) == (400, field)
    ok = {"node": name, "cpus": 2**31 - 1, "memory_bytes": 2**31, "gpus": 1, "gpu_model": "x" * 256}
    ok["features"] = ["a100", "ib", "nvme:3.2T", "x" * 128]
    registered = http.post(live.url + "/v1/agent/register", json=ok, headers=auth)
    assert registered.status_code == 200
    node = http.get(f"{live.url}/v1/nodes/{name}", headers=auth).json()
    assert node["features"] == ok["features"]
