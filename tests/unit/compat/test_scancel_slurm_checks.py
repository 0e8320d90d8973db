"""scancel -i, -v's lines, -s to a pending job and -v with filters that match nothing, as
Slurm 22.05.8's (docs/slurm-checks.md, "scancel")."""

from __future__ import annotations

import pytest
from compat_fakes import FakeClient, call, job, running


def cluster() -> FakeClient:
    return FakeClient(
        job_list=[
            job(3, name="pend1"),
            running(4, name="runA"),
            running(21, name="arr", array_job_id=20, array_task_id=1),
            *[job(20 + i, name="arr", array_job_id=20, array_task_id=i) for i in (2, 3)],
        ]
    )


def test_interactive_asks_on_stdout_and_cancels_on_y_only() -> None:
    """HAL refused -i; Slurm asks on stdout, reads a line and cancels on y (or Y, yes)."""
    client = cluster()
    result = call(client, "scancel", "-i", "3", "4", stdin="n\ny\n")
    assert (result.rc, result.err) == (0, "")
    assert result.out == (
        "Cancel job_id=3 name=pend1 partition=debug [y/n]? "
        "Cancel job_id=4 name=runA partition=debug [y/n]? "
    )
    assert client.cancelled == [("4", None)]
    assert call(client, "scancel", "--interactive", "3", stdin="Yes\n").rc == 0
    assert client.cancelled == [("4", None), ("3", None)]


def test_interactive_asks_again_and_spares_the_job_at_end_of_input() -> None:
    """Anything but y or n asks again; at the end of input Slurm asks forever (HAL: no)."""
    client = cluster()
    result = call(client, "scancel", "-i", "4", stdin="x\n\nn\n")
    assert result.out == "Cancel job_id=4 name=runA partition=debug [y/n]? " * 3
    result = call(client, "scancel", "-i", "4", stdin="")
    assert (result.rc, result.out) == (0, "Cancel job_id=4 name=runA partition=debug [y/n]? ")
    assert client.cancelled == []


def test_interactive_names_an_arrays_pending_elements_as_its_pending_record() -> None:
    client = cluster()
    result = call(client, "scancel", "-i", "20", stdin="n\ny\n")
    assert result.out == (
        "Cancel job_id=20_1 name=arr partition=debug [y/n]? "
        "Cancel job_id=20_[2-3] name=arr partition=debug [y/n]? "
    )
    assert client.cancelled == [("20_2", None), ("20_3", None)]
    element = call(cluster(), "scancel", "-i", "20_3", stdin="n\n")
    assert element.out == "Cancel job_id=20_[2-3] name=arr partition=debug [y/n]? "


def test_interactive_unknown_job_is_an_error() -> None:
    """Slurm looks the jobs up before asking: an unknown id exits 1, even without -v."""
    result = call(cluster(), "scancel", "-i", "999", stdin="y\n")
    assert (result.rc, result.out) == (1, "")
    assert result.err == "scancel: error: Kill job error on job id 999: Invalid job id specified\n"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "scancel: Terminating job 4"),
        (["-f"], "scancel: Terminating full job 4"),
        (["-b"], "scancel: Terminating batch job 4"),  # (SIGKILL to the batch shell)
        (["-s", "USR1"], "scancel: Signal 10 to job 4"),
        (["-s", "USR2"], "scancel: Signal 12 to job 4"),
        (["-s", "KILL"], "scancel: Signal 9 to job 4"),
        (["-b", "-s", "USR1"], "scancel: Signal 10 to batch job 4"),
        (["-f", "-s", "TERM"], "scancel: Signal 15 to full job 4"),
        (["-f", "-b", "-s", "USR1"], "scancel: Signal 10 to full job 4"),
        (["-vv", "-s", "USR1"], "scancel: Signal 10 to job 4"),
    ],
)
def test_verbose_lines(argv: list[str], line: str) -> None:
    """HAL said ``Terminating job N`` whatever the signal."""
    result = call(cluster(), "scancel", "-v", *argv, "4")
    assert (result.rc, result.err) == (0, line + "\n")


class PendingRefused(FakeClient):
    """The server's answer to a signal other than SIGKILL: the ids it reached (a pending
    job's none)."""

    def cancel(
        self,
        job_id: int | str,
        *,
        signal: int | None = None,
        batch_only: bool = False,
        steps_only: bool = False,
    ) -> list[int]:
        found = super().cancel(job_id, signal=signal, batch_only=batch_only, steps_only=steps_only)
        return [i for i in found if signal is None or self.job(i).state != "PENDING"]


def pending_cluster() -> PendingRefused:
    return PendingRefused(job_list=cluster().job_list)


def test_signal_to_a_pending_job_retries_then_exits_228() -> None:
    """Slurm 22.05.8: 10 tries 5..14 s apart (95 s), then the error and exit 228 (2020,
    ESLURM_TRANSITION_STATE_NO_UPDATE, as a byte), -Q or not; HAL was silent, exit 0."""
    client = pending_cluster()
    result = call(client, "scancel", "-s", "USR1", "3")
    assert result.rc == 228
    assert result.err == (
        "scancel: error: Kill job error on job id 3: Job can not be altered now, try again later\n"
    )
    assert len(client.cancelled) == 11
    assert call(client, "scancel", "-Q", "-b", "-s", "USR1", "3").rc == 228
    verbose = call(client, "scancel", "-v", "-s", "USR1", "20_3")
    assert verbose.err.splitlines() == [
        "scancel: Signal 10 to job 20_3",
        *["scancel: Job is in transitional state, retrying"] * 10,
        "scancel: error: Kill job error on job id 20_[2-3]: Job can not be altered now, "
        "try again later",
    ]


def test_signal_to_a_running_job_or_kill_to_a_pending_one_is_not_retried() -> None:
    client = pending_cluster()
    assert call(client, "scancel", "-s", "USR1", "4").rc == 0
    assert call(client, "scancel", "-s", "KILL", "3").rc == 0
    assert call(client, "scancel", "-b", "3").rc == 0
    assert len(client.cancelled) == 3


@pytest.mark.parametrize(
    ("argv", "listed"),
    [
        (["-n", "y", "-t", "R"], "job_name=y state=RUNNING "),
        (["-n", "y,z"], "job_name=y,z "),
        (
            ["-u", "root", "-n", "y", "-p", "debug", "-A", "zz", "-t", "PD"],
            "account=zz job_name=y partition=debug state=PENDING user_name=root ",
        ),
        (["-p", "nope"], "partition=nope "),
        (  # (checked on the peer: Slurm's order, -w as written)
            ["-q", "normal", "-R", "resv1", "-w", "n[1-2]", "-A", "acc", "-n", "nm"],
            "account=acc job_name=nm nodelist=n[1-2] qos=normal reservation=resv1 ",
        ),
    ],
)
def test_verbose_says_when_the_filters_match_nothing(argv: list[str], listed: str) -> None:
    """Slurm's -v line (an error's prefix, exit 0, trailing space); HAL said nothing."""
    result = call(cluster(), "scancel", "-v", *argv)
    assert result.rc == 0
    assert result.err == (
        f"scancel: error: No active jobs match ALL job filters, including: {listed}\n"
    )
    assert call(cluster(), "scancel", *argv).err == ""
