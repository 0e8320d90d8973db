"""A step's tasks on one node (``hal.agent.steps.StepShell`` carrying out the machine's
``stepstate`` decisions): real processes with the step's variables, their output held
by offset until a sync carrying it is answered, the node's end after its last byte, and
a signal that reaches a task's whole session."""

from __future__ import annotations

import asyncio
import base64
import signal
import time
from pathlib import Path

from hal.agent.events import Command, Event, Tick
from hal.agent.state import AgentState, feed
from hal.agent.stepevents import (
    StepCommand,
    StepInputArrived,
    StepLaunchRequested,
    StepOutgoing,
    StepsDelivered,
    SyncSoon,
)
from hal.agent.steps import StepShell
from hal.testing.live import tree_stopped
from hal.wire.agent import Launch, StepInput, StepLaunch, StepSignal


def step(tmp_path: Path, script: str, ranks: list[int], step_id: int = 0) -> StepLaunch:
    job = Launch(
        job_id=12,
        attempt=0,
        name="j",
        user="ana",
        script="",
        workdir=str(tmp_path),
        environment={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "batch", "MINE": "kept"},
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
        step_id=step_id,
        launch=job,
        argv=["sh", "-c", script],
        ranks=ranks,
        step_node_index=1,
        environment={"SLURM_STEP_ID": str(step_id), "SLURM_STEP_NUM_TASKS": "4"},
    )


class StepNode:
    """A node's step parts as the agent runs them, without a server: the machine (its
    step half) fed by a ``StepShell``, time passing on the wall clock."""

    def __init__(self, steps_dir: str, node: str = "a2") -> None:
        self.machine = AgentState(node=node)
        self.shell = StepShell(
            node,
            agent="t",
            unknown_users_as_agent=True,
            steps_dir=steps_dir,
            state=self.machine.steps,
            feed=self.feed,
        )

    def feed(self, event: Event) -> None:
        feed(self.machine, event, self._execute)

    def _execute(self, command: Command) -> list[Event]:
        if isinstance(command, SyncSoon):
            return []
        assert isinstance(command, StepCommand), command  # (no batch job here)
        return self.shell.execute(command)

    async def run(self) -> None:
        """The shell's work, and a ``Tick`` at each of the machine's deadlines."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.shell.run())
            while True:
                due = self.machine.next_deadline()
                if due is not None and due <= time.time():
                    self.feed(Tick(time.time()))
                await asyncio.sleep(0.01)

    def launch(self, launch: StepLaunch) -> None:
        self.feed(StepLaunchRequested(launch, time.time()))

    def signal(self, request: StepSignal) -> None:
        self.feed(self.shell.signal_requested(request))

    def input(self, request: StepInput) -> None:
        self.feed(StepInputArrived(request, time.time()))

    def outgoing(self) -> StepOutgoing:
        return self.machine.steps.outgoing()

    def delivered(self, sent: StepOutgoing) -> None:
        self.feed(StepsDelivered(sent, time.time()))

    def pending(self) -> bool:
        return self.machine.steps.pending()


async def until_ended(tasks: StepNode) -> StepOutgoing:
    for _ in range(500):
        sent = tasks.outgoing()
        if sent.ends:
            return sent
        await asyncio.sleep(0.01)
    raise AssertionError("the step did not end")


def node_tasks(tmp_path: Path) -> StepNode:
    """A node's step parts for the tests' steps (as the agent, not a job user)."""
    return StepNode(str(tmp_path / "steps"))


def text(sent: StepOutgoing) -> dict[tuple[int, str], str]:
    return {(o.rank, o.stream): base64.b64decode(o.data_b64).decode() for o in sent.output}


def test_tasks_run_with_their_ranks_and_the_highest_exit_code_ends_the_node(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        # rank 3 outlives rank 2, whose cleanup must spare it (it once killed every
        # task of the step: they shared one marker)
        script = (
            "[ $SLURM_PROCID = 3 ] && sleep 0.5; "
            'echo "$SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME '
            '$SLURM_STEP_NUM_TASKS $MINE"; echo oops >&2; exit $((SLURM_PROCID))'
        )
        tasks.launch(step(tmp_path, script, [2, 3]))
        sent = await until_ended(tasks)
        assert text(sent) == {
            (2, "stdout"): "2 0 1 a2 4 kept\n",
            (3, "stdout"): "3 1 1 a2 4 kept\n",
            # and srun's lines for the node's tasks that failed, as Slurm's srun prints
            (2, "stderr"): "oops\nsrun: error: a2: task 2: Exited with exit code 2\n"
            "srun: error: a2: task 3: Exited with exit code 3\n",
            (3, "stderr"): "oops\n",
        }
        assert [(e.step_id, e.exit_code) for e in sent.ends] == [(0, 3)]
        again = tasks.outgoing()  # not answered yet: the same bytes at the same offsets
        assert [(o.rank, o.offset) for o in again.output] == [
            (o.rank, o.offset) for o in sent.output
        ]
        tasks.delivered(sent)
        assert not tasks.pending()
        tasks.launch(step(tmp_path, "true", [2]))  # the same step again: ignored
        assert not tasks.pending()
        runner.cancel()

    asyncio.run(scenario())


def test_a_signal_ends_the_task_and_its_session(tmp_path: Path) -> None:
    """SIGTERM to the step reaches the task's background children too (its session),
    and the node's exit code says which signal ended the task (128 + 15)."""

    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        script = "sleep 300 & echo $! > child; exec sleep 300"
        tasks.launch(step(tmp_path, script, [0], step_id=4))
        child = tmp_path / "child"
        for _ in range(500):
            if child.exists() and child.read_text().strip():
                break
            await asyncio.sleep(0.01)
        pid = int(child.read_text())
        tasks.signal(StepSignal(job_id=12, step_id=4, signal=15, kill_wait_seconds=5))
        sent = await until_ended(tasks)
        assert [(e.step_id, e.exit_code) for e in sent.ends] == [(4, 143)]
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
        )
        runner.cancel()

    asyncio.run(scenario())


