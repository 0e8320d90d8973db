"""The sbatch command's output strings and exit codes, which tools match exactly."""

from __future__ import annotations

import re

from compat_fakes import T0, FakeClient, call, job

from hal.core.errors import InvalidRequest, Unavailable

WRAP = ("--wrap", "true")


def test_submitted_line() -> None:
    client = FakeClient()
    result = call(client, "sbatch", *WRAP)
    assert (result.rc, result.out, result.err) == (0, "Submitted batch job 42\n", "")
    assert client.submitted[0].script.startswith("#!/bin/sh\n")
    assert client.closed


def test_parsable_prints_only_the_id() -> None:
    result = call(FakeClient(), "sbatch", "--parsable", *WRAP)
    assert result.out == "42\n"


def test_script_from_stdin() -> None:
    client = FakeClient()
    result = call(client, "sbatch", stdin="#!/bin/sh\n#SBATCH -J piped\ntrue\n")
    assert result.rc == 0
    assert client.submitted[0].name == "piped"


def test_server_rejection_is_slurms_line() -> None:
    client = FakeClient(submit_error=InvalidRequest("Invalid partition name specified"))
    result = call(client, "sbatch", "-p", "nope", *WRAP)
    assert result.rc == 1
    assert result.out == ""
    assert (
        result.err
        == "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )


def test_server_down_is_a_submission_failure() -> None:
    client = FakeClient(submit_error=Unavailable("cannot reach the HAL server"))
    result = call(client, "sbatch", *WRAP)
    assert result.rc == 1
    assert "Batch job submission failed: cannot reach" in result.err


def test_unsupported_option_names_it_and_never_submits() -> None:
    client = FakeClient()
    result = call(client, "sbatch", "--tmp=foo", *WRAP)
    assert result.rc == 1
    assert result.err.startswith("sbatch: error: unrecognized option '--tmp'")
    assert "HAL does not support" in result.err
    assert client.submitted == []


def test_multi_line_errors_keep_the_prefix() -> None:
    result = call(FakeClient(), "sbatch", stdin="echo hi\n")
    assert result.rc == 1
    assert result.err.splitlines() == [
        "sbatch: error: This does not look like a batch script.  The first",
        "sbatch: error: line must start with #! followed by the path to an interpreter.",
        "sbatch: error: For instance: #!/bin/sh",
    ]


def test_wait_returns_the_exit_code() -> None:
    """`sbatch --wait --wrap "exit 7"` exits 7 (observed with Slurm 22.05)."""
    client = FakeClient(job_list=[job(42, state="FAILED", exit_code=7, start_time=T0, end_time=T0)])
    result = call(client, "sbatch", "--wait", "--wrap", "exit 7")
    assert result.rc == 7
    assert result.out == "Submitted batch job 42\n"


def test_wait_signal_means_one() -> None:
    client = FakeClient(job_list=[job(42, state="CANCELLED", exit_signal=15)])
    assert call(client, "sbatch", "-W", *WRAP).rc == 1


def test_wait_polls_until_the_job_ends() -> None:
    states = iter(["PENDING", "RUNNING", "COMPLETED"])

    class Slow(FakeClient):
        def job(self, job_id: int | str) -> object:  # type: ignore[override]
            return job(42, state=next(states))

    assert call(Slow(), "sbatch", "-W", *WRAP).rc == 0


def test_wait_array_takes_the_highest_code() -> None:
    elements = [
        job(43 + i, array_job_id=42, array_task_id=i, state="COMPLETED", exit_code=code)
        for i, code in enumerate([0, 3, 1])
    ]
    client = FakeClient(job_list=elements)
    assert call(client, "sbatch", "-W", "-a", "0-2", *WRAP).rc == 3


def test_test_only_line() -> None:
    client = FakeClient()
    result = call(client, "sbatch", "--test-only", "-n", "4", *WRAP)
    assert result.rc == 0
    assert result.out == ""
    assert result.err == (
        "sbatch: Job 42 to start at 2026-11-21T21:31:20 using 4 processors on nodes n[1-2] "
        "in partition debug\n"
    )


def test_help_lists_the_compat_set() -> None:
    result = call(FakeClient(), "sbatch", "--help")
    assert result.rc == 0
    assert "--gpus-per-node" in result.out and "--signal" in result.out


def test_version() -> None:
    result = call(FakeClient(), "sbatch", "--version")
    assert re.match(r"slurm \d+\.\d+\.\d+", result.out)


def test_verbose_describes_the_request() -> None:
    result = call(FakeClient(), "sbatch", "-v", "-J", "named", *WRAP)
    assert "sbatch: name" in result.err and "named" in result.err


def test_option_without_value_says_so() -> None:
    """getopt's words for a missing value, not "HAL does not support this option"."""
    script = "#!/bin/sh\n#SBATCH --cpus-per-task\ntrue\n"
    for argv, stdin in (((), script), (("--wrap", "true", "--cpus-per-task"), "")):
        client = FakeClient()
        result = call(client, "sbatch", *argv, stdin=stdin)
        assert result.rc == 1
        assert result.err.startswith("sbatch: error: option '--cpus-per-task' requires an argument")
        assert "does not support" not in result.err
        assert client.submitted == []
    assert "(script line 2)" in call(FakeClient(), "sbatch", stdin=script).err


def test_bad_time_quotes_what_was_written() -> None:
    for value in ("-5", "1-", "x:10"):
        result = call(FakeClient(), "sbatch", f"--time={value}", *WRAP)
        assert result.rc == 1
        assert f"invalid --time value '{value}'" in result.err
        for form in ("MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS", "UNLIMITED"):
            assert form in result.err


def test_fewer_tasks_than_nodes_is_warned_of_and_fewer_nodes_sent() -> None:
    """Slurm 22.05.8 prints this line on stderr and submits a 1-node job; -Q silences it."""
    client = FakeClient()
    result = call(client, "sbatch", "-N", "2", "-n", "1", *WRAP)
    assert result.rc == 0
    assert result.err == "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"
    assert (client.submitted[0].nodes_min, client.submitted[0].nodes_max) == (1, 1)
    assert call(FakeClient(), "sbatch", "-Q", "-N", "2", "-n", "1", *WRAP).err == ""
