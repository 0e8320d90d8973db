"""Launch-to-end time of a node's part of a job step, in the agent alone: the state
machine's step half and ``StepShell`` start a two-rank ``echo`` step and the time runs
until its end is ready to report.

    python bench/step_launch.py LABEL [RUNS]
    PYTHONPATH=/path/to/other/tree/src python bench/step_launch.py before

Prints the median and 90th percentile over RUNS (default 30) launches, one after the
other. Runs against trees from before steps were in the state machine too (``StepTasks``
then; before the step keeper, without ``steps_dir``).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import tempfile
import time
from typing import Any

from hal.agent import steps
from hal.wire.agent import Launch, StepLaunch


def _step(workdir: str, step_id: int) -> StepLaunch:
    job = Launch(
        job_id=12,
        attempt=0,
        name="j",
        user="ana",
        script="",
        workdir=workdir,
        environment={"PATH": "/usr/bin:/bin"},
        stdout="",
        stderr=None,
        time_limit_seconds=0,
        memory_bytes=0,
        cpus=2,
        nodes=["a1"],
        node_index=0,
    )
    return StepLaunch(
        job_id=12,
        step_id=step_id,
        launch=job,
        argv=["sh", "-c", "echo hi"],
        ranks=[0, 1],
        step_node_index=0,
    )


class _Node:
    """The machine's step half fed by a ``StepShell``, called as ``StepTasks`` was."""

    def __init__(self, steps_dir: str) -> None:
        from hal.agent.state import AgentState

        self.machine = AgentState(node="a1")
        self.shell = steps.StepShell(  # type: ignore[attr-defined,unused-ignore]
            "a1",
            agent="t",
            unknown_users_as_agent=True,
            steps_dir=steps_dir,
            state=self.machine.steps,
            feed=self.feed,
        )

    def feed(self, event: Any) -> None:
        from hal.agent.state import feed
        from hal.agent.stepevents import SyncSoon

        def execute(command: Any) -> Any:
            return [] if isinstance(command, SyncSoon) else self.shell.execute(command)

        feed(self.machine, event, execute)

    async def run(self) -> None:
        await self.shell.run()

    def launch(self, launch: StepLaunch) -> None:
        from hal.agent.stepevents import StepLaunchRequested

        self.feed(StepLaunchRequested(launch, time.time()))

    def outgoing(self) -> Any:
        return self.machine.steps.outgoing()

    def delivered(self, sent: Any) -> None:
        from hal.agent.stepevents import StepsDelivered

        self.feed(StepsDelivered(sent, time.time()))


def _node(workdir: str) -> Any:
    """The tree's node step runner: ``_Node``, or an older tree's ``StepTasks``."""
    if hasattr(steps, "StepShell"):
        return _Node(workdir + "/steps")
    options: dict[str, Any] = {"agent": "t", "unknown_users_as_agent": True, "notify": lambda: None}
    if "steps_dir" in inspect.signature(steps.StepTasks).parameters:  # type: ignore[attr-defined,unused-ignore]
        options["steps_dir"] = workdir + "/steps"
    return steps.StepTasks("a1", **options)  # type: ignore[attr-defined,unused-ignore]


async def _measure(runs: int) -> list[float]:
    workdir = tempfile.mkdtemp()
    tasks = _node(workdir)
    running = asyncio.ensure_future(tasks.run())
    times = []
    for step_id in range(runs):
        began = time.perf_counter()
        tasks.launch(_step(workdir, step_id))
        while not (out := tasks.outgoing()).ends:
            await asyncio.sleep(0.001)
        times.append(time.perf_counter() - began)
        tasks.delivered(out)
    running.cancel()
    return sorted(times)


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "tree"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    times = asyncio.run(_measure(runs))
    median, p90 = times[len(times) // 2], times[int(len(times) * 0.9)]
    print(f"{label}: median {1000 * median:.1f} ms, p90 {1000 * p90:.1f} ms over {runs} launches")


if __name__ == "__main__":
    main()
