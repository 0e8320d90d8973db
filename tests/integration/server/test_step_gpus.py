"""``srun --gpus=N`` in a job of more GPUs: the step gets GPUs of its own, as Slurm's
(``SLURM_STEP_GPUS``, ``CUDA_VISIBLE_DEVICES``), its node's agent denies it the job's
others, two such steps running at once get different ones, and one that finds too few
free waits for them with Slurm's "step creation temporarily disabled" lines
(docs/slurm-checks.md, "srun steps with GPUs of their own"). A step asking for none
keeps the job's. The stand-in NVML's two GPUs, look-alike device files and probe of
``test_gpu_isolation``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_gpu_isolation import (  # noqa: F401  (gpu_node: a fixture)
    SRUN,
    gpu_node,
    host_can_isolate,
    output,
)

from hal.testing.live import LiveServer

pytestmark = pytest.mark.skipif(bool(host_can_isolate()), reason=host_can_isolate() or "-")


def test_steps_get_their_own_gpus_and_wait_for_them(
    gpu_node: tuple[LiveServer, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    server, data = gpu_node
    probe = f"{sys.executable} {data / 'probe.py'} {data / 'nvidia0'} {data / 'nvidia1'}"

    def step(options: str, name: str, sleep: int = 0) -> str:
        """A step printing its name, the probe's line and SLURM_STEP_GPUS, then waiting."""
        task = f"echo {name} $({probe}) ${{SLURM_STEP_GPUS:--}}; sleep {sleep}"
        return f"{SRUN} {options} sh -c '{task}'"

    script = "\n".join(
        [
            step("-n1 --exact --gpus=1", "A", 6) + " &",
            "sleep 1",
            step("-n1 --exact --gres=gpu:1", "B", 6) + " &",
            "sleep 1",
            step("-n1 --exact --gpus-per-task=1", "C") + " &",
            "wait",
            step("-n1", "plain"),
            step("-n1 --gpus=0", "none"),
            step("-n2 --gpus-per-task=1", "task$SLURM_PROCID"),  # each task its own
            f"{SRUN} --gpus=3 true; echo rc=$?",
        ]
    )
    text = output(server, tmp_path, script, "--gres=gpu:2", "-n2")
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()}
    # each sees its own GPU, numbered 0 by CUDA, and is denied the other's file
    given = {}
    for name in ("A", "B", "C"):
        files0, files1, cuda, job, own = lines[name]
        assert (cuda, job) == ("0", "0,1")
        assert [files0, files1] == (["reached", "denied"] if own == "0" else ["denied", "reached"])
        given[name] = own
    assert {given["A"], given["B"]} == {"0", "1"}  # at once: one each
    job_id = re.search(r"srun: Job (\d+) step creation temporarily disabled", text)
    assert job_id is not None, text  # C waited for one of them
    assert "retrying (Requested nodes are busy)" in text
    assert f"srun: Step created for job {job_id.group(1)}" in text
    assert lines["plain"] == ["reached", "reached", "0,1", "0,1", "0,1"]
    assert lines["none"] == ["denied", "denied", "''", "0,1", "-"]  # CUDA told none
    assert lines["task0"] == ["reached", "reached", "0", "0,1", "0"]
    assert lines["task1"] == ["reached", "reached", "1", "0,1", "1"]
    assert "Invalid generic resource (gres) specification" in text
    assert "more than the job's gres=gpu:2" in text
    assert "rc=1" in text
