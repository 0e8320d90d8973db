"""scancel: id syntaxes, filters, signals and Slurm 22.05's exit codes."""

from __future__ import annotations

import signal

import pytest
from compat_fakes import FakeClient, call, job, running

from hal.compat.scancel import expand_target
from hal.core.errors import Conflict, InvalidRequest, PermissionDenied


def cluster() -> FakeClient:
    return FakeClient(
        job_list=[
            job(3, name="a", qos="high", reservation="maint"),
            running(4, name="b", user="alice", partition="gpu", nodes=["n1", "n2"]),
            *[job(20 + i, array_job_id=20, array_task_id=i) for i in range(1, 6)],
        ]
    )


@pytest.mark.parametrize(
    ("word", "targets"),
    [
        ("12", ["12"]),
        ("12_4", ["12_4"]),
        ("12_[1-3]", ["12_1", "12_2", "12_3"]),
        ("12_[1,4-5]", ["12_1", "12_4", "12_5"]),
        ("12_[1,3],13", ["12_1", "12_3", "13"]),
    ],
)
def test_id_syntaxes(word: str, targets: list[str]) -> None:
    assert expand_target(word) == targets


@pytest.mark.parametrize("word", ["x", "12_", "12_[3-1]", "_4"])
def test_bad_ids(word: str) -> None:
    with pytest.raises(InvalidRequest):
        expand_target(word)


def test_cancel_ids_and_elements() -> None:
    client = cluster()
    result = call(client, "scancel", "3", "20_4", "20_[1-2]")
    assert (result.rc, result.out, result.err) == (0, "", "")
    assert [t for t, _ in client.cancelled] == ["3", "20_4", "20_1", "20_2"]


def test_whole_array_by_its_id() -> None:
    client = cluster()
    call(client, "scancel", "20")
    assert client.cancelled == [("20", None)]


def test_unknown_id_is_silent_and_exits_zero_but_says_so_with_v() -> None:
    """Slurm 22.05.8 (checked on the peer) exits 0 for a job id that does not exist and
    says nothing unless -v (HAL printed the error always)."""
    result = call(cluster(), "scancel", "999")
    assert (result.rc, result.err) == (0, "")
    verbose = call(cluster(), "scancel", "-v", "999")
    assert verbose.rc == 0
    assert verbose.err == (
        "scancel: Terminating job 999\n"
        "scancel: error: Kill job error on job id 999: Invalid job id specified\n"
    )


def test_already_finished_is_silent_for_plain_cancel() -> None:
    class Done(FakeClient):
        def cancel(
            self,
            job_id: int | str,
            *,
            signal: int | None = None,
            batch_only: bool = False,
            steps_only: bool = False,
        ) -> list[int]:
            raise Conflict("job already completed")

    assert call(Done(), "scancel", "3").err == ""
    signalled = call(Done(), "scancel", "-s", "USR1", "3")
    assert "Job/step already completing or completed" in signalled.err


def test_permission_denied_exits_one() -> None:
    class Denied(FakeClient):
        def cancel(
            self,
            job_id: int | str,
            *,
            signal: int | None = None,
            batch_only: bool = False,
            steps_only: bool = False,
        ) -> list[int]:
            raise PermissionDenied("not yours")

    result = call(Denied(), "scancel", "3")
    assert result.rc == 1
    assert result.err == "scancel: error: Kill job error on job id 3: Access/permission denied\n"


def test_signal_option() -> None:
    client = cluster()
    call(client, "scancel", "-s", "USR1", "4")
    call(client, "scancel", "--signal=SIGTERM", "4")
    call(client, "scancel", "-s", "9", "4")
    assert client.cancelled == [
        ("4", signal.SIGUSR1),
        ("4", signal.SIGTERM),
        ("4", 9),
    ]


@pytest.mark.parametrize(
    ("argv", "targets"),
    [
        (["-u", "alice"], ["4"]),
        (["-n", "a"], ["3"]),
        (["--name=a,b"], ["3", "4"]),
        (["-p", "gpu"], ["4"]),
        (["-t", "PD", "-u", "root"], ["3", "20_1", "20_2", "20_3", "20_4", "20_5"]),
        (["-t", "running", "-u", "root,alice"], ["4"]),
        (["--me"], ["3", "20_1", "20_2", "20_3", "20_4", "20_5"]),
        (["-u", "alice", "3", "4"], ["4"]),  # filters narrow the given ids
        # -q, -R and -w (the jobs running on any of its nodes), as Slurm 22.05.8's
        (["-q", "high"], ["3"]),
        (["--reservation=maint,other"], ["3"]),
        (["-w", "n[2-3]"], ["4"]),
        (["--nodelist=n3,n4"], []),
        (["--hurry", "-n", "a"], ["3"]),  # (HAL has no burst buffer to skip staging out)
    ],
)
def test_filters(argv: list[str], targets: list[str]) -> None:
    client = cluster()
    assert call(client, "scancel", *argv).rc == 0
    assert [t for t, _ in client.cancelled] == targets


def test_nothing_to_cancel() -> None:
    result = call(cluster(), "scancel")
    assert (result.rc, result.err) == (1, "scancel: error: No job identification provided\n")


def test_state_filter_only_takes_cancellable_states() -> None:
    result = call(cluster(), "scancel", "-t", "CD", "-u", "root")
    assert result.rc == 1 and "Invalid job state specified: CD" in result.err


def test_batch_signals_the_batch_shell_only() -> None:
    """``-b`` was refused; Slurm signals the batch step alone with it, SIGKILL without -s."""
    client = cluster()
    assert call(client, "scancel", "-b", "--signal=USR1", "4").rc == 0
    assert call(client, "scancel", "--batch", "4").rc == 0
    assert call(client, "scancel", "-s", "USR2", "4").rc == 0  # the job's steps only
    assert call(client, "scancel", "-f", "-s", "USR2", "4").rc == 0  # all of its processes
    assert call(client, "scancel", "-s", "KILL", "4").rc == 0  # (all of them, as -f)
    assert client.cancelled == [
        ("4", signal.SIGUSR1),
        ("4", signal.SIGKILL),
        ("4", signal.SIGUSR2),
        ("4", signal.SIGUSR2),
        ("4", signal.SIGKILL),
    ]
    assert client.batch_only == ["4", "4"]
    assert client.steps_only == ["4"]


def test_bad_signal() -> None:
    result = call(cluster(), "scancel", "-s", "NOPE", "4")
    assert result.rc == 1 and "Unknown job signal: NOPE" in result.err


@pytest.mark.parametrize("user", ["nosuchuser", "99999"])
def test_unknown_user_is_an_error_and_cancels_nothing(user: str) -> None:
    """Slurm 22.05.8: ``scancel: error: Invalid user name: nosuchuser``, rc 1 (HAL was
    silent, rc 0, so a script's typo passed). Known: a name or uid of this host, or a
    name the server holds jobs of (alice here, as HAL's token users)."""
    client = cluster()
    result = call(client, "scancel", "-u", user, "3")
    assert (result.rc, result.out) == (1, "")
    assert result.err == f"scancel: error: Invalid user name: {user}\n"
    assert client.cancelled == []
    assert call(client, "scancel", "-u", "0", "3").rc == 0  # root's uid
    assert [t for t, _ in client.cancelled] == ["3"]
