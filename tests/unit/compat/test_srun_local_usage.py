"""srun's end report of a step it ran on the batch node carries what each task used
(``StepClose.tasks``): ``wait4`` of its child gives the task's most resident memory,
when it is above what the task inherited of srun at its fork, and its CPU seconds."""

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
    used = {rank: (rss, cpu) for rank, rss, cpu in tasks}
    assert sorted(used) == [0, 1], tasks
    assert used[1][0] >= size, tasks
    assert used[1][1] >= 0.25 > used[0][1], tasks
