"""Bad input to srun, scancel, squeue, sinfo, sacct and sprio: Slurm's error (or a clearer
one) on stderr with the command's prefix and a non-zero exit, never a traceback and never a
silent success that hides the mistake."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from compat_fakes import T0, FakeClient, answered, call, job, node, partition, running

from hal.compat.commands import run
from hal.wire.nodes import ClusterConfig

# -- squeue ---------------------------------------------------------------------------------


def queue() -> FakeClient:
    return FakeClient(job_list=[job(3), running(4)])


@pytest.mark.parametrize(
    ("args", "line"), [(["-o", ""], ""), (["--format="], ""), (["-o", " "], " ")]
)
def test_squeue_empty_format_prints_a_line_for_the_title_and_each_job(
    args: list[str], line: str
) -> None:
    """Slurm 22.05.8: ``squeue -o ''`` prints an empty line for the title and one for each
    job, rc 0 (``-o ' '``: a space on each); HAL refused it as a likely mistake. (An
    empty ``-O`` does the same: test_squeue.py.)"""
    result = call(queue(), "squeue", *args)
    assert (result.rc, result.err, result.out) == (0, "", f"{line}\n" * 3)
    headless = call(queue(), "squeue", "-h", *args)
    assert (headless.rc, headless.out) == (0, f"{line}\n" * 2)


def test_squeue_unknown_sort_key_is_refused_with_an_empty_queue() -> None:
    """It was checked only while sorting, so an empty queue hid it (rc 0)."""
    result = call(FakeClient(), "squeue", "--sort=7")
    assert result.rc == 1
    assert result.err.startswith("squeue: error: Invalid sort specification: 7")


@pytest.mark.parametrize("spec", ["-", "i,+", "ii"])
def test_squeue_sort_signs_and_repeats_are_taken_as_slurm_takes_them(spec: str) -> None:
    """Refused here once; Slurm 22.05.8's squeue reads -S a letter at a time and sorts
    with each of these, rc 0 (docs/slurm-checks.md): a sign with no letter sorts nothing."""
    result = call(queue(), "squeue", "-h", f"--sort={spec}", "-o", "%i")
    assert (result.rc, result.err) == (0, "")
    assert result.lines == ["3", "4"]


@pytest.mark.parametrize("spec", ["P,t,-p", "-p,i", "+i", "S", "j,-V"])
def test_squeue_valid_sort_keys_still_sort(spec: str) -> None:
    result = call(queue(), "squeue", "-h", f"--sort={spec}", "-o", "%i")
    assert (result.rc, result.err) == (0, "")
    assert sorted(result.lines) == ["3", "4"]


@pytest.mark.parametrize("value", ["0", "-3", "abc", "1.5"])
def test_squeue_iterate_needs_positive_seconds(value: str) -> None:
    result = call(queue(), "squeue", "-i", value)
    assert result.rc == 1
    assert result.err.startswith(f"squeue: error: --iterate={value}: ")


def test_squeue_iterate_repeats_until_interrupted() -> None:
    """``-i 5`` reprints every 5 s; Ctrl-C ends it with 130 and no traceback."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise KeyboardInterrupt

    out, err = io.StringIO(), io.StringIO()
    rc = run(
        "squeue",
        ["-i", "5", "-o", "%i", "--me"],
        client_factory=queue,
        stdout=out,
        stderr=err,
        environ={},
        cwd="/",
        clock=lambda: T0,
        sleep=sleep,
    )
    assert (rc, err.getvalue(), slept) == (130, "", [5, 5])
    reports = out.getvalue().split("\n\n")
    assert len(reports) == 3  # two blank lines between three reports
    assert reports[0].splitlines()[1:] == ["JOBID", "3", "4"]  # a date line first


# -- sinfo ----------------------------------------------------------------------------------


def nodes() -> FakeClient:
    return FakeClient(
        node_list=[
            node("n1"),
            node("n2", display_state="drng"),
            node("n3", display_state="drain"),
        ],
        partition_list=[partition("debug", default=True)],
    )


@pytest.mark.parametrize("states", ["bogus", "idle,bogus", "idle&bogus"])
def test_sinfo_unknown_state_is_refused(states: str) -> None:
    """An unknown -t state printed an empty table with rc 0."""
    result = call(nodes(), "sinfo", "-t", states)
    assert result.rc == 1
    assert result.err.startswith("sinfo: error: Invalid node state specified: bogus;")
    assert result.out == ""


def test_sinfo_states_all_shows_every_node() -> None:
    """``-t all`` matched no node at all."""
    result = call(nodes(), "sinfo", "-h", "-N", "-t", "all", "-o", "%N")
    assert (result.rc, result.lines) == (0, ["n1", "n2", "n3"])


