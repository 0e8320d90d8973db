"""``srun --gpus=N`` in a job of more GPUs: the step gets GPUs of its own, as Slurm's
(``SLURM_STEP_GPUS``, ``CUDA_VISIBLE_DEVICES``), its node's agent denies it the job's
others, two such steps running at once get different ones, and one that finds too few
free waits for them with Slurm's "step creation temporarily disabled" lines
(docs/slurm-checks.md, "srun steps with GPUs of their own"). A step asking for none
keeps the job's. The stand-in NVML's two GPUs, look-alike device files and probe of
``test_gpu_isolation``."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
from test_gpu_isolation import (  # noqa: F401  (gpu_node: a fixture)
    SRUN,
    gpu_node,
    host_can_isolate,
    output,
)

from hal.testing.live import LiveServer, wait_until

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


def test_a_step_without_a_gpu_option_waits_for_the_jobs_gpus(
    gpu_node: tuple[LiveServer, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """As Slurm 22.05.8's: a step without a GPU option holds all the job's GPUs, so an
    ``--exact`` one with a CPU free still waits while another step holds a GPU; one with
    ``--overlap`` runs beside it."""
    server, _ = gpu_node
    stamp = "$(date +%s.%N) ${SLURM_STEP_GPUS:--}"
    script = "\n".join(
        [
            f"{SRUN} -n1 --exact --gpus=1 sh -c 'sleep 4; echo held {stamp}' &",
            "sleep 1",
            f"{SRUN} -n1 --overlap sh -c 'echo overlap {stamp}'",
            f"{SRUN} -n1 --exact sh -c 'echo plain {stamp}'",
            "wait",
        ]
    )
    text = output(server, tmp_path, script, "--gres=gpu:2", "-n2")
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()}
    held, overlap, plain = (float(lines[n][0]) for n in ("held", "overlap", "plain"))
    assert overlap < held <= plain, text
    assert lines["overlap"][1] == lines["plain"][1] == "0,1"
    assert "step creation temporarily disabled, retrying (Requested nodes are busy)" in text


@pytest.mark.gpu
@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or importlib.util.find_spec("torch") is None,
    reason="needs an NVIDIA GPU with its driver, and PyTorch",
)
def test_steps_on_a_real_gpu(tmp_path: Path) -> None:
    """The agent's real NVML and the real driver, in a job given the host's GPU: a step
    with ``--gpus=1`` has it (PyTorch counts 1) and a second one waits for it; a step
    with ``--gpus=0`` reaches none (``nvidia-smi`` finds no device: its device file is
    denied); a plain step has the job's."""
    count = f'{sys.executable} -c "import torch; print(torch.cuda.device_count())"'
    smi = "$(nvidia-smi -L 2>&1 | head -1 | cut -c1-20)"
    script = "\n".join(
        [
            f"{SRUN} -n1 --exact --gpus=1 sh -c 'echo A $({count}) $(date +%s.%N); sleep 3; "
            "echo end $(date +%s.%N)' &",
            "sleep 1",
            f"{SRUN} -n1 --exact --gpus=1 sh -c 'echo B $({count}) $(date +%s.%N)'",
            "wait",
            f"{SRUN} -n1 --gpus=0 sh -c 'echo none {smi}'",
            f"{SRUN} -n1 sh -c 'echo plain {smi}'",
        ]
    )
    with LiveServer(tmp_path / "hal") as server:
        server.start_agent("gpu0", cpus=2, memory="4G")
        with server.client() as c:
            wait_until(lambda: any(n.name == "gpu0" and n.gpus >= 1 for n in c.nodes()))
        text = output(server, tmp_path, script, "--gres=gpu:1", "-n2")
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()}
    assert lines["A"][0] == lines["B"][0] == "1", text
    assert float(lines["B"][1]) >= float(lines["end"][0]), text  # B waited for A's GPU
    assert "step creation temporarily disabled" in text
    assert " ".join(lines["none"]).startswith("No devices"), text
    assert " ".join(lines["plain"]).startswith("GPU 0: NVIDIA"), text
