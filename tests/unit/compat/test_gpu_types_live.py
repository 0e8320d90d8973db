"""A GPU type as users write it (``h100``) against the model an agent reports from NVML
("NVIDIA H100 80GB HBM3"): accepted at submit, shown by sinfo as Slurm names an
autodetected type, and a type no node has refused with that name listed. Against a real
control plane with a node registered through the agent channel (nothing runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing import http
from hal.testing.live import LiveServer

NVML_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv")) as live:
        registered = http.post(
            live.url + "/v1/agent/register",
            headers={"Authorization": f"Bearer {live.token}"},
            json={
                "node": "g1",
                "cpus": 8,
                "memory_bytes": 2**34,
                "gpus": 2,
                "gpu_model": NVML_NAME,
            },
            timeout=10,
        )
        assert registered.status_code == 200, registered.text
        yield live


@pytest.mark.parametrize("option", ["--gres=gpu:h100:1", "--gpus=nvidia_h100_80gb_hbm3:2"])
def test_a_short_or_shown_type_is_accepted(server: LiveServer, tmp_path: Path, option: str) -> None:
    done = server.cli("sbatch", option, "--hold", "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Submitted batch job ")


def test_sinfo_shows_the_type_to_write(server: LiveServer, tmp_path: Path) -> None:
    done = server.cli("sinfo", "-h", "-N", "-o", "%N %G", cwd=tmp_path)
    assert done.stdout.split() == ["g1", "gpu:nvidia_h100_80gb_hbm3:2"]


def test_a_type_no_node_has_lists_the_types_to_write(server: LiveServer, tmp_path: Path) -> None:
    done = server.cli("sbatch", "--gres=gpu:a100:1", "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "sbatch: error: Batch job submission failed: Invalid generic resource (gres) "
        "specification: no node has GPU type 'a100' (the cluster's types: "
        "nvidia_h100_80gb_hbm3)\n"
    )
