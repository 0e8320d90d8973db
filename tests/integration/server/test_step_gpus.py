"""``srun --gpus=N`` in a job of more GPUs: the step gets GPUs of its own, as Slurm's
(``SLURM_STEP_GPUS``, ``CUDA_VISIBLE_DEVICES``), its node's agent denies it the job's
others, two such steps running at once get different ones, and one that finds too few
free waits for them with Slurm's "step creation temporarily disabled" lines
(docs/slurm-checks.md, "srun steps with GPUs of their own"). A step asking for none
keeps the job's. The stand-in NVML's two GPUs and look-alike device files of
``test_gpu_isolation``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_gpu_isolation import SRUN, gpu_node, output  # noqa: F401  (gpu_node: a fixture)

from hal.testing.live import LiveServer

pytestmark = pytest.mark.usefixtures("gpu_node")

PROBE = """
import errno, os, sys, time
seen = []
for path in sys.argv[3:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        seen.append("reached")
    except OSError as err:
        seen.append("denied" if err.errno == errno.EPERM else "reached")
env = os.environ
names = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
print(sys.argv[1], *seen, *(env.get(n, "-") or "''" for n in names), flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_steps_get_their_own_gpus_and_wait_for_them(
    gpu_node: tuple[LiveServer, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    server, data = gpu_node
    (tmp_path / "probe.py").write_text(PROBE)
    probe = f"{sys.executable} {tmp_path / 'probe.py'}"
    files = f"{data / 'nvidia0'} {data / 'nvidia1'}"
    script = "\n".join(
        [
            f"{SRUN} --gpus=1 {probe} A 6 {files} &",
            "sleep 1",
            f"{SRUN} --gres=gpu:1 {probe} B 6 {files} &",
            "sleep 1",
            f"{SRUN} --gpus-per-task=1 {probe} C 0 {files} &",
            "wait",
            f"{SRUN} {probe} plain 0 {files}",
            f"{SRUN} --gpus=0 {probe} none 0 {files}",
            f"{SRUN} --gpus=3 true; echo rc=$?",
        ]
    )
    text = output(server, tmp_path, script, "--gres=gpu:2")
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()}
    # each sees its own GPU, numbered 0 by CUDA, and is denied the other's file
    given = {}
    for name in ("A", "B", "C"):
        files0, files1, cuda, step, job = lines[name]
        assert (cuda, job) == ("0", "0,1")
        assert [files0, files1] == (["reached", "denied"] if step == "0" else ["denied", "reached"])
        given[name] = step
    assert {given["A"], given["B"]} == {"0", "1"}  # at once: one each
    job_id = re.search(r"srun: Job (\d+) step creation temporarily disabled", text)
    assert job_id is not None, text  # C waited for one of them
    assert "retrying (Requested nodes are busy)" in text
    assert f"srun: Step created for job {job_id.group(1)}" in text
    assert lines["plain"] == ["reached", "reached", "0,1", "0,1", "0,1"]
    assert lines["none"] == ["denied", "denied", "''", "-", "0,1"]  # CUDA told none
    assert "Invalid generic resource (gres) specification" in text
    assert "more than the job's gres=gpu:2" in text
    assert "rc=1" in text
