"""sstat: a running job's steps' usage, as their agents last sampled it."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, MiB, call, job, running

from hal.wire.jobs import GpuUsage
from hal.wire.steps import StepInfo, TaskUsage


def _client() -> FakeClient:
    sampled = running(
        5,
        nodes=["n1", "n2"],
        node_count=2,
        max_rss_bytes=300 * MiB + 4096,
        rss_bytes=200 * MiB,
        cpu_seconds=75.5,
        usage_time=T0 + 90,
    )
    fresh = running(6)  # started, no sample yet
    return FakeClient(job_list=[sampled, fresh, job(7, state="COMPLETED", end_time=T0)])


def test_default_fields_of_running_jobs() -> None:
    out = call(_client(), "sstat", "-j", "5,6")
    assert out.rc == 0, out.err
    assert out.lines == [
        "JobID            MaxRSS MaxRSSNode MaxRSSTask     AveRSS     MinCPU MinCPUNode "
        "MinCPUTask     AveCPU   NTasks ",
        "------------ ---------- ---------- ---------- ---------- ---------- ---------- "
        "---------- ---------- -------- ",
        "5.batch         307204K n1                  0    307204K  01:15.500 n1         "
        "         0  01:15.500        1 ",
        "6.batch                                                                        "
        "                             1 ",
    ]


def test_format_parsable_and_steps() -> None:
    lines = call(_client(), "sstat", "-P", "-n", "-o", "JobID,MaxRSS,AveCPU", "5.batch").lines
    assert lines == ["5.batch|307204K|01:15.500"]
    step = call(_client(), "sstat", "-j", "5.0")  # job 5 runs no step 0
    assert step.rc == 1 and "no running job or step among 5.0" in step.err


def test_refusals() -> None:
    ended = call(_client(), "sstat", "-j", "7")
    assert ended.rc == 1 and "no running job or step among 7" in ended.err and "sacct" in ended.err
    unmeasured = call(_client(), "sstat", "-j", "5", "-o", "JobID,MaxVMSize")
    assert unmeasured.rc == 1 and 'Invalid field requested: "MaxVMSize"' in unmeasured.err
    assert call(_client(), "sstat").rc == 1  # no job named
    assert call(_client(), "sstat", "-j", "x1").rc == 1


def _with_steps() -> FakeClient:
    client = _client()

    def task(rank: int, node: str, rss_mib: int, peak_mib: int, cpu: float) -> TaskUsage:
        return TaskUsage(
            rank=rank,
            node=node,
            rss_bytes=rss_mib * MiB,
            max_rss_bytes=peak_mib * MiB,
            cpu_seconds=cpu,
        )

    def step(step_id: int, usage: list[TaskUsage]) -> StepInfo:
        return StepInfo(
            job_id=5,
            step_id=step_id,
            name="app",
            nodes=["n1", "n2"],
            tasks=[2, 1],
            state="RUNNING",
            exit_code=0,
            usage=usage,
        )

    tasks = [task(0, "n1", 10, 12, 4.0), task(1, "n1", 20, 30, 1.5), task(2, "n2", 30, 31, 2.0)]
    client.step_list = {5: [step(2, tasks), step(3, [])]}
    return client


def test_a_job_running_steps_shows_its_lowest_numbered_step_as_slurms_does() -> None:
    """srun's step 2 runs 3 tasks on two nodes: the most memory is task 2's on n2 (31 MiB
    peak), the least CPU task 1's on n1; the averages are over the tasks' current RSS
    and CPU time; -a adds the batch step and step 3 (no sample yet: blank figures)."""
    fields = "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks"
    out = call(_with_steps(), "sstat", "-P", "-n", "-j", "5", "-o", fields)
    assert out.lines == ["5.2|31M|n2|2|20M|00:01.500|n1|1|00:02.500|3"], out.err
    every = call(_with_steps(), "sstat", "-P", "-n", "-a", "-j", "5", "-o", "JobID,MaxRSS,NTasks")
    assert every.lines == ["5.batch|307204K|1", "5.2|31M|3", "5.3||3"]
    one = call(_with_steps(), "sstat", "-P", "-n", "-j", "5.3,5.batch", "-o", "JobID")
    assert one.lines == ["5.batch", "5.3"]


def test_tres_usage_of_a_gpu_job_and_of_steps_without_gpus() -> None:
    """TRESUsageInMax/Ave in Slurm's shape (its TRES names, sorted, cpu as a time, memory
    in K): the batch step of a job given GPUs adds gres/gpumem and gres/gpuutil, the
    mean utilisation in Ave; steps without GPU samples show cpu and mem only; the
    default width of 14 cuts with a '+' as Slurm's."""
    gpu = GpuUsage(mem_bytes=3 << 30, max_mem_bytes=4 << 30, util=95, max_util=120, ave_util=60.4)
    client = _with_steps()
    client.job_list[0] = client.job_list[0].model_copy(update={"gpu_usage": gpu})
    out = call(
        client, "sstat", "-P", "-n", "-a", "-j", "5", "-o", "JobID,TRESUsageInMax,TRESUsageInAve"
    )
    assert out.lines == [
        "5.batch|cpu=00:01:15,gres/gpumem=4G,gres/gpuutil=120,mem=307204K"
        "|cpu=00:01:15,gres/gpumem=4G,gres/gpuutil=60,mem=307204K",
        "5.2|cpu=00:00:04,mem=31M|cpu=00:00:02,mem=20M",
        "5.3||",
    ], out.err
    wide = call(client, "sstat", "-j", "5.batch", "-o", "JobID,TRESUsageInMax")
    assert wide.lines[2] == "5.batch      cpu=00:01:15,+ "
