"""A step keeper that cannot start one of its tasks (``fork`` refused: the user's process
limit is reached) goes on as slurmstepd does: that rank ends as a task that could not
start (exit 2, pid 0), the ranks already started are recorded and waited for, and the
keeper leaks no descriptor. It used to exit before writing its tasks file, leaving the
started ranks orphaned and unrecorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.agent.stepkeeper import read_codes, read_tasks

UNUSED_UID = 54_321  # a uid no user has, for other tests' tasks
# the keeper's uid here, which no other test's processes take: RLIMIT_NPROC counts every
# process of the uid on the machine, and tests on other workers run tasks as UNUSED_UID
NPROC_UID = 54_329


@pytest.fixture
def folder() -> Iterator[Path]:
    # outside pytest's root-only tmp directory, open to the unprivileged keeper
    made = Path(tempfile.mkdtemp(prefix="hal-keeper-"))
    made.chmod(0o777)
    yield made
    shutil.rmtree(made, ignore_errors=True)


# The keeper runs in a fresh interpreter, not a fork of this worker: a fork inherits
# whatever the worker's other tests left behind (a logging handler that starts a thread,
# say), and under a process limit of two that thread cannot start.
KEEPER = """
import json, os, resource, sys
from hal.agent.isolation import Isolation
from hal.agent.stepkeeper import KeeperPlan, keep
folder, started_w, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plan = KeeperPlan(
    node="n1", folder=folder, argv=("sh", "-c", "exit 3"), env={"PATH": "/usr/bin:/bin"},
    ranks=(0, 1), marker="HAL_JOB_MARKER=t.12.0.0", workdir=folder, group="",
    memory_bytes=0, gpus=False,
)
result = {}
try:
    resource.setrlimit(resource.RLIMIT_NPROC, (2, 2))  # itself and one task
    os.setgid(uid)
    os.setuid(uid)
    before = sorted(set(os.listdir("/proc/self/fd")) - {str(started_w)})
    result["code"] = keep(plan, Isolation("none"), started_w)
    result["leaked"] = sorted(set(os.listdir("/proc/self/fd")) - set(before))
except BaseException as err:
    result["raised"] = repr(err)
with open(os.path.join(folder, "result.json"), "w") as f:
    json.dump(result, f)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the keeper as another uid")
def test_a_task_that_cannot_be_forked_ends_as_not_started(folder: Path) -> None:
    started_r, started_w = os.pipe()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    keeper = subprocess.Popen(
        [sys.executable, "-c", KEEPER, str(folder), str(started_w), str(NPROC_UID)],
        pass_fds=(started_w,),
        env=env,
    )
    os.close(started_w)
    said = os.read(started_r, 1)
    os.close(started_r)
    assert keeper.wait(timeout=60) == 0
    result = json.loads((folder / "result.json").read_text())
    assert result == {"code": 0, "leaked": []}, result
    assert said == b"T"  # the agent is told the tasks are recorded
    tasks = read_tasks(str(folder))
    assert tasks is not None and tasks[0][0] > 0 and tasks[1] == (0, 0), tasks
    assert read_codes(str(folder)) == {0: 3, 1: 2}
    said = (folder / "err.1").read_text()
    assert said.startswith("srun: error: n1: task 1: cannot run sh in "), said
    assert said.endswith(": Resource temporarily unavailable\n"), said