@pytest.mark.parametrize(
    ("states", "shown"),
    [
        ("drain", ["n2", "n3"]),  # Slurm's DRAIN: drained and draining
        ("DRAINING", ["n2"]),
        ("drained", ["n3"]),
        # a drained idle node is idle too, as in Slurm 22.05.8
        ("idle,drng", ["n1", "n2", "n3"]),
        ("future", []),  # a Slurm state HAL never shows: accepted, matches nothing
    ],
)
def test_sinfo_state_names(states: str, shown: list[str]) -> None:
    result = call(nodes(), "sinfo", "-h", "-N", "-t", states, "-o", "%N")
    assert (result.rc, result.err, result.lines) == (0, "", shown)


def test_sinfo_empty_format_prints_a_line_for_the_title_and_each_row() -> None:
    """Slurm 22.05.8: ``sinfo -o ''`` prints an empty line for the title and each row, rc
    0 (rows grouped as a format of text alone groups them); HAL refused it as a likely
    mistake."""
    result = call(nodes(), "sinfo", "-o", "")
    text = call(nodes(), "sinfo", "-o", "x").lines
    assert (result.rc, result.err, result.out) == (0, "", "\n" * len(text))


def test_sinfo_bad_host_list_names_the_nodes_option() -> None:
    result = call(nodes(), "sinfo", "-n", "n[1-")
    assert result.rc == 1
    assert result.err.startswith("sinfo: error: invalid --nodes host list 'n[1-'")


# -- sacct ----------------------------------------------------------------------------------


def history() -> FakeClient:
    return FakeClient(job_list=[job(3, state="COMPLETED", start_time=T0, end_time=T0 + 5)])


def test_sacct_start_after_end_is_slurms_error() -> None:
    result = call(history(), "sacct", "-S", "2026-11-26", "-E", "2026-11-01")
    assert result.rc == 1
    assert result.err == (
        "sacct: error: Start time (2026-11-26T00:00:00) requested is after end time "
        "(2026-11-01T00:00:00).\n"
    )


def test_sacct_start_time_of_day_ahead_is_todays() -> None:
    """Slurm 22.05.8: ``sacct -S 02:44`` typed at 02:43:57 is refused, the start after
    the end (now): a time of day is today's, even one still ahead, not yesterday's."""
    result = call(history(), "sacct", "-X", "-S", "22:00")  # typed at 21:32:00
    assert result.rc == 1
    assert result.err == (
        "sacct: error: Start time (2026-11-21T22:00:00) requested is after end time "
        "(2026-11-21T21:32:00).\n"
    )


@pytest.mark.parametrize("fields", ["", ",", " , "])
def test_sacct_no_fields_is_refused(fields: str) -> None:
    """An empty --format printed one blank line per job."""
    result = call(history(), "sacct", f"--format={fields}")
    assert result.rc == 1
    assert result.err.startswith("sacct: error: No fields requested")


def test_sacct_zero_width_is_an_empty_column_and_a_word_is_refused() -> None:
    """``JobID%0`` printed cut garbage (``JobI+``); Slurm 22.05.8's sacct prints a column
    of no width (its blank alone), the values whole with -P. HAL refuses ``JobID%x``,
    which Slurm's atoi also takes as 0: a typo would hide the column."""
    result = call(history(), "sacct", "-X", "-n", "--format=JobID%0,State")
    assert (result.rc, result.out) == (0, "  COMPLETED \n")
    parsable = call(history(), "sacct", "-X", "-n", "-P", "--format=JobID%0,State")
    assert parsable.out == "3|COMPLETED\n"
    refused = call(history(), "sacct", "--format=JobID%x")
    assert refused.rc == 1
    assert "Invalid field width in 'JobID%x'" in refused.err


@pytest.mark.parametrize("state", ["requeued", "RQ", "resizing", "CF"])
def test_sacct_other_slurm_states_are_accepted(state: str) -> None:
    result = call(history(), "sacct", "-X", "-n", "-s", state)
    assert (result.rc, result.out, result.err) == (0, "", "")


@pytest.mark.parametrize("ids", ["3.bogus", "-1", "abc", "3_[1-2]", "3,x"])
def test_sacct_bad_job_ids_are_refused(ids: str) -> None:
    """They matched nothing and printed an empty table with rc 0."""
    result = call(history(), "sacct", "-j", ids)
    assert result.rc == 1
    assert "sacct: error: Bad job/step specified: " in result.err


@pytest.mark.parametrize("ids", ["3", "3.batch", "3.0", "3.extern", "3_1"])
def test_sacct_good_job_ids_pass(ids: str) -> None:
    result = call(history(), "sacct", "-j", ids)
    assert (result.rc, result.err) == (0, "")


