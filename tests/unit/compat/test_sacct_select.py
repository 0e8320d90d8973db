"""sacct's selections by what a job is (-q, -N, -g, -i, -I, -k/-K), -T's cut times, -B's
scripts and the options HAL refuses with a reason, as Slurm 22.05.8's sacct (checked
against it with slurmdbd, docs/slurm-checks.md)."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, call, job, running

from hal.core.errors import NotFound
from hal.wire.jobs import StepRecord

IDS = ("-a", "-X", "-n", "-P", "-o", "JobID", "-S", "2026-11-21T00:00:00", "-E", "now")


def jobs() -> FakeClient:
    return FakeClient(
        job_list=[
            job(
                1,
                state="COMPLETED",
                start_time=T0,
                end_time=T0 + 86,
                nodes=["vm"],
                qos="normal",
                time_limit_seconds=300,
            ),
            running(
                3, cpus=4, node_count=2, nodes=["n1", "n2"], qos="high", time_limit_seconds=5400
            ),
            job(4, user="nobody", cpus=2, time_limit_seconds=420),  # pending
            running(5, nodes=["n3"], user="nobody", time_limit_seconds=0),
        ]
    )


def ids(*argv: str) -> list[str]:
    result = call(jobs(), "sacct", *IDS, *argv)
    assert result.rc == 0, result.err
    return result.lines


def refused(*argv: str) -> str:
    result = call(jobs(), "sacct", *IDS, *argv)
    assert (result.rc, result.out) == (1, "")
    return result.err


def test_qos_selects_jobs_of_these_qos_in_any_case() -> None:
    assert ids("-q", "high") == ["3"]
    assert ids("--qos=NORMAL,high") == ["1", "3"]


def test_nodelist_selects_jobs_that_ran_on_any_of_these_nodes() -> None:
    """A hostlist; a pending job ran nowhere."""
    assert ids("-N", "n[2-3]") == ["3", "5"]
    assert ids("--nodelist=vm") == ["1"]
    assert ids("-N", "other") == []


def test_group_selects_by_the_users_group_by_name_or_gid() -> None:
    assert ids("-g", "root") == ["1", "3"]
    assert ids("--group=65534") == ["4", "5"]
    assert ids("--gid=root,nogroup") == ["1", "3", "4", "5"]
    assert refused("-g", "root,nosuchgroup") == "sacct: error: Invalid group id: nosuchgroup\n"


def test_nnodes_counts_allocated_nodes() -> None:
    """-i N is exactly N, min-max a range; a pending job has none allocated."""
    assert ids("-i", "2") == ["3"]
    assert ids("--nnodes=0") == ["4"]
    assert ids("-i", "1-2") == ["1", "3", "5"]
    assert refused("-i", "2-") == (
        'sacct: error: Invalid numeric value "2-" for requested node range.\n'
    )


def test_ncpus_counts_allocated_cpus() -> None:
    assert ids("-I", "4") == ["3"]
    assert ids("--ncpus=1-1") == ["1", "5"]
    assert ids("-I", "0") == ["4"]
    assert refused("-I", "x") == (
        'sacct: error: Invalid numeric value "x" for requested cpu range.\n'
    )


def test_timelimit_min_and_max_in_minutes() -> None:
    """-k alone is exactly that limit; with -K a range; -K alone is ignored."""
    assert ids("-k", "5") == ["1"]
    assert ids("-k", "5", "-K", "7") == ["1", "4"]
    assert ids("--timelimit-min=1:00:00", "--timelimit-max=2:00:00") == ["3"]
    assert ids("-K", "7") == ["1", "3", "4", "5"]
    assert ids("-k", "unlimited") == ["5"]
    assert ids("-k", "7", "-K", "5") == []
    assert "Invalid time limit specification" in refused("-k", "x")


def test_truncate_cuts_start_and_end_to_the_window() -> None:
    """-T: a start before -S reads -S, an end after -E (or none yet) reads -E; Elapsed
    counts the cut times; a job that started after the window ended keeps its start,
    reads 0 and has no batch step line (Slurm 22.05.8)."""
    late = job(
        6, state="COMPLETED", start_time=T0 + 60, end_time=T0 + 70, nodes=["vm"], submit_time=T0
    )
    client = FakeClient(job_list=[*jobs().job_list[:2], late])
    window = ("-S", "2026-11-21T21:30:30", "-E", "2026-11-21T21:31:00")
    argv = ("-n", "-P", "-o", "JobID,Start,End,Elapsed", *window)
    assert call(client, "sacct", "-T", *argv).lines == [
        "1|2026-11-21T21:30:30|2026-11-21T21:31:00|00:00:30",
        "1.batch|2026-11-21T21:30:30|2026-11-21T21:31:00|00:00:30",
        "3|2026-11-21T21:30:30|2026-11-21T21:31:00|00:00:30",
        "3.batch|2026-11-21T21:30:30|2026-11-21T21:31:00|00:00:30",
        "6|2026-11-21T21:31:20|2026-11-21T21:31:00|00:00:00",
    ]
    assert call(client, "sacct", *argv).lines[0] == (
        "1|2026-11-21T21:30:20|2026-11-21T21:31:46|00:01:26"
    )


def _step(step_id: int, start: float, end: float) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="s",
        state="COMPLETED",
        nodelist="vm",
        ntasks=1,
        exit_code=0,
        start_time=start,
        end_time=end,
    )


def test_truncate_cuts_steps_and_leaves_out_those_after_the_window() -> None:
    steps = [_step(0, T0 + 5, T0 + 40), _step(1, T0 + 45, T0 + 50)]
    ran = job(7, state="COMPLETED", start_time=T0, end_time=T0 + 60, nodes=["vm"], steps=steps)
    argv = ("-T", "-n", "-P", "-o", "JobID,Start,End", "-S", "21:30:30", "-E", "21:31:00")
    assert call(FakeClient(job_list=[ran]), "sacct", *argv, "-j", "7").lines == [
        "7|2026-11-21T21:30:30|2026-11-21T21:31:00",
        "7.batch|2026-11-21T21:30:30|2026-11-21T21:31:00",
        "7.0|2026-11-21T21:30:30|2026-11-21T21:31:00",
    ]


class _Scripts(FakeClient):
    def job_script(self, job_id: int | str) -> str:
        if str(job_id) == "5":
            raise NotFound("no script")
        return super().job_script(job_id)


def test_batch_script_prints_each_jobs_script_framed_as_slurms() -> None:
    """``Batch Script for ID``, 80 dashes, the script and a blank line; NONE for a job
    without one; the format options change nothing."""
    client = _Scripts(job_list=jobs().job_list)
    result = call(client, "sacct", "-B", "-X", "-P", "-o", "JobID", "-j", "5,1")
    assert result.rc == 0
    assert result.out == (
        "Batch Script for 1\n" + "-" * 80 + "\n#!/bin/sh\necho 1\n\n"
        "Batch Script for 5\n" + "-" * 80 + "\nNONE\n"
    )


def test_batch_script_needs_jobs() -> None:
    assert refused("--batch-script") == (
        "sacct: error: When requesting job scripts you must also request specific jobs "
        "with the '-j' option.\n"
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("-x", "3"), "association id, which HAL does not keep"),
        (("-c",), "job completion log"),
        (("--json",), "--json is not supported"),
        (("--array",), "Slurm 22.05.8's sacct has no --array either"),
    ],
)
def test_options_refused_with_a_reason(argv: tuple[str, ...], words: str) -> None:
    assert words in refused(*argv)
