"""srun -i FILE of a step on other nodes: the agent expands each task's stdin file as
slurmstepd does, and the step keeper opens it in the task, as the task's user, so a file
the user may not read is refused as it would be to the user's own ``cat``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_step_tasks import step
from test_stepkeeper_start_failure import UNUSED_UID, folder  # noqa: F401  (a fixture)

from hal.agent.isolation import Isolation
from hal.agent.plan import task_inputs
from hal.agent.stepkeeper import KeeperPlan, _keep, read_codes
from hal.slurm.steps import EXEC_FAILED
from hal.wire.agent import StepLaunch


def launch(workdir: Path, pattern: str) -> StepLaunch:
    return step(workdir, "cat", [2, 3], step_id=5).model_copy(update={"input": pattern})


def test_each_tasks_file_is_its_pattern_expanded_on_its_node(tmp_path: Path) -> None:
    made = task_inputs(launch(tmp_path, "in.%t.%N.%n.%s.%j.%x"), "a2.example")
    assert made == (f"{tmp_path}/in.2.a2.1.5.12.j", f"{tmp_path}/in.3.a2.1.5.12.j")
    assert task_inputs(launch(tmp_path, "/abs/%2t"), "a2") == ("/abs/02", "/abs/03")
    assert task_inputs(launch(tmp_path, ""), "a2") == ()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the tasks as another uid")
def test_the_task_opens_its_file_as_its_user(folder: Path) -> None:  # noqa: F811
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
