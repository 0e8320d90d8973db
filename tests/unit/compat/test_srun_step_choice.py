"""srun in a multi-node job: what stays on the batch node (run by srun, only recorded)
and what becomes a job step run by the agents, and how ``-l`` labels the step's output
(``hal.compat.steps``). srun talks to a server that is not there (a closed port): a step
on the batch node still runs, with one warning that it was not recorded; one that needs
the control plane fails."""

from __future__ import annotations

import io
import os
import socket
from pathlib import Path

import pytest

from hal.client.sync import HalClient
from hal.compat import local_step
from hal.compat.commands import run
from hal.compat.seam import Console
from hal.compat.srun import parse_command
from hal.compat.steps import OutputWriter
from hal.core.errors import InvalidRequest, Unavailable

TWO_NODES = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURMD_NODENAME": "node1",
}


NOT_RECORDED = "srun: warning: job step not recorded (cannot reach the HAL server at "


def no_client() -> object:
    raise AssertionError("srun asked the control plane")


def unreachable() -> HalClient:
    return HalClient(url=f"http://127.0.0.1:{_closed_port()}", token="t")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed once the block ends


def srun(tmp_path: Path, *argv: str, environ: dict[str, str] | None = None) -> tuple[int, str]:
    err = io.StringIO()
    rc = run(
        "srun",
        list(argv),
        client_factory=unreachable,
        stdout=io.StringIO(),
        stderr=err,
        environ=TWO_NODES if environ is None else environ,
        cwd=str(tmp_path),
    )
    return rc, err.getvalue()


def test_a_step_on_the_batch_node_alone_runs_here(tmp_path: Path) -> None:
    """`srun -N1 -n2` in a two-node job: Slurm puts it on the first node, the batch
    node; HAL runs it there, and only the record of it needs the server (a step is a
    record, not a gate: the server out of reach is said once, and the tasks run)."""
    task = 'echo "$SLURM_PROCID" >> ranks; exit 3'
    rc, err = srun(tmp_path, "-N1", "-n2", "sh", "-c", task)
    assert rc == 3, err
    assert err.startswith(NOT_RECORDED) and err.count("\n") == 2, err
    assert err.splitlines()[1] == "srun: error: node1: tasks 0-1: Exited with exit code 3"
    assert sorted((tmp_path / "ranks").read_text().split()) == ["0", "1"]


def test_a_signalled_local_task_is_srun_s_128_plus_n_and_said(tmp_path: Path) -> None:
    """A task killed by SIGSEGV: srun exits 139 (the shell's 128+N for it) and says so
    as Slurm's srun does, since the shell no longer sees the signal itself."""
    rc, err = srun(tmp_path, "-n1", "sh", "-c", "kill -SEGV $$")
    assert rc == 139, err
    assert err.splitlines()[1] == "srun: error: node1: task 0: Segmentation fault", err


def test_a_command_that_cannot_start_exits_2(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "-n1", str(tmp_path / "missing"))
    assert rc == 2, err
    assert f"srun: error: cannot run {tmp_path / 'missing'}: No such file or directory" in err


# salloc's command: on the host salloc runs on, without SLURMD_NODENAME
UNDER_SALLOC = {
    "PATH": TWO_NODES["PATH"],
    "SLURM_JOB_ID": "7",
    "SLURM_JOB_NODELIST": "node1",
    "HAL_SALLOC_JOB_ID": "7",
}


def test_under_salloc_even_a_one_node_step_asks_the_control_plane(tmp_path: Path) -> None:
    """srun is not on the allocation's node there: running in place would run the
    command on the submit host."""
    rc, err = srun(tmp_path, "-n1", "true", environ=UNDER_SALLOC)
    assert rc == 1 and err.startswith("srun: error: cannot reach the HAL server"), err


def test_a_batch_job_started_from_salloc_runs_its_one_node_steps_in_place(
    tmp_path: Path,
) -> None:
    """The mark of another job (sbatch run in salloc's shell) does not count."""
    rc, err = srun(tmp_path, "-N1", "-n2", "true", environ={**TWO_NODES, "HAL_SALLOC_JOB_ID": "6"})
    assert rc == 0 and err.startswith(NOT_RECORDED), err


