"""srun -i FILE of a step on other nodes: the agent expands each task's stdin file as
slurmstepd does, and the step keeper opens it in the task, as the task's user, so a file
the user may not read is refused as it would be to the user's own ``cat``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.agent.isolation import Isolation
from hal.agent.plan import task_inputs
from hal.agent.stepkeeper import KeeperPlan, _keep, read_codes
from hal.core.steps import EXEC_FAILED
from hal.wire.agent import Launch, StepLaunch

UNUSED_UID = 54_321


def launch(workdir: str, pattern: str) -> StepLaunch:
    job = Launch(
        job_id=12,
        attempt=0,
        name="j",
        user="ana",
        script="",
        workdir=workdir,
        environment={},
        stdout="",
        stderr=None,
        time_limit_seconds=0,
        memory_bytes=0,
        cpus=2,
        nodes=["a1", "a2"],
        node_index=1,
    )
    return StepLaunch(
        job_id=12,
        step_id=5,
        launch=job,
        argv=["cat"],
        ranks=[2, 3],
        step_node_index=0,
        input=pattern,
    )


def test_each_tasks_file_is_its_pattern_expanded_on_its_node() -> None:
    made = task_inputs(launch("/w", "in.%t.%N.%n.%s.%j.%x"), "a2.example")
    assert made == ("/w/in.2.a2.1.5.12.j", "/w/in.3.a2.1.5.12.j")
    assert task_inputs(launch("/w", "/abs/%2t"), "a2") == ("/abs/02", "/abs/03")
    assert task_inputs(launch("/w", ""), "a2") == ()


@pytest.fixture
def folder() -> Iterator[Path]:
    # outside pytest's root-only tmp directory, open to the tasks' unprivileged user
    made = Path(tempfile.mkdtemp(prefix="hal-input-"))
    made.chmod(0o777)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the tasks as another uid")
def test_the_task_opens_its_file_as_its_user(folder: Path) -> None:
    (folder / "open.txt").write_text("for all\n")
    (folder / "open.txt").chmod(0o644)
    (folder / "secret.txt").write_text("root's\n")
    (folder / "secret.txt").chmod(0o600)
    plan = KeeperPlan(
        node="n1",
        folder=str(folder),
        argv=("cat",),
        env={"PATH": "/usr/bin:/bin"},
        ranks=(0, 1),
        marker="HAL_JOB_MARKER=t.12.0.0",
        workdir=str(folder),
        group="",
        memory_bytes=0,
        gpus=False,
        uid=UNUSED_UID,
        gid=UNUSED_UID,
        groups=(),
        rank_input=(str(folder / "open.txt"), str(folder / "secret.txt")),
    )
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper (the agent's user, root), its tasks as UNUSED_UID
        code = 1
        try:
            os.close(read_end)
            code = _keep(plan, Isolation("none"), write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert read_codes(str(folder)) == {0: 0, 1: EXEC_FAILED}
    assert (folder / "out.0").read_text() == "for all\n"
    assert (folder / "out.1").read_text() == ""
    assert (folder / "err.1").read_text() == (
        f"srun: error: n1: task 1: Could not open stdin file {folder}/secret.txt: "
        "Permission denied\n"
    )
