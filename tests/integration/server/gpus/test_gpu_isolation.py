"""GPU device isolation end to end (Slurm's ``ConstrainDevices=yes``): an agent that
knows its GPUs' device files lets each job, and each of its ``srun`` steps, open only its
own GPUs' files; CUDA numbers them from 0.

The agent's NVML is the stand-in in ``tests/data/nvml`` with two GPUs, minors 0 and 1.
The device files are look-alikes made with ``mknod`` (major 195): without a driver an
allowed one fails to open with ENXIO, a denied one with EPERM. The same on a real GPU,
with PyTorch, is ``test_a_job_without_gpus_cannot_reach_a_real_gpu`` (marked ``gpu``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gpu_accounting import STAND_IN, ended

from hal.agent.devices import NVIDIA_MAJOR
from hal.agent.isolation import detect_isolation
from hal.core.errors import InvalidRequest
from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"
PROBE = """
import errno, os, sys
seen = []
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        seen.append("reached")
    except OSError as err:
        seen.append("denied" if err.errno == errno.EPERM else "reached")
names = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS")
print(" ".join(seen), *(os.environ.get(n, "-") or "''" for n in names))
"""


def host_can_isolate() -> str:
    if os.geteuid() != 0:
        return "cgroups and mknod need root"
    try:
        isolation = detect_isolation("auto", "probe-gpu-isolation", "yes")
    except InvalidRequest as err:
        return str(err)
    isolation.release()
    return ""


pytestmark = pytest.mark.skipif(bool(host_can_isolate()), reason=host_can_isolate() or "-")


@pytest.fixture(scope="module")
def gpu_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    data = tmp_path_factory.mktemp("gpuiso")
    for minor in (0, 1):
        os.mknod(data / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))
    (data / "probe.py").write_text(PROBE)
    path = os.pathsep.join(p for p in (STAND_IN, os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "HAL_TEST_NVML_GPUS": "2", "HAL_TEST_NVML_MINORS": "0,1"}
    with LiveServer(data / "hal") as server:
        agent = server.start_agent("gpu1", cpus=4, memory="1G", env=env)
        with server.client() as c:
            wait_until(lambda: any(n.name == "gpu1" and n.gpus == 2 for n in c.nodes()))
        try:
            yield server, data
        finally:
            agent.terminate()
            agent.wait(10)


def output(server: LiveServer, tmp_path: Path, command: str, *args: str) -> str:
    """What a job with ``args`` running ``command`` printed."""
    done = server.cli("sbatch", "--parsable", *args, "--wrap", command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    wait_until(lambda: ended(server, job_id), timeout=90, message="the job to end")
    return (tmp_path / f"slurm-{job_id}.out").read_text().strip()


def run(gpu_node: tuple[LiveServer, Path], tmp_path: Path, *args: str, step: bool = False) -> str:
    """The probe's line from a job with ``args`` (from an srun step in it if ``step``)."""
    server, data = gpu_node
    probe = f"{sys.executable} {data / 'probe.py'} {data / 'nvidia0'} {data / 'nvidia1'}"
    return output(server, tmp_path, f"{SRUN} {probe}" if step else probe, *args)


def test_a_gpu_job_opens_its_own_gpu_only(
    gpu_node: tuple[LiveServer, Path], tmp_path: Path
) -> None:
    """One GPU of two: its device file opens, the other's is denied, and CUDA is told
    "0" while SLURM_JOB_GPUS keeps the node's index."""
    files0, files1, cuda, given = run(gpu_node, tmp_path, "--gres=gpu:1").split()
    assert cuda == "0"
    assert given in ("0", "1")
    expected = ["reached", "denied"] if given == "0" else ["denied", "reached"]
    assert [files0, files1] == expected


def test_a_job_without_gpus_opens_none(gpu_node: tuple[LiveServer, Path], tmp_path: Path) -> None:
    assert run(gpu_node, tmp_path) == "denied denied - -"


def test_an_srun_step_is_bound_as_its_job(
    gpu_node: tuple[LiveServer, Path], tmp_path: Path
) -> None:
    line = run(gpu_node, tmp_path, "--gpus=2", step=True)
    assert line == "reached reached 0,1 0,1"
    assert run(gpu_node, tmp_path, step=True) == "denied denied - -"


@pytest.mark.gpu
@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or importlib.util.find_spec("torch") is None,
    reason="needs an NVIDIA GPU with its driver, and PyTorch",
)
def test_a_job_without_gpus_cannot_reach_a_real_gpu(tmp_path: Path) -> None:
    """The agent's real NVML and the real driver: PyTorch finds the GPU in a job given
    it, and none in a job given no GPU (its /dev/nvidia<minor> is denied)."""
    with LiveServer(tmp_path / "hal") as server:
        server.start_agent("gpu0", cpus=2, memory="4G")
        with server.client() as c:
            wait_until(lambda: any(n.name == "gpu0" and n.gpus >= 1 for n in c.nodes()))
        count = f'{sys.executable} -c "import torch; print(torch.cuda.device_count())"'
        given = output(server, tmp_path, count, "--gres=gpu:1").splitlines()[-1]
        none = output(server, tmp_path, count).splitlines()[-1]
        assert (given, none) == ("1", "0")
