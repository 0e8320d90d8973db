"""seff: the report Slurm's contrib script prints, from HAL's job record."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, MiB, call, job, running

from hal.wire.jobs import StepRecord

GiB = 1024 * MiB


def test_a_finished_multi_core_job() -> None:
    done = job(
        7,
        user="root",
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 1041,  # 00:17:21
        nodes=["n1"],
        cpus=16,
        memory_bytes=8 * GiB,
        max_rss_bytes=int(1.25 * GiB),
        cpu_seconds=586.0,  # 00:09:46
    )
    out = call(FakeClient(job_list=[done]), "seff", "7")
    assert out.rc == 0, out.err
    assert out.lines == [
        "Job ID: 7",
        "Cluster: hal",
        "User/Group: root/root",
        "State: COMPLETED (exit code 0)",
        "Nodes: 1",
        "Cores per node: 16",
        "CPU Utilized: 00:09:46",
        "CPU Efficiency: 3.52% of 04:37:36 core-walltime",
        "Job Wall-clock time: 00:17:21",
        "Memory Utilized: 1.25 GB",
        "Memory Efficiency: 15.62% of 8.00 GB",
    ]


def test_an_array_element_on_two_nodes_that_failed() -> None:
    failed = job(
        12,
        array_job_id=10,
        array_task_id=2,
        state="FAILED",
        exit_code=3,
        start_time=T0,
        end_time=T0 + 60,
        nodes=["n1", "n2"],
        node_count=2,
        cpus=4,
        memory_bytes=2 * GiB,
        max_rss_bytes=600 * 1024,
        cpu_seconds=30.0,
    )
    lines = call(FakeClient(job_list=[failed]), "seff", "10_2").lines
    assert lines[1] == "Array Job ID: 10_2"
    assert "State: FAILED (exit code 3)" in lines
    assert lines[5:7] == ["Nodes: 2", "Cores per node: 2"]
    assert "CPU Efficiency: 12.50% of 00:04:00 core-walltime" in lines
    assert lines[-2:] == [
        "Memory Utilized: 600.00 KB",
        "Memory Efficiency: 0.03% of 2.00 GB (1.00 GB/node)",
    ]


def test_running_pending_and_unlimited_memory() -> None:
    client = FakeClient(job_list=[running(3, memory_bytes=0), job(4)])
    lines = call(client, "seff", "3").lines  # started at T0 + 10, now T0 + 100
    assert "Job Wall-clock time: 00:01:30" in lines
    assert "Memory Efficiency: not available (the job requested no memory limit)" in lines
    assert lines[-1] == "WARNING: Efficiency statistics may be misleading for RUNNING jobs."
    pending = call(client, "seff", "4").lines
    assert pending[-1] == "Efficiency not available for jobs in the PENDING state."
    assert not any(line.startswith("CPU") for line in pending)


def test_bad_and_unknown_ids() -> None:
    client = FakeClient(job_list=[job(4)])
    missing = call(client, "seff", "99")
    assert missing.rc == 1 and "Job not found: 99" in missing.err
    bad = call(client, "seff", "abc")
    assert bad.rc == 1 and "'abc' is not a job id" in bad.err
    assert call(client, "seff").rc == 1  # no id: the usage, as seff prints it
    assert call(client, "seff", "-h").rc == 0


def test_cpu_utilized_counts_the_jobs_srun_steps_too() -> None:
    """A job whose work ran in an srun step: its CPU is the batch script's and the
    step's together, as Slurm's seff sums its steps."""
    step = StepRecord(
        step_id=0,
        name="python",
        nodelist="n1",
        ntasks=1,
        state="COMPLETED",
        exit_code=0,
        start_time=T0,
        end_time=T0 + 100,
        total_cpu_seconds=90.0,
    )
    done = job(
        8, state="COMPLETED", start_time=T0, end_time=T0 + 100, nodes=["n1"], cpus=1,
        cpu_seconds=2.0, steps=[step],
    )  # fmt: skip
    lines = call(FakeClient(job_list=[done]), "seff", "8").lines
    assert "CPU Utilized: 00:01:32" in lines, lines
    assert "CPU Efficiency: 92.00% of 00:01:40 core-walltime" in lines, lines