@pytest.mark.parametrize(
    ("option", "field", "count"),
    [
        ("--gpus=1", "gpus", 1),
        ("--gpus=a100:2", "gpus", 2),
        ("--gres=gpu:2", "gpus_per_node", 2),
        ("--gpus-per-node=1", "gpus_per_node", 1),
        ("--gpus-per-task=1", "gpus_per_task", 1),
        ("--gpus=0", "gpus", 0),
    ],
)
def test_a_step_with_gpus_of_its_own_asks_the_control_plane(
    tmp_path: Path, option: str, field: str, count: int
) -> None:
    """Its node's agent, root, binds it to its GPUs: srun, the job's user, cannot; so
    even a one-node step on the batch node is a job step (it fails here, the server
    being out of reach, where a plain one runs)."""
    assert getattr(parse_command([option, "true"]).request, field) == count
    rc, err = srun(tmp_path, "-N1", "-n1", option, "true")
    assert rc == 1 and err.startswith("srun: error: cannot reach the HAL server"), err
    assert srun(tmp_path, "-N1", "-n1", "true")[0] == 0


def test_a_local_step_has_the_jobs_gpus_as_its_own(tmp_path: Path) -> None:
    """As Slurm's step without a GPU option: ``SLURM_STEP_GPUS`` is the job's GPUs."""
    environ = {**TWO_NODES, "SLURM_JOB_GPUS": "1,3", "SLURM_STEP_GPUS": "9"}
    rc, err = srun(tmp_path, "-N1", "-n1", "sh", "-c", "echo $SLURM_STEP_GPUS > g", environ=environ)
    assert rc == 0, err
    assert (tmp_path / "g").read_text() == "1,3\n"


def test_a_node_outside_the_job_is_refused_before_asking(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "-w", "node9", "true")
    assert rc == 1
    assert err.startswith("srun: error: Unable to create step for job 7: ")
    assert "node node9 is not in the job's allocation (node1,node2)" in err


def test_labels_prefix_whole_lines_with_the_rank() -> None:
    """Output comes in pieces that split lines; -l prints each whole line once, behind
    its task's rank, and a last line without a newline at the end."""
    out = io.StringIO()
    console = Console("srun", no_client, out, io.StringIO(), io.StringIO())  # type: ignore[arg-type]
    writer = OutputWriter(console, label=True)
    writer.write(0, "stdout", b"hel")
    writer.write(1, "stdout", b"one\ntw")
    writer.write(0, "stdout", b"lo\nbye")
    writer.close()
    assert out.getvalue().splitlines() == ["1: one", "0: hello", "1: tw", "0: bye"]


def test_srun_lines_in_a_tasks_error_output_are_not_labelled() -> None:
    """The agents add srun's failure lines to a task's error output; Slurm's srun prints
    them itself, unlabelled (on the Slurm peer). With a raw terminal (--pty)
    those lines end CR LF."""
    for raw, end in ((False, "\n"), (True, "\r\n")):
        err = io.StringIO()
        console = Console("srun", no_client, io.StringIO(), err, io.StringIO())  # type: ignore[arg-type]
        writer = OutputWriter(console, label=True, raw=raw)
        writer.write(0, "stderr", b"oops\nsrun: error: n1: tasks 0-1: Exited with exit code 7\n")
        writer.close()
        assert (
            err.getvalue()
            == f"0: oops{end}srun: error: n1: tasks 0-1: Exited with exit code 7{end}"
        )


def test_jobid_of_the_job_srun_runs_in_changes_nothing(tmp_path: Path) -> None:
    """`srun --jobid=$SLURM_JOB_ID -N1 -n2` in the batch job: still in place."""
    rc, err = srun(tmp_path, "--jobid=7", "-N1", "-n2", "true")
    assert rc == 0 and err.startswith(NOT_RECORDED), err