def test_a_step_stopped_before_its_tasks_start_starts_them_stopped(tmp_path: Path) -> None:
    """The job is suspended between the step's launch and its tasks' start (the two
    instructions come in one sync): the tasks start stopped, do not end while stopped,
    and end as they would have once SIGCONT comes."""

    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        tasks.launch(step(tmp_path, "sleep 0.2; echo ran; exit 3", [0], step_id=5))
        tasks.signal(StepSignal(job_id=12, step_id=5, signal=signal.SIGSTOP))
        for _ in range(500):
            if (found := tasks.shell.usage_targets()) and tree_stopped(found[0][4]):
                break
            await asyncio.sleep(0.01)
        assert found and tree_stopped(found[0][4])
        assert not tasks.outgoing().ends and not tasks.outgoing().output
        tasks.signal(StepSignal(job_id=12, step_id=5, signal=signal.SIGCONT))
        sent = await until_ended(tasks)
        assert [(e.step_id, e.exit_code) for e in sent.ends] == [(5, 3)]
        assert text(sent) == {
            (0, "stdout"): "ran\n",
            (0, "stderr"): "srun: error: a2: task 0: Exited with exit code 3\n",
        }
        runner.cancel()

    asyncio.run(scenario())


def test_kill_on_bad_exit_says_the_first_failure_and_reports_it_at_once(tmp_path: Path) -> None:
    """srun -K: the first task here to fail, while its neighbour runs, is said at once in
    its error output (srun's line and "Terminating StepId") and reported in the next sync
    until one is answered; the server's SIGTERM then ends the neighbour, and the node's
    end says only the neighbour's line (the failed task's was said)."""

    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        script = "[ $SLURM_PROCID = 3 ] && { echo oops >&2; exit 4; }; exec sleep 300"
        tasks.launch(step(tmp_path, script, [2, 3]).model_copy(update={"kill_on_bad_exit": True}))
        for _ in range(500):
            sent = tasks.outgoing()
            if sent.bad_exits:
                break
            await asyncio.sleep(0.01)
        assert [(b.step_id, b.rank, b.exit_code) for b in sent.bad_exits] == [(0, 3, 4)]
        assert not sent.ends
        assert text(sent)[(3, "stderr")] == (
            "oops\nsrun: error: a2: task 3: Exited with exit code 4\n"
            "srun: launch/slurm: _step_signal: Terminating StepId=12.0\n"
        )
        assert tasks.outgoing().bad_exits == sent.bad_exits  # (not answered yet)
        tasks.delivered(sent)
        assert not tasks.outgoing().bad_exits
        tasks.signal(
            StepSignal(job_id=12, step_id=0, signal=15, kill_wait_seconds=5, cancelled_at=1e9)
        )
        ended = await until_ended(tasks)
        assert [(e.step_id, e.exit_code, e.exit_signal) for e in ended.ends] == [(0, 143, 15)]
        said = text(ended)[(2, "stderr")].splitlines()
        assert said[0].startswith("slurmstepd-a2: error: *** STEP 12.0 ON a2 CANCELLED AT ")
        assert said[1:] == ["srun: error: a2: task 2: Terminated"]
        assert (3, "stderr") not in text(ended)  # (its line once)
        runner.cancel()

    asyncio.run(scenario())


def test_without_kill_on_bad_exit_nothing_is_reported_before_the_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        tasks.launch(step(tmp_path, "[ $SLURM_PROCID = 3 ] && exit 4; sleep 0.5", [2, 3]))
        sent = await until_ended(tasks)
        assert not sent.bad_exits
        assert text(sent)[(2, "stderr")] == "srun: error: a2: task 3: Exited with exit code 4\n"
        runner.cancel()

    asyncio.run(scenario())
