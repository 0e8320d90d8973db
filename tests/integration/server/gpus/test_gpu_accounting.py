"""GPU use in accounting, end to end: an agent that finds its GPUs through NVML samples
what each job's processes do with them, and ``sstat``, ``sacct`` and the REST job show
Slurm's ``gres/gpumem`` and ``gres/gpuutil``.

Here the agent's NVML is the stand-in in ``tests/data/nvml`` (CI has no GPU): processes
declare their use in their environment. The same path on a real GPU is
``test_gpu_accounting_on_a_real_gpu`` (marked ``gpu``; skipped without one).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

STAND_IN = str(Path(__file__).parents[3] / "data" / "nvml")


def tres(text: str) -> dict[str, str]:
    """``cpu=00:00:01,mem=1024K`` → {"cpu": "00:00:01", "mem": "1024K"}."""
    return dict(item.split("=", 1) for item in text.split(",")) if text else {}


def size(value: str) -> float:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return float(value[:-1]) * units[value[-1]] if value[-1] in units else float(value)


def ended(server: LiveServer, job_id: str) -> bool:
    with server.client() as c:
        return c.job(job_id).state not in ("PENDING", "RUNNING", "COMPLETING")


@pytest.fixture
def gpu_node(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    data = tmp_path_factory.mktemp("hal")
    path = os.pathsep.join(p for p in (STAND_IN, os.environ.get("PYTHONPATH", "")) if p)
    with LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as server:
        agent = server.start_agent(
            "gpu1", cpus=2, memory="1G", env={"PYTHONPATH": path, "HAL_TEST_NVML_GPUS": "2"}
        )
        with server.client() as c:
            wait_until(lambda: any(n.name == "gpu1" and n.state == "UP" for n in c.nodes()))
        try:
            yield server
        finally:
            agent.terminate()
            agent.wait(10)


def test_a_gpu_job_shows_its_gpu_memory_and_utilisation(
    gpu_node: LiveServer, tmp_path: Path
) -> None:
    """Two processes on the job's two GPUs (3 GiB at 80 %, 1 GiB at 40 %): the job holds
    4 GiB at 120 % (summed, as Slurm's), live in sstat and the REST job, and kept at
    the end for sacct, also after a server restart."""
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --gres=gpu:2\n"
        "CUDA_VISIBLE_DEVICES=0 HAL_TEST_GPU_USE=3221225472:80 sleep 20 &\n"
        "CUDA_VISIBLE_DEVICES=1 HAL_TEST_GPU_USE=1073741824:40 sleep 20 &\n"
        "wait\n"
    )
    done = gpu_node.cli("sbatch", "--parsable", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    with gpu_node.client() as c:
        wait_until(
            lambda: (g := c.job(job_id).gpu_usage) is not None and g.util == 120,
            timeout=30,
            message="a GPU sample of the running job",
        )
        live = c.job(job_id).gpu_usage
        assert live is not None and live.mem_bytes == 4 << 30
    out = gpu_node.cli(
        "sstat", "-n", "-P", "-j", job_id, "-o", "JobID,TRESUsageInMax,TRESUsageInAve"
    )
    assert out.returncode == 0, out.stderr
    step, most, mean = out.stdout.strip().split("|")
    assert step == f"{job_id}.batch"
    assert size(tres(most)["gres/gpumem"]) == 4 << 30 and tres(most)["gres/gpuutil"] == "120", most
    assert tres(mean)["gres/gpuutil"] == "120", mean
    wait_until(lambda: ended(gpu_node, job_id), timeout=60, message="the job to end")

    sa = gpu_node.cli(
        "sacct", "-n", "-P", "-j", job_id, "-o", "JobID,TRESUsageInMax,TRESUsageInAve"
    )
    lines = dict(line.split("|", 1) for line in sa.stdout.split())
    assert lines[job_id] == "|", sa.stdout  # the job line leaves usage to its steps
    most, mean = lines[f"{job_id}.batch"].split("|")
    assert size(tres(most)["gres/gpumem"]) == 4 << 30 and tres(most)["gres/gpuutil"] == "120", most
    assert tres(most)["cpu"] and tres(most)["mem"], most
    assert 0 < int(tres(mean)["gres/gpuutil"]) <= 120, mean

    gpu_node.stop()  # what the job used is kept with it: a restarted server still has it
    again = LiveServer(gpu_node.data_dir, port=gpu_node.port)
    again.token = gpu_node.token
    with again:
        kept = again.cli("sacct", "-n", "-P", "-j", f"{job_id}.batch", "-o", "TRESUsageInMax")
    assert kept.stdout.strip() == most, kept.stdout


def test_a_job_without_gpus_shows_no_gres_usage(gpu_node: LiveServer, tmp_path: Path) -> None:
    plain = gpu_node.cli("sbatch", "--parsable", "--wrap", "sleep 3", cwd=tmp_path)
    plain_id = plain.stdout.strip()
    wait_until(lambda: ended(gpu_node, plain_id), timeout=30, message="the plain job to end")
    sa = gpu_node.cli("sacct", "-n", "-P", "-j", f"{plain_id}.batch", "-o", "JobID,TRESUsageInMax")
    assert sa.returncode == 0, sa.stderr
    usage = tres(sa.stdout.split("|")[1].strip())
    assert "cpu" in usage and not any(k.startswith("gres/") for k in usage), sa.stdout


@pytest.mark.gpu
@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or importlib.util.find_spec("torch") is None,
    reason="needs an NVIDIA GPU with its driver, and PyTorch",
)
def test_gpu_accounting_on_a_real_gpu(tmp_path: Path) -> None:
    """The agent's real NVML: a PyTorch job holding 2 GiB and multiplying matrices shows
    them in sacct after its end."""
    with LiveServer(tmp_path / "hal") as server:
        server.start_agent("gpu0", cpus=2, memory="4G")
        with server.client() as c:
            wait_until(lambda: any(n.name == "gpu0" and n.gpus >= 1 for n in c.nodes()))
        work = (
            f'{sys.executable} -c "import torch, time\n'
            "x = torch.randn(4096, 4096, device='cuda')\n"
            "held = torch.empty(2 << 30, dtype=torch.uint8, device='cuda')\n"
            "t = time.time()\n"
            "while time.time() - t < 10: x @ x\n"
            'torch.cuda.synchronize()"'
        )
        done = server.cli("sbatch", "--parsable", "--gres=gpu:1", "--wrap", work, cwd=tmp_path)
        job_id = done.stdout.strip()
        wait_until(lambda: ended(server, job_id), timeout=90, message="the GPU job to end")
        sa = server.cli("sacct", "-n", "-P", "-j", f"{job_id}.batch", "-o", "State,TRESUsageInMax")
        state, most = sa.stdout.strip().split("|")
        assert state == "COMPLETED", sa.stdout
        assert size(tres(most)["gres/gpumem"]) >= 2 << 30, most
        assert int(tres(most)["gres/gpuutil"]) > 0, most
