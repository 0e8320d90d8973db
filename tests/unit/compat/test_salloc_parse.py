"""salloc's options, the job that holds its allocation, and its command's environment
(``hal.compat.salloc_options``); the command's refusals before anything runs."""

from __future__ import annotations

import signal

import pytest
from compat_fakes import FakeClient, MiB, call, job

from hal.compat.salloc_options import (
    HOLD_SCRIPT,
    Granted,
    SallocRequest,
    allocation_environment,
    parse_salloc,
)
from hal.core.errors import InvalidRequest, PermissionDenied, UnsupportedOption


def parse(*argv: str, **environ: str) -> SallocRequest:
    return parse_salloc(
        list(argv), environ={"SHELL": "/bin/bash", **environ}, cwd="/home/u", now=0.0
    )


def test_sbatch_resource_options_build_the_holding_job() -> None:
    request = parse(
        "-N2", "-n4", "-c2", "--mem=1G", "-t", "1:00:00", "-p", "gpu", "-A", "proj", "hostname"
    )
    job = request.job
    assert (job.nodes_min, job.nodes_max, job.ntasks, job.cpus_per_task) == (2, 2, 4, 2)
    assert job.memory_per_node_bytes == 1024 * MiB and job.time_limit_seconds == 3600
    assert (job.partition, job.account) == ("gpu", "proj")
    assert job.script == HOLD_SCRIPT and job.workdir == "/home/u"
    # nothing written beside the user's files; Requeue=1, the cluster's default, as
    # Slurm 22.05.8 shows an allocation (HAL: 0); a node failure ends it
    # all the same (tests/unit/state/test_allocation_node_fail.py)
    assert (job.stdout, job.requeue) == ("/dev/null", True)
    assert request.command == ("hostname",)


def test_memory_in_kib_is_whole_mib() -> None:
    """Slurm 22.05.8: ``salloc --mem=100K`` gets ``MinMemoryNode=1M`` (SLURM_MEM_PER_NODE=1),
    not all of a node's memory (``--mem=0``), which 100 KiB floored to MiB would be."""
    assert parse("--mem=100K", "true").job.memory_per_node_bytes == 1 * MiB
    assert parse("--mem-per-cpu=500K", "true").job.memory_per_cpu_bytes == 1 * MiB


def test_the_allocation_is_no_batch_job() -> None:
    """Slurm 22.05.8 shows salloc's job with ``BatchFlag=0``."""
    assert parse("true").job.interactive


def test_mem_per_cpu_zero_is_all_of_the_nodes_memory() -> None:
    """Slurm 22.05.8's ``salloc --mem-per-cpu=0``: ``MinMemoryNode=0`` and all of the
    node's memory, as ``--mem=0`` (HAL refused it)."""
    for request in (parse("--mem-per-cpu=0", "true"), parse("true", SALLOC_MEM_PER_CPU="0")):
        assert request.job.memory_per_node_bytes == 0
        assert request.job.memory_per_cpu_bytes is None


def test_the_command_starts_at_the_first_word_that_is_no_option() -> None:
    request = parse("-N1", "sh", "-c", "srun -N2 true", "-x")
    assert request.command == ("sh", "-c", "srun -N2 true", "-x")
    assert request.job.exclude == []  # the command's -x is the command's


@pytest.mark.parametrize(
    ("argv", "name", "command"),
    [
        ((), "interactive", ("/bin/bash",)),  # the user's shell
        # not the command's name, though salloc.1 says so: Slurm 22.05.8 names it
        # "interactive" (docs/slurm-checks.md)
        (("/usr/bin/python3", "-i"), "interactive", ("/usr/bin/python3", "-i")),
        (("sh", "-c", "true"), "interactive", ("sh", "-c", "true")),
        (("-J", "dev", "bash"), "dev", ("bash",)),
        (("--no-shell",), "no-shell", ("/bin/bash",)),  # the command is not run
        (("--no-shell", "-J", "dev"), "dev", ("/bin/bash",)),
    ],
)
def test_job_name_and_default_command(
    argv: tuple[str, ...], name: str, command: tuple[str, ...]
) -> None:
    request = parse(*argv)
    assert (request.job.name, request.command) == (name, command)


def test_without_shell_it_runs_bin_sh() -> None:
    request = parse_salloc([], environ={}, cwd="/", now=0.0)
    assert request.command == ("/bin/sh",)


