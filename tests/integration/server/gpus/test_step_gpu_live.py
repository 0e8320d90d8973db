"""GPU use of a step that ``srun`` starts across a job's nodes (the usual multi-node
training launch), end to end: each node's agent reads its step tasks' GPU use through
NVML (here the stand-in in ``tests/data/nvml``: processes declare their use in their
environment, on the first GPU of their ``CUDA_VISIBLE_DEVICES``), ``sstat -j JOB.0``
shows it while the step runs and ``sacct -j JOB.0`` after, as Slurm's gpu/nvml per task:
``TRESUsageInMax`` the most of one task, ``TRESUsageInAve`` the mean over the tasks; a
step of a job without GPUs shows none."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gpu_accounting import STAND_IN, ended, tres

from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"
FIELDS = "JobID,TRESUsageInMax,TRESUsageInAve"


@pytest.fixture(scope="module")
def gpu_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("stepgpu")
    path = os.pathsep.join(p for p in (STAND_IN, os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "HAL_TEST_NVML_GPUS": "2"}
    # a heartbeat (and with it a usage sample) every second, for sstat during the step
    with LiveServer(data, config_overrides={"heartbeat_interval_seconds": 1}) as server:
        agents = [server.start_agent(n, cpus=2, memory="1G", env=env) for n in ("g1", "g2")]
        with server.client() as c:
            wait_until(lambda: sum(n.state == "UP" and n.gpus == 2 for n in c.nodes()) == 2)
        try:
            yield server
        finally:
            for agent in agents:
                agent.terminate()
                agent.wait(10)


def submit(server: LiveServer, tmp_path: Path, body: str, *args: str) -> str:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body)
    done = server.cli("sbatch", "--parsable", "-N2", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def step_line(server: LiveServer, command: str, step: str) -> tuple[str, str]:
    """``sstat``'s or ``sacct``'s TRESUsageInMax and TRESUsageInAve of ``step``; blank
    for sstat before the step runs."""
    out = server.cli(command, "-n", "-P", "-j", step, "-o", FIELDS)
    if command == "sstat" and "no running job or step" in out.stderr:
        return "", ""
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith(f"{step}|")]
    if not lines:
        return "", ""
    _, most, mean = lines[0].split("|")
    return most, mean


# rank 0 holds 1 GiB at 70 % of its node's GPU, rank 1 3 GiB at 30 %
TRAIN = (
    "if [ $SLURM_PROCID = 0 ]; then use=1073741824:70; else use=3221225472:30; fi; "
    "exec env HAL_TEST_GPU_USE=$use sleep 6"
)


def test_a_multi_node_steps_tasks_show_their_gpu_use(gpu_nodes: LiveServer, tmp_path: Path) -> None:
    """One task per node, each on its node's GPU: the step's TRESUsageInMax is the most
    of one task for each TRES (3G from rank 1, 70 from rank 0; not sums over nodes),
    TRESUsageInAve the mean over the two tasks, in sstat while it runs and in sacct
    after; the batch script, which touched no GPU, reads 0."""
    job_id = submit(gpu_nodes, tmp_path, f"{SRUN} bash -c '{TRAIN}'\n", "--gpus-per-node=1")
    step = f"{job_id}.0"
    wait_until(
        lambda: "gres/gpumem=3G,gres/gpuutil=70" in step_line(gpu_nodes, "sstat", step)[0],
        timeout=30,
        message="a GPU sample of both of the step's tasks in sstat",
    )
    most, mean = step_line(gpu_nodes, "sstat", step)
    assert (tres(most)["gres/gpumem"], tres(most)["gres/gpuutil"]) == ("3G", "70"), most
    assert (tres(mean)["gres/gpumem"], tres(mean)["gres/gpuutil"]) == ("2G", "50"), mean

    wait_until(lambda: ended(gpu_nodes, job_id), timeout=60, message="the job to end")
    where = gpu_nodes.cli("sacct", "-n", "-P", "-j", step, "-o", "NodeList,State")
    assert where.stdout.strip() == "g[1-2]|COMPLETED", where.stdout
    most, mean = step_line(gpu_nodes, "sacct", step)
    assert (tres(most)["gres/gpumem"], tres(most)["gres/gpuutil"]) == ("3G", "70"), most
    assert (tres(mean)["gres/gpumem"], tres(mean)["gres/gpuutil"]) == ("2G", "50"), mean
    batch, _ = step_line(gpu_nodes, "sacct", f"{job_id}.batch")
    assert tres(batch)["gres/gpumem"] == "0" and tres(batch)["gres/gpuutil"] == "0", batch


def test_a_step_of_a_job_without_gpus_shows_no_gres(gpu_nodes: LiveServer, tmp_path: Path) -> None:
    """Its tasks show on GPU 0 (they name it themselves), but the job was given no GPUs:
    its step is not read for them."""
    use = "CUDA_VISIBLE_DEVICES=0 HAL_TEST_GPU_USE=1073741824:70"
    job_id = submit(gpu_nodes, tmp_path, f"{SRUN} env {use} sleep 3\n")
    wait_until(lambda: ended(gpu_nodes, job_id), timeout=60, message="the job to end")
    most, mean = step_line(gpu_nodes, "sacct", f"{job_id}.0")
    assert most and "cpu" in tres(most), most
    assert not any(k.startswith("gres/") for k in tres(most) | tres(mean)), (most, mean)
