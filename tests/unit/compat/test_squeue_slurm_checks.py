"""squeue as Slurm 22.05.8 printed it in exploratory tests (docs/slurm-checks.md, "squeue:
durations, sort keys, refusals and versions"): right-aligned durations never cut, UNLIMITED
sorted last, the sort letters Slurm refuses, -w/-u names it does not know, -o with -O,
``-o %all`` and ``--version``."""

from __future__ import annotations

import string

import pytest
from compat_fakes import T0, FakeClient, call, job, node, running

from hal.compat.version import VERSION_LINE

DAY = 86400


def limits() -> FakeClient:
    """Slurm's check: three jobs with 10 minutes, no limit (scontrol update
    TimeLimit=UNLIMITED) and two days; the first two running two seconds."""
    return FakeClient(
        job_list=[
            running(1, time_limit_seconds=600, start_time=T0 + 98),
            running(2, time_limit_seconds=0, start_time=T0 + 98),
            job(3, time_limit_seconds=2 * DAY),
        ],
        node_list=[node("vm")],
    )


def test_right_aligned_durations_are_padded_never_cut() -> None:
    """``squeue -l`` printed ``2-00:00:0`` under TIME_LIMI for a two-day limit (Slurm:
    ``2-00:00:00``); %.2l %.2M %.2L keep the whole duration, UNLIMITED and the titles are
    cut, and the left-aligned %2l %2M cut everything."""
    fmt = "%.2l|%.2M|%.2L|%2l|%2M|%.3S|%.2j"
    lines = call(limits(), "squeue", "-S", "-i", "-o", fmt).lines
    assert lines == [
        "TI|TI|TI|TI|TI|STA|NA",
        "2-00:00:00|0:00|2-00:00:00|2-|0:|N/A|sl",
        "UN|0:02|UN|UN|0:|202|sl",
        "10:00|0:02|9:58|10|0:|202|sl",
    ]
    assert call(limits(), "squeue", "-h", "-S", "-i", "-o", "%.5l|%.5L").lines == [
        "2-00:00:00|2-00:00:00",
        "UNLIM|UNLIM",
        "10:00| 9:58",
    ]
    long = call(limits(), "squeue", "-l", "-j", "3").lines
    assert long[1].split()[6] == "TIME_LIMI"
    assert long[2].split()[6] == "2-00:00:00"


def test_long_format_durations_are_not_cut_right_aligned() -> None:
    """-O TimeUsed:.3,TimeLimit:.3,TimeLeft:.3 as Slurm: UNLIMITED cut to UNL."""
    fmt = "TimeUsed:.3,TimeLimit:.3,TimeLeft:.3"
    assert call(limits(), "squeue", "-h", "-S", "-i", "-O", fmt).lines == [
        "0:002-00:00:002-00:00:00",
        "0:02UNLUNL",
        "0:0210:009:58",
    ]


def test_sort_by_time_limit_puts_unlimited_last() -> None:
    """``-S l,i`` listed UNLIMITED first (HAL took no limit for 0); Slurm's is INFINITE."""
    assert call(limits(), "squeue", "-h", "-S", "l,i", "-o", "%i").lines == ["1", "3", "2"]
    assert call(limits(), "squeue", "-h", "-S", "-l", "-o", "%i").lines == ["2", "3", "1"]
    assert call(limits(), "squeue", "-h", "-S", "L,i", "-o", "%i").lines == ["1", "3", "2"]
    assert call(limits(), "squeue", "-h", "-S", "-L", "-o", "%i").lines == ["2", "3", "1"]


@pytest.mark.parametrize("letter", sorted("akoqrswxyAEFKRWXYZ"))
def test_sort_letters_slurm_refuses(letter: str) -> None:
    """Each letter Slurm 22.05.8's squeue -S refused (rc 1); HAL sorted by %Z, %r..."""
    result = call(limits(), "squeue", "-S", letter)
    assert result.rc == 1
    assert result.err.startswith(f"squeue: error: Invalid sort specification: {letter} ")
    assert result.out == ""


@pytest.mark.parametrize("letter", sorted("cdefghijlmnptuvzBCDGHIJLMNOPQSTUV"))
def test_sort_letters_slurm_takes(letter: str) -> None:
    result = call(limits(), "squeue", "-h", "-S", letter, "-o", "%i")
    assert (result.rc, result.err) == (0, "")
    assert sorted(result.lines) == ["1", "2", "3"]


