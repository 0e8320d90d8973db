"""``scancel JOB.STEP`` and ``scancel -s SIG JOB.STEP`` as Slurm 22.05.8's
(docs/slurm-checks.md, "scancel of a step, and what srun and slurmstepd say"): a step
that is not running is an error for a cancel and nothing for a signal; filters select
jobs, never a named step's job."""

from __future__ import annotations

import signal

from compat_fakes import FakeClient, call, running
from test_squeue_steps_listing import step


def cluster() -> FakeClient:
    return FakeClient(
        job_list=[running(5, user="alice", nodes=["n1"]), running(6, user="bob", nodes=["n2"])],
        step_list={5: [step(5, 0, "sleep", ["n1"], [1])]},
    )


def test_a_step_is_cancelled_or_signalled() -> None:
    client = cluster()
    assert call(client, "scancel", "5.0").rc == 0
    assert call(client, "scancel", "-s", "USR1", "5.0").rc == 0
    assert client.cancelled == [("5.0", None), ("5.0", signal.SIGUSR1)]


def test_a_step_not_running_is_an_error_for_a_cancel_only() -> None:
    """As Slurm 22.05.8's: a step its job does not run names the job alone and exits
    225 (ESLURM_INVALID_JOB_ID as a byte); a job that is not there, the step, exit 1."""
    client = cluster()
    missing = call(client, "scancel", "5.3")
    assert missing.rc == 225
    assert (
        missing.err == "scancel: error: Kill job error on job step id 5: Invalid job id specified\n"
    )
    unknown = call(client, "scancel", "99.0")
    assert unknown.rc == 1
    assert (
        unknown.err
        == "scancel: error: Kill job error on job step id 99.0: Invalid job id specified\n"
    )
    assert call(client, "scancel", "-Q", "5.3").err == ""
    quiet = call(client, "scancel", "-s", "USR1", "5.3")
    assert (quiet.rc, quiet.err) == (0, "")
    assert client.cancelled == []


def test_filters_never_turn_a_step_into_its_job_or_every_job() -> None:
    client = cluster()
    assert call(client, "scancel", "-u", "bob", "5.0").rc == 0
    assert client.cancelled == [("5.0", None)]  # not job 6, nor job 5
    assert call(client, "scancel", "-u", "bob", "5.0", "6").rc == 0
    assert client.cancelled == [("5.0", None), ("6", None), ("5.0", None)]