# -- sprio ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ids", ["abc", "1,abc", "-5", "1_x"])
def test_sprio_bad_job_id_is_refused_before_asking(ids: str) -> None:
    """A bad id was sent to the server and matched nothing; FakeClient has no
    ``priorities``, so asking at all would fail the test."""
    result = call(FakeClient(), "sprio", f"--jobs={ids}")
    assert result.rc == 1
    assert result.err.startswith("sprio: error: Invalid job id: ")


def test_sprio_empty_format_is_refused() -> None:
    result = call(FakeClient(), "sprio", "-o", "")
    assert result.rc == 1
    assert result.err.startswith("sprio: error: Format option lacks specification")


# -- scancel --------------------------------------------------------------------------------


class SmallArrays(FakeClient):
    def cluster_config(self, *, validate: bool = True) -> ClusterConfig:
        config = super().cluster_config().model_copy(update={"settings": {"MaxArraySize": "10"}})
        return answered(config, validate=validate, schema="nodes.ClusterConfig")  # type: ignore[no-any-return]


def arrays(client: type[FakeClient] = FakeClient) -> FakeClient:
    return client(job_list=[job(20 + i, array_job_id=20, array_task_id=i) for i in range(1, 4)])


def test_scancel_array_range_past_max_array_size_is_refused() -> None:
    """Each index became a request: 20_[0-5000] sent 5001 of them (20_[0-99999999] would
    never end); Slurm's scancel stops at MaxArraySize."""
    client = arrays()
    result = call(client, "scancel", "20_[0-5000]")
    assert result.rc == 1
    assert result.err == (
        "scancel: error: Invalid job id 20_[0-5000]: array indices are ranges such as "
        "[1-3,7] or [0-15:4], from 0 to 1000 (MaxArraySize=1001)\n"
    )
    assert client.cancelled == []


def test_scancel_uses_the_clusters_max_array_size() -> None:
    client = arrays(SmallArrays)
    assert call(client, "scancel", "20_[0-10]").rc == 1
    result = call(client, "scancel", "20_[1-3]")
    assert (result.rc, result.err) == (0, "")
    assert [t for t, _ in client.cancelled] == ["20_1", "20_2", "20_3"]


def test_scancel_bad_index_names_the_id_not_an_option() -> None:
    result = call(arrays(), "scancel", "20_[1-x]")
    assert result.rc == 1
    assert result.err.startswith("scancel: error: Invalid job id 20_[1-x]: ")
    assert "--job_id" not in result.err


@pytest.mark.parametrize(("word", "job_id"), [("20.batch", "20"), ("20_1.0", "20_1")])
def test_scancel_step_ids_it_cannot_take_say_what_to_do(word: str, job_id: str) -> None:
    """Slurm 22.05.8's scancel refuses ``20.batch`` and ``20.extern`` too ("Invalid job
    id"); HAL takes a step as ``JOB.STEP``, both numbers."""
    client = arrays()
    result = call(client, "scancel", word)
    assert result.rc == 1
    assert result.err.startswith(f"scancel: error: Invalid job id {word}; ")
    assert f"scancel -b {job_id}" in result.err and "(123.4" in result.err
    assert client.cancelled == []


@pytest.mark.parametrize("sig", ["BOGUS", "0", "B:USR1", "USR1@30"])
def test_scancel_unknown_signal_is_slurms_error(sig: str) -> None:
    """The hint offered sbatch's [B:]SIG[@seconds], which scancel does not take."""
    result = call(arrays(), "scancel", "-s", sig, "20")
    assert result.rc == 1
    assert result.err.startswith(f"scancel: error: Unknown job signal: {sig};")
    assert "@" not in result.err.split(";", 1)[1]


# -- srun -----------------------------------------------------------------------------------

IN_JOB = {"SLURM_JOB_ID": "7", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "bogus"], "invalid --time value 'bogus'"),
        (["--time=-5"], "invalid --time value '-5'"),
        (["--mem=10Q"], "invalid --mem value '10Q'"),
        (["--mem-per-cpu", "lots"], "invalid --mem-per-cpu value 'lots'"),
        (["--gres=license:2"], "--gres 'license' is not supported"),
        (["--gpus=x:y:z"], "invalid --gpus"),
        (["-c", "0"], "-c needs a positive integer, got '0'"),
        (["--cpus-per-task=abc"], "--cpus-per-task needs a positive integer"),
        (["--ntasks-per-node=0"], "--ntasks-per-node needs a positive integer"),
        (["-N", "abc"], "invalid --nodes value 'abc'"),
        (["-N", "0"], "invalid --nodes '0'"),
    ],
)
def test_srun_checks_the_values_it_passes_over(
    args: list[str], message: str, tmp_path: Path
) -> None:
    """These were ignored: the command ran and srun exited 0."""
    marker = tmp_path / "ran"
    result = call(
        FakeClient(),
        "srun",
        "-n",
        "2",
        *args,
        "touch",
        str(marker),
        environ=IN_JOB,
        cwd=str(tmp_path),
    )
    assert result.rc == 1
    assert result.err.startswith("srun: error: ") and message in result.err
    assert not marker.exists()