@pytest.mark.parametrize("environ", [{"PATH": TWO_NODES["PATH"]}, TWO_NODES])
def test_jobid_of_another_job_asks_the_control_plane(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """From a login shell, or from inside job 7 naming job 8: a step of that job,
    never a local run."""
    rc, err = srun(tmp_path, "--jobid", "8", "-N1", "-n1", "true", environ=environ)
    assert rc == 1 and err.startswith("srun: error: Unable to confirm allocation for job 8"), err


def test_a_bad_jobid_is_refused(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "--jobid=abc", "true", environ={"PATH": TWO_NODES["PATH"]})
    assert rc == 1
    assert err == "srun: error: --jobid needs a positive integer, got 'abc'\n"


@pytest.mark.parametrize(
    ("argv", "env", "want"),
    [
        (["true"], {}, (None, False, False)),
        (["--exact", "true"], {}, (None, True, False)),
        (["--exclusive", "true"], {}, (None, True, False)),  # a step's --exclusive: exact
        (["-c2", "true"], {}, (2, False, False)),
        (["--overlap", "-n1", "true"], {}, (None, False, True)),
        # Slurm 22.05's srun reads SRUN_CPUS_PER_TASK, not the job's SLURM_CPUS_PER_TASK
        (["true"], {"SRUN_CPUS_PER_TASK": "3", "SLURM_CPUS_PER_TASK": "4"}, (3, False, False)),
        (["-c1", "true"], {"SRUN_CPUS_PER_TASK": "3"}, (1, False, False)),  # -c wins
    ],
)
def test_options_that_decide_the_cpus_a_step_holds(
    argv: list[str], env: dict[str, str], want: tuple[int | None, bool, bool]
) -> None:
    request = parse_command(argv, env).request
    assert (request.cpus_per_task, request.exact, request.overlap) == want


def test_a_bad_srun_cpus_per_task_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="SRUN_CPUS_PER_TASK needs a positive integer"):
        parse_command(["true"], {"SRUN_CPUS_PER_TASK": "two"})


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["true"], (None, None)),
        (["--mem=150M", "true"], (150 << 20, None)),
        (["--mem", "2G", "true"], (2 << 30, None)),
        (["--mem=0", "true"], (0, None)),  # all the job's
        (["--mem-per-cpu=100", "true"], (None, 100 << 20)),  # MiB by default
        # as --mem=0 in Slurm 22.05.8: the step's TRES mem= the job's, SLURM_MEM_PER_NODE
        # the job's, and a second --exact step runs beside it (HAL: 0 per CPU)
        (["--mem-per-cpu=0", "true"], (0, None)),
        (["--mem-per-cpu", "0K", "true"], (0, None)),
    ],
)
def test_options_that_decide_the_memory_a_step_holds(
    argv: list[str], want: tuple[int | None, int | None]
) -> None:
    request = parse_command(argv, {}).request
    assert (request.mem_per_node, request.mem_per_cpu) == want


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mem=150M", "--mem-per-cpu=1G", "true"], "are mutually exclusive"),
        (["--mem-per-cpu=1G", "--mem-per-gpu=1G", "true"], "are mutually exclusive"),
        (["--mem=1G", "--mem-per-cpu=0", "true"], "are mutually exclusive"),
        (["--mem=lots", "true"], "invalid --mem value 'lots'"),
        (["--mem-per-cpu=-1", "true"], "invalid --mem-per-cpu value"),
    ],
)
def test_bad_step_memory_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_command(argv, {})


def test_a_steps_own_time_limit_is_read() -> None:
    assert parse_command(["-t", "0:30", "true"], {}).request.time_limit_s == 60  # (1:00)
    assert parse_command(["--time=2", "true"], {}).request.time_limit_s == 120
    assert parse_command(["true"], {}).request.time_limit_s == 0
    with pytest.raises(InvalidRequest, match="time"):
        parse_command(["-t", "soon", "true"], {})


def test_srun_reports_its_steps_end_to_a_restarting_server_until_it_answers() -> None:
    """The server is away when the step ends (a restart): srun tries again for a while,
    as slurmstepd retries a step's completion, and the step is recorded as it ended
    (before: one warning, and the restarted server ended it CANCELLED with its job);
    one that stays away past END_RETRY_S gets the warning."""

    class Restarting:
        def __init__(self, away: int) -> None:
            self.away, self.tries = away, 0

        def end_local_step(self, job_id: int, step_id: int, **fields: object) -> None:
            self.tries += 1
            if self.tries <= self.away:
                raise Unavailable("cannot reach the HAL server at http://x (refused)")

    for away, warned in ((3, False), (1000, True)):
        client, err, naps = Restarting(away), io.StringIO(), []
        console = Console(
            "srun", lambda c=client: c, io.StringIO(), err, io.StringIO(), sleep=naps.append
        )
        clock = iter(range(0, 10_000, 5))  # five seconds a try
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(local_step.time, "monotonic", lambda c=clock: float(next(c)))
            local_step._report(console, 7, 0, local_step.TasksEnd(0, 0, False), oom=False)
        assert ("was not recorded" in err.getvalue()) == warned, err.getvalue()
        if not warned:
            assert client.tries == 4 and naps == [1.0, 2.0, 4.0]


def test_no_more_nodes_than_tasks() -> None:
    """Slurm 22.05.8's srun, as its sbatch: ``-N 2 -n 1`` warns and runs on
    one node, ``-N 1-4 -n 2`` quietly on at most two."""
    one = parse_command(["-N2", "-n1", "true"], {})
    assert (one.node_range, one.request.nodes) == ((1, 1), 1)
    assert one.warning == "Warning: can't run 1 processes on 2 nodes, setting nnodes to 1"
    quiet = parse_command(["-N", "1-4", "-n", "2", "true"], {})
    assert (quiet.node_range, quiet.warning) == ((1, 2), "")
