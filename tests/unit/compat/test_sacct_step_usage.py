"""sacct's usage columns on a numbered step's line (``JOB.N``): what its tasks used, as
accounting kept it at the step's end, as Slurm's sacct shows a step's MaxRSS (the most of
one task), MaxRSSNode/MaxRSSTask (where), AveRSS and TotalCPU; a step recorded before HAL
kept usage, and one still running, show them blank, as the job's own line does."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, MiB, call, job

from hal.wire.jobs import GpuUsage, StepRecord

FIELDS = "JobID,MaxRSS,AveRSS,MaxRSSNode,MaxRSSTask,TotalCPU,CPUTimeRAW"


def step(step_id: int, **usage: object) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="python",
        nodelist="n[1-2]",
        ntasks=4,
        state="COMPLETED",
        exit_code=0,
        start_time=T0 + 1,
        end_time=None if usage.pop("running", False) else T0 + 11,
        **usage,  # type: ignore[arg-type]
    )


def test_a_step_line_shows_what_its_tasks_used() -> None:
    measured = step(
        0,
        max_rss_bytes=70 * MiB,
        max_rss_node="n2",
        max_rss_task=3,
        ave_rss_bytes=40 * MiB + 512 * 1024,
        total_cpu_seconds=12.25,
    )
    done = job(
        5,
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 20,
        nodes=["n1", "n2"],
        node_count=2,
        cpus=2,
        max_rss_bytes=3 * MiB,
        cpu_seconds=0.5,
        steps=[measured, step(1), step(2, running=True)],
    )
    lines = call(FakeClient(job_list=[done]), "sacct", "-P", "-n", "-o", FIELDS).lines
    assert lines == [
        # the job line's TotalCPU is all its steps' (0.5 + 12.25), as Slurm's sacct sums
        "5|||||00:12.750|40",
        "5.batch|3M|3M|n1|0|00:00.500|20",
        # CPUTime stays the CPUs times the step's elapsed time
        "5.0|70M|40.50M|n2|3|00:12.250|20",
        "5.1|||||00:00.000|20",  # recorded before: nothing measured
        "5.2|||||00:00.000|" + lines[4].rsplit("|", 1)[1],  # running: see sstat
    ]


def test_tres_usage_of_a_gpu_jobs_steps_is_theirs_and_the_gpu_the_batch_steps() -> None:
    """TRESUsageInMax on step lines: the step's own CPU time and most memory; the job's
    GPU samples belong to its batch step's line only."""
    gpu = GpuUsage(mem_bytes=0, max_mem_bytes=2 << 30, util=0, max_util=90, ave_util=45.0)
    measured = step(0, max_rss_bytes=70 * MiB, total_cpu_seconds=12.25)
    done = job(
        5,
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 20,
        nodes=["n1"],
        gpus=1,
        max_rss_bytes=3 * MiB,
        cpu_seconds=0.5,
        gpu_usage=gpu,
        steps=[measured, step(1)],
    )
    out = call(FakeClient(job_list=[done]), "sacct", "-P", "-n", "-o", "JobID,TRESUsageInMax")
    assert out.lines == [
        "5|",
        "5.batch|cpu=00:00:00,gres/gpumem=2G,gres/gpuutil=90,mem=3M",
        "5.0|cpu=00:00:12,mem=70M",
        "5.1|",
    ]
