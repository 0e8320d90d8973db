"""sacct's TRESUsageInMax/Ave on a numbered step's line (``JOB.N``) of a step given
GPUs: its tasks' GPU use as accounting kept it at the step's end, as Slurm's gpu/nvml
per task shows it (Max: the most of one task; Ave: the mean over the tasks); a step
whose tasks were not read for GPUs shows none, whatever its batch step shows."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, MiB, call, job

from hal.wire.jobs import GpuUsage, StepGpuUsage, StepRecord

GiB = 1 << 30


def step(step_id: int, gpu: StepGpuUsage | None = None) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="python",
        nodelist="n[1-2]",
        ntasks=2,
        state="COMPLETED",
        exit_code=0,
        start_time=T0 + 1,
        end_time=T0 + 11,
        max_rss_bytes=70 * MiB,
        ave_rss_bytes=50 * MiB,
        total_cpu_seconds=12.25,
        gpu=gpu,
    )


def test_a_gpu_steps_line_shows_its_tasks_gpu_use() -> None:
    used = StepGpuUsage(max_mem_bytes=3 * GiB, ave_mem_bytes=2 * GiB, max_util=95, ave_util=62.6)
    batch = GpuUsage(mem_bytes=0, max_mem_bytes=0, util=0, max_util=0, ave_util=0.0)
    done = job(
        5,
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 20,
        nodes=["n1", "n2"],
        node_count=2,
        gpus=2,
        max_rss_bytes=3 * MiB,
        cpu_seconds=0.5,
        gpu_usage=batch,  # the batch script itself touched no GPU
        steps=[step(0, used), step(1)],
    )
    fields = "JobID,TRESUsageInMax,TRESUsageInAve"
    out = call(FakeClient(job_list=[done]), "sacct", "-P", "-n", "-o", fields)
    assert out.lines[1:] == [
        "5.batch|cpu=00:00:00,gres/gpumem=0,gres/gpuutil=0,mem=3M"
        "|cpu=00:00:00,gres/gpumem=0,gres/gpuutil=0,mem=3M",
        # Ave: the mean task's (its CPU time 12.25 s over 2 tasks, AveRSS 50M)
        "5.0|cpu=00:00:12,gres/gpumem=3G,gres/gpuutil=95,mem=70M"
        "|cpu=00:00:06,gres/gpumem=2G,gres/gpuutil=63,mem=50M",
        "5.1|cpu=00:00:12,mem=70M|cpu=00:00:06,mem=50M",  # not read for GPUs
    ], out.err
