"""srun's options as MPI launchers and scripts pass them, on a real server with real
agents, as Slurm 22.05.8's srun behaves (compared on its peer): ``-l`` labels a
step on the batch node too, ``-K`` ends the other tasks when one fails, ``-J`` names the
step and its ``SLURM_JOB_NAME``, ``-D`` is its tasks' directory (on other nodes too, where
they ran in the job's), ``-c`` its ``SLURM_CPUS_PER_TASK``, and options with no effect on a
step in a job (``-p -A -v -X --cpu_bind --mem_bind``...) are taken, not refused."""

from __future__ import annotations

import re
from pathlib import Path

from two_agents import (
    SRUN,
    sacct,
    state,
    submit,
)

from hal.slurm.steps import EXEC_FAILED
from hal.testing.live import LiveServer, wait_until


def run(live: LiveServer, tmp_path: Path, body: str, *args: str) -> tuple[str, str]:
    job_id = submit(live, tmp_path, body, "-o", "out.txt", "-e", "err.txt", *args)
    wait_until(lambda: state(live, job_id) not in ("PENDING", "RUNNING"), 60, message="end")
    return (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()


def test_label_on_the_batch_node(server: LiveServer, tmp_path: Path) -> None:
    out, err = run(server, tmp_path, f"{SRUN} -n2 -l sh -c 'echo a; echo b >&2'\n", "-N1", "-n2")
    assert sorted(out.splitlines()) == ["0: a", "1: a"]
    assert sorted(err.splitlines()) == ["0: b", "1: b"]


def test_kill_on_bad_exit_ends_the_other_tasks(server: LiveServer, tmp_path: Path) -> None:
    body = (
        f"{SRUN} -n2 -K sh -c '[ $SLURM_PROCID = 1 ] && exit 4; sleep 20; echo survived'\n"
        "echo rc=$?\n"
    )
    out, err = run(server, tmp_path, body, "-N1", "-n2")
    assert "survived" not in out and "rc=143" in out, (out, err)
    lines = err.splitlines()
    assert lines[0].endswith(": task 1: Exited with exit code 4"), err
    assert lines[1].startswith("srun: launch/slurm: _step_signal: Terminating StepId=")
    assert "CANCELLED AT" in lines[2]
    assert lines[3].endswith(": task 0: Terminated")
    assert lines[4].startswith("srun: Force Terminated StepId=")
    job_id = int(lines[4].rpartition("=")[2].split(".")[0])
    assert f"{job_id}.0|CANCELLED|0:15" in sacct(server, job_id, "JobID,State,ExitCode")


def test_name_directory_and_cpus_of_the_step(server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    body = (
        f"{SRUN} -n1 -J stepname -D sub -c 2 "
        "sh -c 'pwd; echo $SLURM_JOB_NAME $SLURM_CPUS_PER_TASK'\n"
        f"{SRUN} -N2 -n2 -D sub pwd\n"
        f"{SRUN} -n1 -p any -A any -q any -v -X -W 0 --cpu_bind=none --mem_bind=local true\n"
        "echo rc=$?\n"
    )
    job_id = submit(server, tmp_path, body, "-N2", "-n2", "-c2", "-o", "out.txt")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="its end")
    out = (tmp_path / "out.txt").read_text().splitlines()
    assert out == [str(tmp_path / "sub"), "stepname 2", *[str(tmp_path / "sub")] * 2, "rc=0"]
    steps = sacct(server, job_id, "JobID,JobName")
    assert f"{job_id}.0|stepname" in steps


def test_more_tasks_than_the_jobs_cpus_on_the_node_is_refused(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """Slurm 22.05.8: ``srun -n3`` in a 2-CPU one-node job is refused, rc 1; HAL ran three
    tasks on two CPUs."""
    out, err = run(server, tmp_path, f"{SRUN} -n3 true\necho rc=$?\n", "-N1", "-n2")
    assert out == "rc=1\n"
    assert "More processors requested than permitted" in err, err


def test_input_none_a_rank_or_a_file_per_task(server: LiveServer, tmp_path: Path) -> None:
    """srun -i: ``none`` (what MPICH's hydra passes), one rank, a file per task (``%t``), or
    ``all``, srun's input copied to every task (HAL refused ``-i``, and its tasks shared
    srun's input: one of them read it all)."""
    (tmp_path / "in.0").write_text("zero\n")
    (tmp_path / "in.1").write_text("one\n")
    body = (
        f"echo given | {SRUN} -n2 -l -i 1 sh -c 'cat; echo .'\n"
        f"{SRUN} -n2 -l -i 'in.%t' cat\n"
        f"echo dropped | {SRUN} -n1 --input=none cat\n"
        f"echo both | {SRUN} -n2 -l cat\n"  # -i all, the default: every task reads it
    )
    out, err = run(server, tmp_path, body, "-N1", "-n2")
    assert sorted(out.splitlines()) == [
        "0: .",
        "0: both",
        "0: zero",
        "1: .",
        "1: both",
        "1: given",
        "1: one",
    ], err


def test_input_file_of_each_task_on_other_nodes(server: LiveServer, tmp_path: Path) -> None:
    """srun -i FILE of a step across nodes: each node's agent opens its tasks' files
    (``%t`` the rank, ``%N`` the node), as slurmstepd does; a missing file fails its task
    with Slurm's words, and one srun itself would open refuses the step (HAL refused
    every -i but ``all``/``none`` there; a rank is srun's input: test_step_input_server)."""
    (tmp_path / "in.0").write_text("zero\n")
    (tmp_path / "in.1").write_text("one\n")
    (tmp_path / "node1.txt").write_text("on node1\n")
    (tmp_path / "node2.txt").write_text("on node2\n")
    body = (
        f"{SRUN} -N2 -n2 -l -i 'in.%t' cat\n"
        f"{SRUN} -N2 -n2 -l -i '%N.txt' cat\n"
        f"{SRUN} -N2 -n2 -l -i in.0 cat\n"
        f"{SRUN} -N2 -n2 -i 'gone.%t' cat; echo rc=$?\n"
        f"{SRUN} -N2 -n2 -i gone cat; echo rc=$?\n"
        f"{SRUN} -N2 -n2 -i 1 cat; echo rc=$?\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    lines = out.splitlines()
    assert sorted(lines[:6]) == [
        "0: on node1",
        "0: zero",
        "0: zero",
        "1: on node2",
        "1: one",
        "1: zero",
    ], (out, err)
    # the failed tasks' code is a launch failure's, as when a local task's file is missing
    # (-i 1 with srun's stdin /dev/null, a batch script's: nothing to relay, rank 1 reads
    # EOF; HAL refused it)
    assert lines[6:] == [f"rc={EXEC_FAILED}", "rc=1", "rc=0"], (out, err)
    for rank in (0, 1):
        missing = tmp_path / f"gone.{rank}"
        assert f": task {rank}: Could not open stdin file {missing}: No such file" in err, err
    assert "srun: error: Could not open stdin file: No such file or directory" in err, err


def test_tasks_end_with_a_killed_srun(server: LiveServer, tmp_path: Path) -> None:
    """srun SIGKILLed (it cannot end its tasks): its tasks on the batch node die with it,
    as slurmstepd ends them in Slurm; HAL's ran on, holding the job's CPUs."""
    body = (
        f"{SRUN} -n1 sh -c 'echo $$ > task.pid; exec sleep 300' &\n"
        "while [ ! -s task.pid ]; do sleep 0.1; done\n"
        "kill -KILL $!\nsleep 1\n"
        'if kill -0 "$(cat task.pid)" 2>/dev/null; then echo alive; else echo gone; fi\n'
    )
    out, err = run(server, tmp_path, body, "-N1", "-n1")
    assert out == "gone\n", (out, err)


def test_each_node_knows_its_tasks_ids(server: LiveServer, tmp_path: Path) -> None:
    """SLURM_GTIDS: the step's ranks on the task's node (the batch script's: 0), on the
    batch node and on others, as slurmstepd sets it (HAL set none)."""
    body = (
        "echo batch $SLURM_GTIDS\n"
        f"{SRUN} -N1 -n2 sh -c 'echo local $SLURM_GTIDS'\n"
        f"{SRUN} -N2 -n4 sh -c 'echo $SLURMD_NODENAME $SLURM_GTIDS'\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n4")
    assert sorted(out.splitlines()) == sorted(
        ["batch 0", *["local 0,1"] * 2, *["node1 0,1"] * 2, *["node2 2,3"] * 2]
    ), err


def test_ctrl_c_once_says_how_the_tasks_are_twice_ends_them(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """As Slurm 22.05.8's srun, for a step on other nodes too: a SIGINT says
    ``srun: interrupt (one more within 1 sec to abort)`` and which tasks run; a second
    within a second sends it to them (srun's lines for an ended step, rc 130). HAL ended
    the step at the first."""
    body = (
        f"{SRUN} -N2 -n2 sh -c 'sleep 20; echo survived' & pid=$!\n"
        "sleep 3\nkill -INT $pid\nsleep 1.5\nkill -INT $pid\nsleep 0.3\nkill -INT $pid\n"
        "wait $pid\necho rc=$?\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    assert out == "rc=130\n", (out, err)
    lines = err.splitlines()
    assert lines.count("srun: interrupt (one more within 1 sec to abort)") == 2, err
    assert any(line.endswith(" tasks 0-1: running") for line in lines), err
    assert any(line.startswith("srun: sending Ctrl-C to StepId=") for line in lines), err


def test_more_nodes_than_tasks_is_one_node_with_slurms_warning(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """Slurm 22.05.8: ``srun -N2 -n1`` in a two-node job warns and runs one
    task on one node; HAL asked for a step on both nodes."""
    out, err = run(server, tmp_path, f"{SRUN} -N2 -n1 hostname\necho rc=$?\n", "-N2", "-n2")
    assert out.splitlines()[-1] == "rc=0" and len(out.splitlines()) == 2, (out, err)
    assert "srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1" in err


# srun -K across nodes: task 1 (node2) fails, task 0 (node1) would run 60 s
FAILING = "sh -c 'if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 60; echo survived'"
TIMED = "start=$(date +%s)\n{srun}\necho rc=$? took=$(( $(date +%s) - start ))\n"


def test_kill_on_bad_exit_ends_the_tasks_on_other_nodes(server: LiveServer, tmp_path: Path) -> None:
    """``srun -K`` of a step on other nodes, as on the batch node: the first task to fail
    ends the others on every node (SIGTERM; KillWait 2 s here), srun says the failed
    task's line, "Terminating StepId", slurmstepd's STEP CANCELLED line of the node whose
    task it ended, that task's line and "Force Terminated", and exits 143 (the highest:
    128+SIGTERM), the step CANCELLED 0:15 in sacct, as srun -K's on the batch node. HAL
    ran task 0 its 60 s."""
    body = TIMED.format(srun=f"{SRUN} -K -N2 -n2 {FAILING}")
    job_id = submit(server, tmp_path, body, "-N2", "-n2", "-o", "out.txt", "-e", "err.txt")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="its end")
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    rc, took = out.split()
    assert rc == "rc=143" and int(took.split("=")[1]) < 15, (out, err)
    lines = err.splitlines()
    assert lines[:2] == [
        "srun: error: node2: task 1: Exited with exit code 3",
        f"srun: launch/slurm: _step_signal: Terminating StepId={job_id}.0",
    ], err
    assert re.fullmatch(
        rf"slurmstepd-node1: error: \*\*\* STEP {job_id}\.0 ON node1 CANCELLED AT "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \*\*\*",
        lines[2],
    ), err
    assert lines[3:] == [
        "srun: error: node1: task 0: Terminated",
        f"srun: Force Terminated StepId={job_id}.0",
    ], err
    assert f"{job_id}.0|CANCELLED|0:15" in sacct(server, job_id, "JobID,State,ExitCode")


def test_kill_on_bad_exit_ends_the_failed_tasks_neighbours_too(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """Two tasks a node: task 1 fails on node1; task 0 beside it and tasks 2, 3 on node2
    are ended, each node saying its STEP CANCELLED line."""
    body = TIMED.format(srun=f"{SRUN} -K -N2 -n4 {FAILING}")
    job_id = submit(server, tmp_path, body, "-N2", "-n4", "-o", "out.txt", "-e", "err.txt")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="its end")
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    rc, took = out.split()
    assert rc == "rc=143" and int(took.split("=")[1]) < 15, (out, err)
    lines = err.splitlines()
    assert lines[0] == "srun: error: node1: task 1: Exited with exit code 3", err
    assert lines[1] == f"srun: launch/slurm: _step_signal: Terminating StepId={job_id}.0"
    assert sorted(line.split()[0] for line in lines if "CANCELLED AT" in line) == [
        "slurmstepd-node1:",
        "slurmstepd-node2:",
    ], err
    assert "srun: error: node1: task 0: Terminated" in lines, err
    assert "srun: error: node2: tasks 2-3: Terminated" in lines, err
    assert lines[-1] == f"srun: Force Terminated StepId={job_id}.0", err
    assert lines.count("srun: error: node1: task 1: Exited with exit code 3") == 1, err


def test_without_kill_on_bad_exit_the_other_tasks_run_on(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """``srun -K0`` and no ``-K`` (Slurm's default): a failed task ends nothing else;
    srun exits with its code once the others end."""
    short = FAILING.replace("sleep 60", "sleep 2")
    body = f"{SRUN} -K0 -N2 -n2 {short}\necho rc=$?\n{SRUN} -N2 -n2 {short}\necho rc=$?\n"
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    assert out == "survived\nrc=3\nsurvived\nrc=3\n", (out, err)
    assert err == "srun: error: node2: task 1: Exited with exit code 3\n" * 2, err


def test_kill_on_bad_exit_needs_no_srun_watching(server: LiveServer, tmp_path: Path) -> None:
    """The failure ends the step's other tasks while srun is stopped (its agent tells the
    server, which ends them), not only when srun reads it; srun, continued, says it all."""
    task = (
        "sh -c 'if [ $SLURM_PROCID = 1 ]; then while [ ! -e stopped ]; do sleep 0.1; done; "
        'exit 3; fi; trap "echo ended > ended.txt; exit 1" TERM; touch started; '
        "sleep 60 & wait'"
    )
    body = (
        f"{SRUN} -K -N2 -n2 {task} & pid=$!\n"
        "while [ ! -e started ]; do sleep 0.1; done\n"
        "kill -STOP $pid; touch stopped\n"
        "for i in $(seq 150); do [ -e ended.txt ] && break; sleep 0.1; done\n"
        'cat ended.txt 2>/dev/null || echo "not ended"\n'
        "kill -CONT $pid; wait $pid; echo rc=$?\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    assert out == "ended\nrc=3\n", (out, err)
    assert "srun: launch/slurm: _step_signal: Terminating StepId=" in err, err
    assert err.splitlines()[-1].startswith("srun: Force Terminated StepId="), err
