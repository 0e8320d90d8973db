"""sacct options and output as Slurm 22.05.8's sacct prints them, checked against it with
slurmdbd (docs/slurm-checks.md): --delimiter, %-N and %0 widths, titles cut without a
``+``, --units, --version, repeated --format, abbreviated names, -s S and RQ,
SLURM_TIME_FORMAT and an unknown -u."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, GiB, MiB, call, job, requeued_run
from test_sacct import history


def test_delimiter_separates_parsable_values() -> None:
    """``sacct -P -n --delimiter=, -o jobid,state`` prints ``86,COMPLETED``; -p ends the
    line with it; without -p/-P it changes nothing."""
    argv = ("-X", "-n", "--delimiter=,", "-o", "JobID,State", "-j", "1")
    assert call(history(), "sacct", "-P", *argv).lines == ["1,FAILED"]
    assert call(history(), "sacct", "-p", *argv[:2], "--delimiter=::", *argv[3:]).lines == [
        "1::FAILED::"
    ]
    assert call(history(), "sacct", *argv).lines == ["1                FAILED "]


def test_widths_align_as_written_and_titles_are_cut_without_a_plus() -> None:
    """``JobID%20`` right-aligns, ``JobName%-10`` left-aligns; a title too long is cut
    (``Nod``), a value gets a ``+`` (``CO+``)."""
    lines = call(
        history(), "sacct", "-X", "-o", "JobID%20,JobName%-10,state%5,NodeList%3", "-j", "1"
    ).lines
    assert lines == [
        "               JobID JobName    State Nod ",
        "-------------------- ---------- ----- --- ",
        "                   1 failer     FAIL+  vm ",
    ]


def test_units_print_sizes_in_one_unit() -> None:
    """``--units=M``: ReqMem 23593M stays, 1.50G is 1536M; G gives 23.04G; a bad unit is
    refused with Slurm's words."""
    jobs = [job(1, memory_bytes=23593 * MiB), job(2, memory_bytes=3 * GiB // 2)]
    client = FakeClient(job_list=jobs)
    argv = ("-X", "-n", "-P", "-o", "JobID,ReqMem", "-j", "1,2")
    assert call(client, "sacct", *argv).lines == ["1|23593M", "2|1.50G"]
    assert call(client, "sacct", *argv, "--units=m").lines == ["1|23593M", "2|1536M"]
    assert call(client, "sacct", *argv, "--units=G").lines == ["1|23.04G", "2|1.50G"]
    assert call(client, "sacct", *argv, "--units=K").lines == ["1|24159232K", "2|1572864K"]
    bad = call(client, "sacct", *argv, "--units=X")
    assert bad.rc == 1
    assert "Invalid unit type 'X'. Possible options are 'KMGTP'" in bad.err


@pytest.mark.parametrize("option", ["-V", "--version"])
def test_version_as_the_other_commands(option: str) -> None:
    assert call(history(), "sacct", option).lines == ["slurm 22.05.8 (HAL)"]


def test_repeated_formats_are_joined_and_brief_follows_them() -> None:
    argv = ("-X", "-n", "-P", "-j", "1")
    assert call(history(), "sacct", *argv, "--format=JobID", "-o", "State").lines == ["1|FAILED"]
    assert call(history(), "sacct", *argv, "-b", "-o", "JobName").lines == ["failer|1|FAILED|3:0"]
    refused = call(history(), "sacct", *argv, "-l", "-o", "JobName")
    assert refused.rc == 1 and "mutually exclusive" in refused.err


def test_abbreviated_names_are_the_first_field_in_slurms_order() -> None:
    """``jobn,sta,exit`` → JobName, Start (before State), ExitCode; ``c`` is Cluster;
    ``consu`` is ConsumedEnergy, which HAL does not record; ``a`` is ALL."""
    out = call(history(), "sacct", "-X", "-P", "-o", "jobn,sta,exit", "-j", "1").lines
    assert out == ["JobName|Start|ExitCode", "failer|2026-11-21T21:30:20|3:0"]
    assert call(history(), "sacct", "-X", "-P", "-o", "c", "-j", "1").lines == ["Cluster", "hal"]
    energy = call(history(), "sacct", "-o", "consu")
    assert energy.rc == 1 and "Slurm's ConsumedEnergy, which HAL does not record" in energy.err
    every = call(history(), "sacct", "-X", "-P", "-o", "a", "-j", "1").lines[0].split("|")
    assert every[:3] == ["Account", "AllocCPUS", "AllocNodes"] and len(every) > 30


def test_suspended_lists_only_jobs_that_were_suspended() -> None:
    suspended = job(5, state="RUNNING", start_time=T0, nodes=["vm"], suspended_seconds=20)
    client = FakeClient(job_list=[*history().job_list, suspended])
    assert call(client, "sacct", "-X", "-P", "-n", "-o", "JobID", "-s", "S").lines == ["5"]


def test_requeued_runs_are_listed_without_duplicates() -> None:
    """``sacct -X -s RQ`` prints the run a requeue ended (``94 req REQUEUED``)."""
    run = requeued_run()
    requeued = job(94, name="req", state="COMPLETED", start_time=T0, end_time=T0 + 5, runs=[run])
    client = FakeClient(job_list=[requeued])
    argv = ("-X", "-P", "-n", "-o", "JobID,JobName,State", "-s", "RQ", "-S", "21:00", "-E", "now")
    assert call(client, "sacct", *argv).lines == ["94|req|REQUEUED"]


@pytest.mark.parametrize(
    ("time_format", "start"),
    [
        ("standard", "2026-11-21T21:30:20"),
        ("%s", str(int(T0))),
        ("relative", "21:30:20"),
        ("%H:%M", "21:30"),
    ],
)
def test_slurm_time_format(time_format: str, start: str) -> None:
    env = {"SLURM_TIME_FORMAT": time_format}
    out = call(history(), "sacct", "-X", "-P", "-n", "-o", "Start", "-j", "1", environ=env)
    assert out.lines == [start]


def test_relative_times_of_other_days() -> None:
    old = [
        job(i, submit_time=T0 - days * 86400, eligible_time=None)
        for i, days in ((1, 1), (2, 3), (3, 400))
    ]
    env = {"SLURM_TIME_FORMAT": "relative"}
    out = call(
        FakeClient(job_list=old),
        "sacct",
        "-X",
        "-P",
        "-n",
        "-o",
        "Submit",
        "-j",
        "1,2,3",
        environ=env,
    )
    assert out.lines == ["Ystday 21:30", "18 Nov 21:30", "17 Oct 2025"]


def test_unknown_time_format_is_an_error_and_the_standard_form() -> None:
    env = {"SLURM_TIME_FORMAT": "bogus"}
    out = call(history(), "sacct", "-X", "-P", "-n", "-o", "Start", "-j", "1", environ=env)
    assert out.lines == ["2026-11-21T21:30:20"]
    assert out.err == "sacct: error: invalid SLURM_TIME_FORMAT = 'bogus'\n"


@pytest.mark.parametrize("user", ["nosuchuser", "99999"])
def test_unknown_user_is_refused(user: str) -> None:
    result = call(history(), "sacct", "-u", user)
    assert (result.rc, result.out) == (1, "")
    assert result.err == f"sacct: error: Invalid user id: {user}\n"


def test_a_user_the_server_knows_is_not_refused() -> None:
    """HAL's users need not be accounts here: a name with jobs on the server, or the
    caller's own, is taken (only a name neither knows is refused)."""
    client = FakeClient(job_list=[job(9, user="halonly", state="COMPLETED", end_time=T0)])
    listed = call(client, "sacct", "-X", "-n", "-P", "-o", "JobID,User", "-u", "halonly")
    assert (listed.rc, listed.lines) == (0, ["9|halonly"])
    client.user = "meonly"
    assert call(client, "sacct", "-u", "meonly").rc == 0
