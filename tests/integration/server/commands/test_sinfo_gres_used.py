"""``sinfo -O GresUsed`` and ``scontrol -d show node``'s ``GresUsed=`` name the GPUs in use
on a node by index, as Slurm prints them (``gpu:2(IDX:0-1)``; ``gpu:0(IDX:N/A)`` when none
is), from the GPU ids the server allocated: a real server and a real ``hal agent``
declaring 4 fake GPUs, running a job that prints the ``CUDA_VISIBLE_DEVICES`` its agent
gave it. sinfo showed only the count, scontrol no GresUsed at all."""

from __future__ import annotations

from pathlib import Path

from hal.slurm.syntax import compress_indices
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit


def gres_used(live: LiveServer) -> str:
    out = live.cli("sinfo", "-h", "-N", "-n", "gpu1", "-O", "GresUsed:40")
    assert out.returncode == 0, out.stderr
    shown = live.cli("scontrol", "-d", "show", "node", "gpu1")
    assert shown.returncode == 0, shown.stderr
    assert "   Gres=gpu:4\n" in shown.stdout
    assert f"   GresUsed={out.stdout.strip()}\n" in shown.stdout  # the same, as in Slurm
    return out.stdout.strip()


def test_gres_used_names_the_allocated_gpu_indices(tmp_path: Path) -> None:
    seen, hold = tmp_path / "seen", tmp_path / "hold"
    hold.touch()
    script = (
        f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES" > {seen}.tmp && mv {seen}.tmp {seen}\n'
        f"while [ -e {hold} ]; do sleep 0.1; done\n"
    )
    with LiveServer(tmp_path / "srv") as live:
        live.start_agent("gpu1", cpus=4, extra=["--gpus", "4"])
        with live.client() as c:
            wait_until(lambda: any(n.name == "gpu1" and n.state == "UP" for n in c.nodes()))
            assert gres_used(live) == "gpu:0(IDX:N/A)"
            job = c.submit(JobSubmit(script=script, workdir=str(tmp_path), gpus_per_node=2))
            wait_until(seen.exists, message="the job to start")
            given = [int(g) for g in seen.read_text().split(",")]
            assert len(given) == 2
            assert gres_used(live) == f"gpu:2(IDX:{compress_indices(given)})"
            hold.unlink()
            wait_until(lambda: c.job(job.job_id).state == "COMPLETED", message="the job to end")
            assert gres_used(live) == "gpu:0(IDX:N/A)"