def test_salloc_input_variables_yield_to_the_command_line() -> None:
    job = parse("-p", "cli", SALLOC_PARTITION="env", SALLOC_TIMELIMIT="10").job
    assert (job.partition, job.time_limit_seconds) == ("cli", 600)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("-o", "out.txt"), "invalid option -- 'o': HAL's salloc does not support it"),
        (("--array=1-3",), "unrecognized option '--array': HAL's salloc does not support it"),
        (("--wrap", "x"), "unrecognized option '--wrap': HAL's salloc does not support it"),
    ],
)
def test_batch_only_options_are_refused(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UnsupportedOption) as err:
        parse(*argv)
    assert err.value.message.startswith(message)
    assert "salloc --help" in err.value.message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("-N",), "option requires an argument -- 'N'"),
        (("-n", "0"), "-n needs a positive integer, got '0'"),
        (("--mem=lots",), "mem"),
        (("-KBOGUS", "true"), "BOGUS"),
    ],
)
def test_bad_values_are_refused(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse(*argv)
    assert message in err.value.message


def test_kill_command_signal() -> None:
    assert parse("true").kill_signal is None  # SIGHUP or SIGTERM, by the terminal
    assert parse("-KUSR1", "true").kill_signal == signal.SIGUSR1
    assert parse("--kill-command=TERM", "true").kill_signal == signal.SIGTERM
    assert parse("true", SALLOC_KILL_CMD="INT").kill_signal == signal.SIGINT


@pytest.mark.parametrize(
    ("argv", "environ", "seconds"),
    [
        (("true",), {}, None),  # wait as long as it takes
        (("-I", "true"), {}, 0.0),  # at once
        (("-I0", "true"), {}, 0.0),
        (("-I30", "true"), {}, 30.0),
        (("--immediate=5", "true"), {}, 5.0),
        (("--immediate", "true"), {}, 0.0),
        (("true",), {"SALLOC_IMMEDIATE": "7"}, 7.0),
        (("-I2", "true"), {"SALLOC_IMMEDIATE": "7"}, 2.0),
    ],
)
def test_immediate_seconds(
    argv: tuple[str, ...], environ: dict[str, str], seconds: float | None
) -> None:
    request = parse(*argv, **environ)
    assert request.immediate == seconds
    assert request.command == ("true",)  # -I's value is attached, never the next word


def test_no_shell_runs_no_command() -> None:
    """`salloc --no-shell` leaves the allocation for srun --jobid; a command with it
    is a mistake, refused rather than silently not run."""
    request = parse("--no-shell", "-N2")
    assert request.no_shell and request.job.nodes_min == 2
    assert not parse("true").no_shell
    with pytest.raises(InvalidRequest, match="--no-shell runs no command"):
        parse("--no-shell", "hostname")
    with pytest.raises(InvalidRequest, match="no number of seconds"):
        parse("--immediate=soon", "true")


def test_the_commands_environment_describes_the_allocation_not_an_outer_job() -> None:
    """salloc run inside a batch job: the outer job's node, tasks and ids are not the
    allocation's; the user's own variables stay."""
    outer = {
        "HOME": "/home/u",
        "SLURM_JOB_ID": "5",
        "SLURMD_NODENAME": "node7",
        "SLURM_NTASKS": "8",
        "SLURM_STEP_ID": "0",
        "SLURM_SUBMIT_DIR": "/elsewhere",
    }
    request = parse("-N2", "--mem=2G", "true")
    granted = Granted(
        job_id=12, name="true", nodes=("node2", "node1"), partition="debug", cpus=4, ntasks=2
    )
    env = allocation_environment(
        outer, granted, request.job, cluster_name="hal", submit_dir="/home/u", hostname="login"
    )
    assert env["HOME"] == "/home/u"
    for gone in ("SLURMD_NODENAME", "SLURM_NTASKS", "SLURM_STEP_ID"):
        assert gone not in env
    assert env == {
        "HOME": "/home/u",
        "SLURM_JOB_ID": "12",
        "SLURM_JOBID": "12",
        "SLURM_JOB_NAME": "true",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
        "SLURM_TASKS_PER_NODE": "1(x2)",
        "SLURM_MEM_PER_NODE": "2048",
        "SLURM_SUBMIT_DIR": "/home/u",
        "SLURM_SUBMIT_HOST": "login",
        "SLURM_CLUSTER_NAME": "hal",
        "HAL_JOB_ID": "12",
        "HAL_JOB_NAME": "true",
        "HAL_JOB_NODELIST": "node[1-2]",
        "HAL_SALLOC_JOB_ID": "12",
    }
    with_tasks = allocation_environment(
        {},
        granted,
        parse("-n3", "-c2", "true").job,
        cluster_name="hal",
        submit_dir="/",
        hostname="h",
    )
    assert (with_tasks["SLURM_NTASKS"], with_tasks["SLURM_CPUS_PER_TASK"]) == ("3", "2")


def test_a_refused_submission_says_why() -> None:
    client = FakeClient(submit_error=PermissionDenied("account proj is not yours"))
    result = call(client, "salloc", "-A", "proj", "true")
    assert result.rc == 1
    assert result.err == "salloc: error: Job submit/allocate failed: account proj is not yours\n"


def test_an_allocation_cancelled_while_pending_is_revoked() -> None:
    """scancel of the pending allocation: salloc stops waiting and runs nothing."""
    client = FakeClient(job_list=[job(42, state="CANCELLED")])
    result = call(client, "salloc", "-N1", "false")
    assert result.rc == 1
    assert result.err.splitlines() == [
        "salloc: Pending job allocation 42",
        "salloc: Job allocation 42 has been revoked.",
    ]


def test_help_and_bad_options_touch_no_server() -> None:
    client = FakeClient(submit_error=AssertionError("submitted"))
    assert call(client, "salloc", "--help").out.startswith("Usage: salloc [OPTIONS...]")
    result = call(client, "salloc", "--output=x", "true")
    assert result.rc == 1 and result.err.startswith("salloc: error: unrecognized option")


def test_fewer_tasks_than_nodes_is_warned_of_and_fewer_nodes_asked_for() -> None:
    """Slurm 22.05.8: ``salloc -N 2 -n 1`` says "salloc: Warning: can't run 1 processes on 2
    nodes, setting nnodes to 1" and is granted one node (SLURM_NNODES=1)."""
    client = FakeClient()
    result = call(client, "salloc", "-N", "2", "-n", "1", "true")
    assert result.err.splitlines()[0] == (
        "salloc: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1"
    )
    assert (client.submitted[0].nodes_min, client.submitted[0].nodes_max) == (1, 1)
    quiet = call(FakeClient(), "salloc", "-Q", "-N", "2", "-n", "1", "true")
    assert "Warning" not in quiet.err
