"""``squeue -s`` and ``scontrol show step``: running job steps in Slurm's step layout
(squeue.1: ``%.15i %.8j %.9P %.8u %.9M %N``), filtered as jobs are."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, call, running

from hal.wire.steps import StepInfo


def step(job_id: int, step_id: int, name: str, nodes: list[str], tasks: list[int]) -> StepInfo:
    return StepInfo(
        job_id=job_id,
        step_id=step_id,
        name=name,
        nodes=nodes,
        tasks=tasks,
        state="RUNNING",
        exit_code=0,
        start_time=T0 + 40,
        cpu_count=sum(tasks),
    )


def cluster() -> FakeClient:
    return FakeClient(
        job_list=[
            running(5, user="alice", partition="debug", nodes=["n1"]),
            running(6, user="bob", partition="gpu", nodes=["n2", "n3"]),
        ],
        step_list={
            5: [step(5, 0, "hostname", ["n1"], [1]), step(5, 1, "python", ["n1"], [2])],
            6: [step(6, 0, "mpi_app", ["n2", "n3"], [4, 4])],
        },
    )


def test_squeue_s_lists_every_running_step_in_slurms_layout() -> None:
    result = call(cluster(), "squeue", "-s")
    assert result.rc == 0, result.err
    assert result.out.splitlines() == [
        "         STEPID     NAME PARTITION     USER      TIME NODELIST",
        "            5.0 hostname     debug    alice      1:00 n1",
        "            5.1   python     debug    alice      1:00 n1",
        "            6.0  mpi_app       gpu      bob      1:00 n[2-3]",
    ]


def test_steps_filter_by_list_job_user_and_format() -> None:
    assert call(cluster(), "squeue", "--steps=5.1", "-h", "-o", "%i %A").out == "5.1 2\n"
    assert call(cluster(), "squeue", "-s", "-u", "bob", "-h", "-o", "%i").out == "6.0\n"
    assert call(cluster(), "squeue", "-s", "-j", "5", "-h", "-o", "%i").out == "5.0\n5.1\n"
    bad = call(cluster(), "squeue", "-s", "-o", "%R")
    assert bad.rc == 1 and "Invalid job step format specification: R" in bad.err


def test_scontrol_show_step_prints_its_record() -> None:
    result = call(cluster(), "scontrol", "show", "step", "6.0")
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("StepId=6.0 UserId=bob(") and "TimeLimit=UNLIMITED" in lines[0]
    assert lines[1:] == [
        "   State=RUNNING Partition=gpu NodeList=n[2-3]",
        "   Nodes=2 CPUs=8 Tasks=8 Name=mpi_app",
        "   TRES=cpu=8,mem=0,node=2",  # (as Slurm 22.05.8's: a step holds no memory)
        "",
    ]
    missing = call(cluster(), "scontrol", "show", "step", "6.4")
    assert (missing.rc, missing.out) == (1, "Job step 6.4 not found\n")


def test_right_aligned_step_time_is_padded_never_cut() -> None:
    """Slurm 22.05.8's ``squeue -s -o '%.2M|%.3N|%2M'`` printed ``0:01|localhost|0:``: a
    right-aligned TIME or NODELIST keeps its whole value, a left-aligned one is cut (HAL
    cut %.2M to ``1:``)."""
    result = call(cluster(), "squeue", "-s", "-j", "6", "-o", "%.2M|%.3N|%2M")
    assert result.lines == ["TI|NODELIST|TI", "1:00|n[2-3]|1:"]