def test_sort_list_is_read_letter_by_letter() -> None:
    """Slurm reads -S a letter at a time: ``ii`` and ``l,`` sort, ``i,Z`` is refused,
    ``cluster`` sorts nothing, and ``b`` is said (no error:) and not sorted by."""
    assert call(limits(), "squeue", "-h", "-S", "ii", "-o", "%i").lines == ["1", "2", "3"]
    assert call(limits(), "squeue", "-h", "-S", "l,", "-o", "%i").lines == ["1", "3", "2"]
    assert call(limits(), "squeue", "-h", "-S", "cluster", "-o", "%i").rc == 0
    assert call(limits(), "squeue", "-S", "i,Z").rc == 1
    result = call(limits(), "squeue", "-h", "-S", "b", "-o", "%i")
    assert (result.rc, result.err) == (0, "squeue: Invalid sort specification: b\n")
    assert result.lines == ["1", "2", "3"]


def test_unknown_node_is_an_error() -> None:
    result = call(limits(), "squeue", "-w", "nosuch")
    assert (result.rc, result.out) == (1, "")
    assert result.err == "squeue: error: Invalid node name nosuch\n"
    assert call(limits(), "squeue", "-h", "-w", "vm", "-o", "%i").lines == ["1", "2"]


def test_unknown_user_is_said_and_the_report_goes_on() -> None:
    """Slurm: ``squeue: error: Invalid user: nosuchuser``, the header, rc 0; with a known
    user too, that user's jobs. A name this host lacks but the server has jobs of (HAL's
    token users) is no error."""
    result = call(limits(), "squeue", "-u", "nosuchuser")
    assert (result.rc, result.err) == (0, "squeue: error: Invalid user: nosuchuser\n")
    assert len(result.lines) == 1 and result.lines[0].split()[0] == "JOBID"
    result = call(limits(), "squeue", "-h", "-o", "%i", "-u", "root,nosuchuser")
    assert (result.rc, result.lines) == (0, ["3", "1", "2"])
    assert "Invalid user: nosuchuser" in result.err
    client = FakeClient(job_list=[running(5, user="halonly")])
    result = call(client, "squeue", "-h", "-o", "%i", "-u", "halonly")
    assert (result.rc, result.err, result.lines) == (0, "", ["5"])
    result = call(limits(), "squeue", "-h", "-o", "%i", "-u", "0")  # a uid: root's
    assert (result.rc, result.err, result.lines) == (0, "", ["3", "1", "2"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "%i", "-O", "JobID"], "-O (--Format) is incompatible with -o (--format)"),
        (["-O", "JobID", "-o", "%i"], "-o (--format) is incompatible with -O (--Format)"),
    ],
)
def test_format_and_long_format_together_are_refused(args: list[str], message: str) -> None:
    result = call(limits(), "squeue", *args)
    assert (result.rc, result.out, result.err) == (1, "", f"squeue: error: {message}\n")
    assert call(limits(), "squeue", "-l", "-O", "JobID").rc == 0  # -l with -O: -O's


def test_all_format_is_every_letter_between_bars() -> None:
    """``-o %all``: every field, a to z then A to Z, ``|`` between (HAL printed
    ``ACCOUNTll``); only the whole format is read so (``x%ally`` is %a and text)."""
    lines = call(limits(), "squeue", "-S", "i", "-o", "%all").lines
    titles = lines[0].split("|")
    assert len(titles) == len(string.ascii_letters)
    assert titles[:3] == ["ACCOUNT", "TRES_PER_NODE", "MIN_CPUS"]
    assert titles[-3:] == ["CORE_SPEC", "SCHEDNODES", "WORK_DIR"]
    assert lines[1].split("|")[8] == "1"  # %i
    assert call(limits(), "squeue", "-h", "-o", "%all").lines[0].count("|") == 51
    assert call(limits(), "squeue", "-j", "3", "-o", "x%ally").lines == [
        "xACCOUNTlly",
        "x(null)lly",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["squeue", "--version"],
        ["squeue", "-V"],
        ["squeue", "-s", "-V"],
        ["squeue", "-V", "-S", "Z"],
        ["scancel", "--version"],
        ["scancel", "-V"],
        ["sinfo", "--version"],
        ["sinfo", "-V"],
        ["scontrol", "version"],
        ["scontrol", "--version"],
        ["srun", "--version"],
        ["srun", "-V"],
        ["srun", "-n", "2", "--version", "hostname"],
    ],
)
def test_version_is_one_line(argv: list[str]) -> None:
    """Each printed its usage (srun and ``scontrol version`` refused), which broke tools
    reading the release from ``--version``; Slurm prints one line and exits 0."""
    result = call(limits(), *argv)
    assert (result.rc, result.out, result.err) == (0, VERSION_LINE + "\n", "")
    assert VERSION_LINE.split()[:2] == ["slurm", "22.05.8"]


def test_scontrol_version_takes_no_arguments() -> None:
    """Slurm: the line, then ``too many arguments for version keyword``, rc 1."""
    result = call(limits(), "scontrol", "VERSION", "extra")
    assert (result.rc, result.out) == (1, VERSION_LINE + "\n")
    assert result.err == "too many arguments for version keyword\n"
