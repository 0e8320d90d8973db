"""A step's folder on the node (``hal.agent.stepfolder``) holds the job's environment
(``plan.json``) and launch (``launch.json``): readable by root only, whatever the agent's
umask, under a ``steps/`` directory other users cannot list."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from test_step_tasks import StepNode

from hal.agent.handshake import PLAN_FILE
from hal.agent.stepfolder import LAUNCH_FILE
from hal.wire.agent import Launch, StepLaunch


def launch(tmp_path: Path) -> StepLaunch:
    job = Launch(
        job_id=21,
        attempt=0,
        name="j",
        user="ana",
        script="",
        workdir=str(tmp_path),
        environment={"PATH": "/usr/bin:/bin", "SECRET_TOKEN": "s3cret"},
        stdout="",
        stderr=None,
        time_limit_seconds=0,
        memory_bytes=0,
        cpus=1,
        nodes=["a1"],
        node_index=0,
    )
    return StepLaunch(job_id=21, step_id=0, launch=job, argv=["true"], ranks=[0], step_node_index=0)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_step_folder_is_private(tmp_path: Path) -> None:
    steps = tmp_path / "state" / "steps"

    async def scenario() -> None:
        tasks = StepNode(str(steps), "a1")
        runner = asyncio.ensure_future(tasks.run())
        tasks.launch(launch(tmp_path))
        for _ in range(500):  # the folder stays until the server has the node's end
            if tasks.outgoing().ends:
                break
            await asyncio.sleep(0.01)
        runner.cancel()

    old = os.umask(0o022)
    try:
        asyncio.run(scenario())
    finally:
        os.umask(old)
    folder = steps / "21.0.0"  # job 21, its first run, step 0
    assert mode(steps) == 0o700
    assert mode(folder) == 0o700
    assert mode(folder / LAUNCH_FILE) == 0o600
    assert mode(folder / PLAN_FILE) == 0o600
    assert "s3cret" in (folder / PLAN_FILE).read_text()
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
