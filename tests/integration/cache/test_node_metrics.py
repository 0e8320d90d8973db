"""``hal cache node --metrics-listen``: a real node serves its own ``/metrics``, parsed
with prometheus-client's parser and checked by ``promtool`` when it is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from cachetree import ControlPlane, Node, free_port, start_nodes
from prometheus_client.parser import text_string_to_metric_families

from hal.testing import http


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def at(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_a_node_serves_its_own_hits_misses_bytes_and_memory(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path)
    root_port, leaf_port = free_port(), free_port()
    root = Node(tmp_path, cp, "root", None, "root", "--metrics-listen", f"127.0.0.1:{root_port}")
    leaf = Node(
        tmp_path, cp, "leaf", "root", "leaf", "--max-bytes", "1000000",
        "--metrics-listen", f"127.0.0.1:{leaf_port}",
    )  # fmt: skip
    try:
        cp.start()
        start_nodes(cp, [root, leaf])
        root.client().set("k", b"v" * 1000)
        leaf_client = leaf.client()
        assert leaf_client.get("k") == b"v" * 1000  # a miss pulled from the root
        assert leaf_client.get("k") == b"v" * 1000  # then a hit
        assert leaf_client.get("nothing") is None  # a miss nobody can answer
        m = scrape(leaf_port)
        assert m[("hal_cache_hits_total", at(instance="leaf", tier="leaf"))] == 1
        assert m[("hal_cache_misses_total", at(instance="leaf", tier="leaf", result="pulled"))] == 1
        assert (
            m[("hal_cache_misses_total", at(instance="leaf", tier="leaf", result="not_found"))] == 1
        )
        assert m[("hal_cache_bytes_served_total", at(instance="leaf", tier="leaf"))] == 2000
        assert (
            m[("hal_cache_bytes_moved_total", at(instance="leaf", tier="leaf", source="parent"))]
            == 1000
        )
        assert m[("hal_cache_node_keys", at(instance="leaf"))] == 1
        assert m[("hal_cache_node_memory_bytes", at(instance="leaf", state="max"))] == 1_000_000
        assert m[("hal_cache_node_control_plane_up", at(instance="leaf"))] == 1
        # the root served the leaf's pull: a hit there, bytes served, nothing moved in
        r = scrape(root_port)
        assert r[("hal_cache_hits_total", at(instance="root", tier="root"))] == 1
        assert r[("hal_cache_bytes_served_total", at(instance="root", tier="root"))] == 1000
        assert http.get(f"http://127.0.0.1:{leaf_port}/other", timeout=5).status_code == 404
        promtool = shutil.which("promtool")
        if promtool:
            text = http.get(f"http://127.0.0.1:{leaf_port}/metrics", timeout=5).text
            check = subprocess.run(
                [promtool, "check", "metrics"],
                check=False,
                input=text,
                capture_output=True,
                text=True,
            )
            assert check.returncode == 0, check.stdout + check.stderr
    finally:
        leaf.kill()
        root.kill()
        cp.kill()
