"""Smoke test for src/hal/bench/slurm_peer.py: a real private Slurm cluster, tiny workloads."""

from __future__ import annotations

import os
import subprocess
from types import ModuleType

import pytest

from hal.bench import slurm_peer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.slurm_peer,
    pytest.mark.timeout(600),  # may include apt-get install slurm-wlm on a fresh machine
    pytest.mark.skipif(os.geteuid() != 0, reason="the Slurm daemons need root"),
]


def _load() -> ModuleType:
    return slurm_peer


def _leftovers() -> str:
    res = subprocess.run(
        ["pgrep", "-af", "hal-slurm-peer-"], capture_output=True, text=True, check=False
    )
    return res.stdout.strip()


def test_small_run_measures_and_cleans_up() -> None:
    peer = _load()
    result = peer.run_slurm_peer(jobs=5, array=5, latency_repeats=2, timeout_s=120)
    assert result["ok"], result
    assert result["system"] == "slurm"
    assert str(result["version"]).startswith("22.")
    assert result["cpus"] == 64
    for key in ("jobs_1000_s", "array_1000_s", "single_job_latency_p50_s", "sbatch_p50_s"):
        assert isinstance(result[key], float) and result[key] > 0, key
    assert result["jobs_1000_states"] == {"COMPLETED": 5}
    assert result["array_1000_states"] == {"COMPLETED": 5}
    assert _leftovers() == ""


def test_unknown_workload_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown workloads"):
        _load().run_slurm_peer(workloads=["nope"])