def test_srun_more_nodes_than_the_job_has_is_refused_with_the_reason(tmp_path: Path) -> None:
    """As Slurm's srun refuses a step its allocation cannot hold (here a one-node job),
    before asking the control plane."""
    result = call(FakeClient(), "srun", "-N", "2-3", "true", environ=IN_JOB, cwd=str(tmp_path))
    assert result.rc == 1
    assert result.err.startswith("srun: error: Unable to create step for job ")
    assert "asks for 2 nodes and the job has 1" in result.err


def test_srun_parses_options_as_getopt(tmp_path: Path) -> None:
    """``-ln2`` (clustered flags with a glued value) and ``--`` were unrecognized."""
    result = call(
        FakeClient(),
        "srun",
        "-ln2",
        "--ntasks-per-n",  # an unambiguous abbreviation of --ntasks-per-node
        "2",
        "--",
        "sh",
        "-c",
        'echo "$SLURM_PROCID" >> ranks; exit 3',
        environ=IN_JOB,
        cwd=str(tmp_path),
    )
    assert result.rc == 3
    assert result.err.endswith(": tasks 0-1: Exited with exit code 3\n"), result.err  # srun's
    assert sorted((tmp_path / "ranks").read_text().split()) == ["0", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "srun: error: no command to run: write srun [options] COMMAND"),
        (["-n", "2"], "srun: error: no command to run"),
        (["-n"], "srun: error: option requires an argument -- 'n'"),
    ],
)
def test_srun_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    result = call(FakeClient(), "srun", *args, environ=IN_JOB, cwd=str(tmp_path))
    assert result.rc == 1
    assert result.err.startswith(message)


def test_srun_pty_without_a_terminal_is_disregarded_as_slurms() -> None:
    """Slurm 22.05.8's srun --pty without a terminal says so and runs the command.
    With one it runs task 0 in a terminal of its own (test_srun_pty_server.py)."""
    result = call(FakeClient(), "srun", "--pty", "--jobid=99", "true", environ=IN_JOB)
    assert result.err.startswith(
        "srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device\n"
        "srun: error: Not using a pseudo-terminal, disregarding --pty option\n"
    )


def test_srun_mpi_list_names_what_hal_has() -> None:
    result = call(FakeClient(), "srun", "--mpi=list")
    assert (result.rc, result.out) == (0, "MPI plugin types are...\n\tnone\n")


# SIGINT back to its default first (a background shell starts us with it ignored, and an
# ignored SIGINT stays ignored across exec), then run the command
DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _hal() -> str:
    return str(Path(sys.executable).parent / "hal")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_srun_passes_signals_to_its_tasks(sig: signal.Signals, tmp_path: Path) -> None:
    """A signal to srun killed srun alone (SIGINT with a traceback) and left its tasks
    running; now each task gets it and srun exits 128 + N. SIGINT as Slurm 22.05.8's srun
    takes it: the first only says how the tasks are, a second within a
    second goes on to them."""
    script = 'echo $$ > "pid.$SLURM_PROCID"; exec sleep 30'
    env: dict[str, Any] = {**os.environ, **IN_JOB}
    proc = subprocess.Popen(
        [sys.executable, "-c", DEFAULT_SIGINT, _hal(), "srun", "-n", "2", "sh", "-c", script],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:
            files = [tmp_path / f"pid.{rank}" for rank in range(2)]
            if all(f.exists() and f.read_text().strip() for f in files):
                pids = [int(f.read_text()) for f in files]
            time.sleep(0.05)
        assert len(pids) == 2, "the tasks did not start"
        proc.send_signal(sig)
        if sig == signal.SIGINT:
            time.sleep(0.3)
            for pid in pids:
                os.kill(pid, 0)  # the first Ctrl-C ended nothing
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 128 + int(sig)
        assert b"Traceback" not in err
        if sig == signal.SIGINT:
            lines = [line for line in err.decode().splitlines() if "not recorded" not in line]
            assert lines[:2] == [
                "srun: interrupt (one more within 1 sec to abort)",
                "srun: StepId=7 tasks 0-1: running",
            ], err
            assert lines[2:4] == [
                "srun: sending Ctrl-C to StepId=7",
                "srun: forcing job termination",
            ]
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
