"""srun outside a job asks salloc's allocation for the options of its command line that
shape a job, spelled out in full, named after its command (``hal.compat.srun_alloc``)."""

from __future__ import annotations

from hal.compat.options import parse_options
from hal.compat.salloc_options import parse_salloc
from hal.compat.srun import OPTIONS, parse_command
from hal.compat.srun_alloc import allocation_argv

ARGV = [
    "-N2", "-n", "4", "-c2", "--mem=1G", "-t", "5", "-p", "debug", "-x", "node3",
    "-C", "fast", "--artifact=tool@1", "-l", "-o", "out-%t.txt", "--exclusive", "-I5",
    "-K", "-Q", "--", "/usr/bin/hostname", "-s",
]  # fmt: skip


def test_the_allocation_takes_the_job_shaping_options_and_the_commands_name() -> None:
    call = parse_command(ARGV)
    argv = allocation_argv(parse_options(ARGV, OPTIONS, stop_at_positional=True), call)
    assert argv == [
        "--nodes", "2", "--ntasks", "4", "--cpus-per-task", "2", "--mem", "1G",
        "--time", "5", "--partition", "debug", "--exclude", "node3",
        "--constraint", "fast", "--artifact", "tool@1", "--exclusive", "--immediate=5",
        "--job-name=hostname",
    ]  # fmt: skip
    request = parse_salloc(argv, environ={}, cwd="/tmp", now=0.0)
    job = request.job
    assert (job.name, job.nodes_min, job.ntasks, job.cpus_per_task) == ("hostname", 2, 4, 2)
    assert (job.partition, job.exclude, job.constraint) == ("debug", ["node3"], ["fast"])
    assert job.exclusive and job.memory_per_node_bytes == 1 << 30
    assert job.artifacts == ["tool@1"] and request.immediate == 5
    # srun's own -K (kill on bad exit) is not salloc's -K (its kill command), nor are
    # -l, -o and -Q the allocation's
    assert request.kill_signal is None and not request.quiet


def test_j_names_the_job_as_given() -> None:
    argv = ["-J", "mine", "true"]
    parsed = parse_options(argv, OPTIONS, stop_at_positional=True)
    assert allocation_argv(parsed, parse_command(argv)) == ["--job-name", "mine"]


def test_inside_a_job_the_allocation_options_are_noted_for_refusal() -> None:
    assert parse_command(["-x", "n1", "--artifact", "a", "true"]).allocation_only == (
        "-x",
        "--artifact",
    )
    assert parse_command(["-n2", "true"]).allocation_only == ()
