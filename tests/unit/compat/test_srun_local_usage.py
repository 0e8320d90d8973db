"""srun's end report of a step it ran on the batch node carries what each task used
(``StepClose.tasks``): ``wait4`` of its child gives the task's most resident memory,
when it is above what the task inherited of srun at its fork, and its CPU seconds, user
and system apart too (sacct's UserCPU and SystemCPU)."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

from compat_fakes import FakeClient, call

MiB = 1 << 20
ONE_NODE = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NODELIST": "node1",
    "SLURMD_NODENAME": "node1",
}
# rank 1: SIZE bytes, every page written, then about 0.3 s of CPU; rank 0 ends at once
HOG = (
    "import os, sys, time\n"
    "if os.environ['SLURM_PROCID'] == '1':\n"
    "    x = bytearray(int(sys.argv[1])); x[::4096] = b'y' * (len(x) // 4096)\n"
    "    t = time.process_time()\n"
    "    while time.process_time() - t < 0.3: pass\n"
)


def test_the_end_report_has_each_tasks_memory_and_cpu(tmp_path: Path) -> None:
    # srun runs in this process here: a task's peak counts only above ours (own_max_rss)
    size = max(80 * MiB, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + 40 * MiB)
    client = FakeClient()
    done = call(
        client,
        "srun",
        "-n2",
        sys.executable,
        "-c",
        HOG,
        str(size),
        environ=ONE_NODE,
        cwd=str(tmp_path),
    )
    assert done.rc == 0, done.err
    assert client.local_ends == [(7, 0, 0, 0, False)]
    (tasks,) = client.local_tasks
    used = {rank: (rss, cpu) for rank, rss, cpu, _, _ in tasks}
    assert sorted(used) == [0, 1], tasks
    assert used[1][0] >= size, tasks
    # (both ranks pay the fork from this test process and their exec; from a pytest grown
    # to hundreds of MiB that alone took rank 0 0.31 s of system time in a full CI run)
    assert used[1][1] >= 0.25 and used[1][1] - used[0][1] >= 0.2, tasks


# rank 0 about 0.4 s of user time (a loop that asks for its CPU time rarely: each ask is
# a system call), rank 1 about 0.4 s of system time (the kernel filling a buffer from
# /dev/zero, again and again)
SPLIT = (
    "import os, time\n"
    "t = time.process_time()\n"
    "if os.environ['SLURM_PROCID'] == '0':\n"
    "    while time.process_time() - t < 0.4: sum(range(10000))\n"
    "else:\n"
    "    fd, buf = os.open('/dev/zero', os.O_RDONLY), bytearray(1 << 20)\n"
    "    while time.process_time() - t < 0.4: os.readv(fd, [buf])\n"
)


def test_the_end_report_has_each_tasks_user_and_system_time_apart(tmp_path: Path) -> None:
    client = FakeClient()
    argv = ["srun", "-n2", sys.executable, "-c", SPLIT]
    done = call(client, *argv, environ=ONE_NODE, cwd=str(tmp_path))
    assert done.rc == 0, done.err
    (tasks,) = client.local_tasks
    used = {rank: (cpu, user, system) for rank, _, cpu, user, system in tasks}
    assert sorted(used) == [0, 1], tasks
    for cpu, user, system in used.values():
        assert user + system == cpu, tasks
    # (each rank against the other: both pay the same fork and exec, which from a large
    # test process is itself a good part of a second of system time)
    assert used[0][1] >= 0.3 and used[0][1] > used[1][1] + 0.2, tasks  # the loop: user time
    assert used[1][2] >= 0.2 and used[1][2] > used[0][2] + 0.1, tasks  # the reads: system


def test_each_task_has_its_own_pid_in_slurm_task_pid(tmp_path: Path) -> None:
    """Slurm 22.05.8: in ``srun -n2 sh -c 'echo $SLURM_TASK_PID $$ $PPID'``
    inside a batch job each task's SLURM_TASK_PID is its own pid (``$$``), its parent
    slurmstepd; HAL's tasks had the batch script's. srun's own environment is as it was."""
    before = dict(os.environ)
    client = FakeClient()
    done = call(
        client,
        "srun",
        "-n2",
        "sh",
        "-c",
        'echo "$SLURM_TASK_PID $$ $PPID $SLURM_PROCID $ONLY_HERE" > "task-$SLURM_PROCID"',
        environ={**ONE_NODE, "SLURM_TASK_PID": "1", "ONLY_HERE": "yes"},
        cwd=str(tmp_path),
    )
    assert done.rc == 0, done.err
    pids = set()
    for rank in (0, 1):
        task_pid, own, parent, procid, only_here = (tmp_path / f"task-{rank}").read_text().split()
        assert task_pid == own != "1", (rank, task_pid, own)
        assert (parent, procid, only_here) == (str(os.getpid()), str(rank), "yes")
        pids.add(own)
    assert len(pids) == 2
    assert dict(os.environ) == before


def test_a_command_is_found_on_the_tasks_path(tmp_path: Path) -> None:
    """The task's PATH (srun's input environment), not the caller's, finds its command;
    one found nowhere is said as before and srun exits as for a task that cannot start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "only-on-task-path"
    tool.write_text('#!/bin/sh\necho "found $SLURM_PROCID" > "$1"\n')
    tool.chmod(0o755)
    environ = {**ONE_NODE, "PATH": f"{bin_dir}:{ONE_NODE['PATH']}", "SLURM_NTASKS": "1"}
    out = tmp_path / "out"
    done = call(
        FakeClient(), "srun", "only-on-task-path", str(out), environ=environ, cwd=str(tmp_path)
    )
    assert done.rc == 0, done.err
    assert out.read_text() == "found 0\n"
    missing = call(FakeClient(), "srun", "no-such-command-x", environ=ONE_NODE, cwd=str(tmp_path))
    assert missing.rc != 0
    assert "cannot run no-such-command-x: No such file or directory" in missing.err
