"""``-O`` lists as Slurm 22.05.8 reads them, checked on the real Slurm: a name
with spaces around it is unknown, and sinfo reads any format as a ``-O`` list once a
``-O`` came (squeue refuses ``-o`` with ``-O``: test_squeue_slurm_checks.py)."""

from __future__ import annotations

import pytest
from compat_fakes import FakeClient, call, job, node, partition


def one_node() -> FakeClient:
    """As the real Slurm was checked: one partition of one idle node with 2 CPUs."""
    return FakeClient(
        node_list=[node("localhost")],
        partition_list=[partition("debug", default=True, nodes=["localhost"])],
        job_list=[job(24, name="nm")],
    )


NODELIST = "NODELIST            "
CPUS = "CPUS                "
LOCALHOST = "localhost           "
TWO = "2                   "


@pytest.mark.parametrize(
    ("args", "lines"),
    [
        (["-o", "%N", "-O", "NodeList"], [NODELIST, LOCALHOST]),
        (["-O", "NodeList", "-o", "NodeList,CPUs"], [NODELIST + CPUS, LOCALHOST + TWO]),
        (["-o", "%N %c", "-O", "CPUs"], [CPUS, TWO]),
        (["-o", "", "-O", "cpus"], [CPUS, TWO]),
        (["-O", "nodelist", "-o", ""], ["", ""]),
    ],
)  # fmt: skip
def test_sinfo_reads_the_last_format_as_a_long_list_after_any_long_one(
    args: list[str], lines: list[str]
) -> None:
    """Slurm's sinfo keeps one format string and a mark that ``-O`` came: ``-O NodeList
    -o NodeList,CPUs`` prints both columns, ``-o '%N %c' -O CPUs`` the CPUs. HAL took
    the last as what it was given with (``-o NodeList,CPUs``: that text on each line)."""
    result = call(one_node(), "sinfo", *args)
    assert (result.rc, result.err, result.out.split("\n")[:-1]) == (0, "", lines)


def test_sinfo_reads_a_letter_after_a_long_list_as_an_unknown_name() -> None:
    """Slurm: ``sinfo -O NodeList -o %N`` says ``Invalid job format specification: %N``
    and prints an empty line for the title and the row, rc 0."""
    result = call(one_node(), "sinfo", "-O", "NodeList", "-o", "%N")
    assert result.rc == 0
    assert result.err == "sinfo: error: Invalid job format specification: %N\n"
    assert result.out == "\n\n"


@pytest.mark.parametrize(
    ("command", "names", "unknown", "lines"),
    [
        ("squeue", "jobid, name", " name", ["JOBID" + " " * 15, "24" + " " * 18]),
        ("squeue", "jobid,name ", "name ", ["JOBID" + " " * 15, "24" + " " * 18]),
        ("squeue", " jobid", " jobid", ["", ""]),
        ("sinfo", "nodelist, cpus", " cpus", [NODELIST, LOCALHOST]),
        ("sinfo", " cpus", " cpus", ["", ""]),
    ],
)
def test_a_long_name_with_spaces_around_it_is_unknown(
    command: str, names: str, unknown: str, lines: list[str]
) -> None:
    """Slurm 22.05.8: ``squeue -O 'jobid, name'`` says ``squeue: error: Invalid job format
    specification:  name`` (the space kept), drops it and prints the rest, rc 0; so does
    sinfo. HAL stripped the spaces and printed NAME."""
    result = call(one_node(), command, "-O", names)
    assert result.rc == 0
    assert result.err == f"{command}: error: Invalid job format specification: {unknown}\n"
    assert result.out.split("\n")[:-1] == lines
