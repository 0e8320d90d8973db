"""An agent upgraded in place adopts the step parts its predecessor left running: the
folder format (``hal.agent.stepfolder``) is read as earlier agents wrote it, file by
file, including a keeper plan from before its newer fields."""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_step_tasks import StepNode, step

from hal.agent.cpus import CpuPool
from hal.agent.records import StepPhase
from hal.wire.agent import StepLaunch

KILL_WAIT = 10


def launch(step_id: int) -> StepLaunch:
    return step(Path("/w"), "./app", [2, 3], step_id).model_copy(
        update={"time_limit_seconds": 60, "kill_wait_seconds": KILL_WAIT, "kill_on_bad_exit": True}
    )


def older_plan(folder: Path) -> str:
    """A keeper plan as an agent before srun's input relay and --pty wrote it."""
    return json.dumps(
        {
            "node": "n1",
            "folder": str(folder),
            "argv": ["./app"],
            "env": {"PATH": "/usr/bin:/bin"},
            "ranks": [2, 3],
            "marker": "HAL_JOB_MARKER=t.12.0.3",
            "workdir": "/w",
            "group": "/sys/fs/cgroup/hal/n1.x/job_12.0/step_3",
            "memory_bytes": 0,
            "gpus": False,
            "uid": None,
            "gid": None,
            "groups": None,
            "umask": -1,
            "rank_argv": [],
            "rank_env": [],
            "cpu_ids": [4, 5],
        }
    )


def write_part(steps: Path, step_id: int) -> Path:
    """The files an earlier agent, its launcher and the keeper left for one part."""
    folder = steps / f"12.0.{step_id}"
    folder.mkdir(parents=True)
    (folder / "launch.json").write_text(launch(step_id).model_dump_json())
    (folder / "plan.json").write_text(older_plan(folder))
    (folder / "supervisor").write_text("4194000 12345")  # (a keeper long gone)
    (folder / "tasks").write_text("2 4194001 12346\n3 4194002 12347\n")
    (folder / "out.2").write_text("before the restart\n")
    os.utime(folder / "launch.json", (950.0, 950.0))
    return folder


def test_a_part_left_by_an_earlier_agent_is_adopted_as_it_was(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    timed = write_part(steps, 3)
    (timed / "timed-out").touch()
    os.utime(timed / "timed-out", (990.0, 990.0))
    (timed / "bad-exit").write_text("3 4\n")
    (timed / "made-job-group").touch()
    write_part(steps, 4)
    (steps / "12.0.5").mkdir()  # an agent that stopped while writing it: no launch
    (steps / "12.0.5" / "plan.json").write_text("{")

    node = StepNode(str(steps), "n1")
    node.shell.cpus = CpuPool((4, 5, 6, 7))
    assert node.shell.adopt() == 2
    assert not (steps / "12.0.5").exists()  # unreadable: removed, not adopted

    part = node.machine.steps.parts[(12, 0, 3)]
    assert part.phase is StepPhase.RUNNING and part.began == 950.0
    assert part.failed == (3, 4)  # said before the restart: not said again
    assert part.timed_out and part.ending and part.kill_at == 990.0 + KILL_WAIT
    held = node.shell._parts[(12, 0, 3)]
    assert held.group == "/sys/fs/cgroup/hal/n1.x/job_12.0/step_3"
    assert node.shell._made_groups == {(12, 0)}
    assert node.shell.cpus.holds((12, 0)) and node.shell._cpu_jobs == {(12, 0)}

    other = node.machine.steps.parts[(12, 0, 4)]
    assert not other.timed_out and other.failed is None
    assert node.machine.next_deadline() == 990.0 + KILL_WAIT  # part 3's SIGKILL is next
    assert [s.step_id for s in node.machine.steps.running()] == [3, 4]
